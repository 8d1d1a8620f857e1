"""Network options (by kind) and network schemas (what each kind's properties mean).

Options are stored as one JSON object per ``(project, kind, pump_id)``: the option sets are fixed by
EPANET, read whole by ``get_network_options`` and never filtered by value, so a JSON object per kind
is simpler than dozens of columns and keeps the importer honest (it stores what WNTR read). Pump energy
options exist once per pump (``pump_id`` = the pump's element id); the other kinds have ``pump_id=""``.

Schemas are a fixed set of kinds (``SchemaKind``) written per project by the importer from
``NETWORK_SCHEMAS`` below, so a project's schema rows always describe the units its rows are stored in.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from queries.scada_units import QUANTITY_NAMES, STORAGE_UNITS


class OptionKind(models.TextChoices):
    HYDRAULIC = "hydraulic"
    TIME = "time"
    ENERGY = "energy"
    PUMP_ENERGY = "pump_energy"


class NetworkOptions(models.Model):
    """One kind of network options of a project (EPANET [OPTIONS]/[TIMES]/[ENERGY] sections), in SI
    units and seconds. ``pump_id`` is set only for ``kind=pump_energy`` (one row per pump)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=OptionKind.choices)
    pump_id = models.CharField(max_length=64, blank=True, default="")
    values = models.JSONField(default=dict)

    class Meta:
        ordering = ["project_id", "kind", "pump_id"]
        verbose_name_plural = "network options"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "kind", "pump_id"], name="networkoptions_project_kind_pump_uniq"
            ),
            models.CheckConstraint(
                condition=(models.Q(kind="pump_energy") & ~models.Q(pump_id=""))
                | (~models.Q(kind="pump_energy") & models.Q(pump_id="")),
                name="networkoptions_pump_id_iff_pump_energy",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.pump_id}".strip()


class SchemaKind(models.TextChoices):
    JUNCTION = "junction"
    RESERVOIR = "reservoir"
    TANK = "tank"
    PIPE = "pipe"
    PUMP = "pump"
    VALVE = "valve"
    SCADA_DEVICE = "scada-device"
    HYDRAULIC = "hydraulic"
    TIME = "time"
    ENERGY = "energy"
    PUMP_ENERGY = "pump_energy"


class NetworkSchema(models.Model):
    """The description of one kind: ``properties`` is a list of ``{name, type, unit, enum,
    description}`` objects (unit ``""`` when dimensionless, enum ``null`` when free)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=SchemaKind.choices)
    description = models.CharField(max_length=300, blank=True, default="")
    properties = models.JSONField(default=list)

    class Meta:
        ordering = ["project_id", "kind"]
        constraints = [models.UniqueConstraint(fields=["project", "kind"], name="networkschema_project_kind_uniq")]

    def __str__(self) -> str:
        return self.kind


def _p(name: str, type_: str, unit: str = "", description: str = "", enum: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "type": type_, "unit": unit, "enum": enum, "description": description}


_STATUS = ["OPEN", "CLOSED", "ACTIVE", "CV"]
_NODE_COMMON = [
    _p("element_id", "string", description="network id"),
    _p("tag", "string"),
    _p("initial_quality", "number", "", "unit by the quality type: mg/L (chemical), s (age) or % (trace)"),
    _p("longitude", "number", "degree", "EPSG:4326"),
    _p("latitude", "number", "degree", "EPSG:4326"),
]
_LINK_COMMON = [
    _p("element_id", "string", description="network id"),
    _p("tag", "string"),
    _p("start_node_id", "string"),
    _p("end_node_id", "string"),
    _p("initial_status", "string", enum=_STATUS),
]

#: The fixed schema of every kind, in the units rows are stored in (SI as WNTR reports them).
NETWORK_SCHEMAS: dict[str, dict[str, Any]] = {
    "junction": {
        "description": "Demand node",
        "properties": [
            *_NODE_COMMON,
            _p("elevation", "number", "m"),
            _p("base_demand", "number", "m3/s"),
            _p("demand_pattern", "string", description="pattern id, empty = default pattern"),
            _p("demand_category", "string"),
            _p("emitter_coefficient", "number", "m3/s/m^0.5", "null when none"),
        ],
    },
    "reservoir": {
        "description": "Fixed-head source",
        "properties": [
            *_NODE_COMMON,
            _p("base_head", "number", "m"),
            _p("head_pattern", "string", description="pattern id"),
        ],
    },
    "tank": {
        "description": "Storage tank",
        "properties": [
            *_NODE_COMMON,
            _p("elevation", "number", "m", "bottom elevation"),
            _p("init_level", "number", "m"),
            _p("min_level", "number", "m"),
            _p("max_level", "number", "m"),
            _p("diameter", "number", "m"),
            _p("min_volume", "number", "m3"),
            _p("volume_curve", "string", description="curve id, empty = cylindrical"),
            _p("overflow", "boolean"),
            _p("mixing_model", "string", enum=["MIXED", "2COMP", "FIFO", "LIFO"]),
        ],
    },
    "pipe": {
        "description": "Pipe",
        "properties": [
            *_LINK_COMMON,
            _p("length", "number", "m"),
            _p("diameter", "number", "m"),
            _p("roughness", "number", "", "H-W C or C-M n (unitless), D-W roughness height in m (hydraulic options)"),
            _p("minor_loss", "number"),
            _p("check_valve", "boolean"),
            _p("bulk_coeff", "number", "1/s", "first-order bulk reaction coefficient"),
            _p("wall_coeff", "number", "m/s", "first-order wall reaction coefficient"),
        ],
    },
    "pump": {
        "description": "Pump",
        "properties": [
            *_LINK_COMMON,
            _p("pump_type", "string", enum=["HEAD", "POWER"]),
            _p("pump_curve", "string", description="head curve id (HEAD pumps)"),
            _p("power", "number", "W", "constant power (POWER pumps)"),
            _p("speed", "number", "", "relative speed"),
            _p("speed_pattern", "string"),
            _p("efficiency_curve", "string"),
            _p("energy_price", "number", "currency/kWh"),
            _p("energy_pattern", "string"),
        ],
    },
    "valve": {
        "description": "Control valve",
        "properties": [
            *_LINK_COMMON,
            _p("valve_type", "string", enum=["PRV", "PSV", "PBV", "FCV", "TCV", "GPV"]),
            _p("diameter", "number", "m"),
            _p("setting", "number", "m | m3/s | -", "pressure (PRV/PSV/PBV), flow (FCV), loss coefficient (TCV)"),
            _p("headloss_curve", "string", description="GPV only"),
            _p("minor_loss", "number"),
        ],
    },
    "scada-device": {
        "description": "SCADA measuring device",
        "properties": [
            _p("device_id", "string"),
            _p("name", "string"),
            _p("quantity", "string", enum=list(QUANTITY_NAMES)),
            _p("unit", "string", description="storage unit of the quantity", enum=sorted(set(STORAGE_UNITS.values()))),
            _p("native_unit", "string", description="the unit the device's historian reports (converted on import)"),
            _p("element_type", "string", enum=["junction", "reservoir", "tank", "pipe", "pump", "valve"]),
            _p("element_id", "string"),
            _p("longitude", "number", "degree"),
            _p("latitude", "number", "degree"),
        ],
    },
    "hydraulic": {
        "description": "Hydraulic options ([OPTIONS])",
        "properties": [
            _p("headloss", "string", enum=["H-W", "D-W", "C-M"]),
            _p("demand_model", "string", enum=["DDA", "PDA"]),
            _p("demand_multiplier", "number"),
            _p("pattern", "string", description="default demand pattern"),
            _p("viscosity", "number", "", "relative to water at 20 °C"),
            _p("specific_gravity", "number"),
            _p("trials", "integer"),
            _p("accuracy", "number"),
            _p("unbalanced", "string", enum=["STOP", "CONTINUE"]),
            _p("minimum_pressure", "number", "m"),
            _p("required_pressure", "number", "m"),
            _p("pressure_exponent", "number"),
            _p("emitter_exponent", "number"),
            _p("inpfile_units", "string", description="flow units of the source .inp"),
        ],
    },
    "time": {
        "description": "Time options ([TIMES]), seconds",
        "properties": [
            _p("duration", "number", "s"),
            _p("hydraulic_timestep", "number", "s"),
            _p("quality_timestep", "number", "s"),
            _p("pattern_timestep", "number", "s"),
            _p("pattern_start", "number", "s"),
            _p("report_timestep", "number", "s"),
            _p("report_start", "number", "s"),
            _p("start_clocktime", "number", "s"),
            _p("rule_timestep", "number", "s"),
            _p("statistic", "string", enum=["NONE", "AVERAGED", "MINIMUM", "MAXIMUM", "RANGE"]),
        ],
    },
    "energy": {
        "description": "Global energy options ([ENERGY])",
        "properties": [
            _p("global_price", "number", "currency/kWh"),
            _p("global_pattern", "string"),
            _p("global_efficiency", "number", "%"),
            _p("demand_charge", "number", "currency/kW"),
        ],
    },
    "pump_energy": {
        "description": "Energy options of one pump ([ENERGY] PUMP lines)",
        "properties": [
            _p("pump_id", "string"),
            _p("efficiency_curve", "string"),
            _p("energy_price", "number", "currency/kWh"),
            _p("energy_pattern", "string"),
        ],
    },
}


#: The quantity (``queries.units``) of each numeric property with a unit, by kind: what ``units`` of a
#: result names before ``queries.units.present`` turns it into the project's unit system. A property
#: not listed keeps its schema unit as it is (seconds, degrees, prices, the valve setting whose unit
#: depends on the valve type).
FIELD_QUANTITIES: dict[str, dict[str, str]] = {
    "junction": {"elevation": "length", "base_demand": "flow", "emitter_coefficient": "emitter_coefficient",
                 "initial_quality": "quality"},
    "reservoir": {"base_head": "head", "initial_quality": "quality"},
    "tank": {"elevation": "length", "init_level": "length", "min_level": "length", "max_level": "length",
             "diameter": "tank_diameter", "min_volume": "volume", "initial_quality": "quality"},
    "pipe": {"length": "length", "diameter": "pipe_diameter", "roughness": "roughness", "bulk_coeff": "bulk_rate",
             "wall_coeff": "wall_rate"},
    "pump": {"power": "power"},
    "valve": {"diameter": "pipe_diameter"},
    "hydraulic": {"minimum_pressure": "pressure", "required_pressure": "pressure"},
}  # fmt: skip
