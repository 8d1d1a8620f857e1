"""The what-if simulation (``run_simulation``): the model over a window with the investigator's changes —
a link closed or opened, a link's setting, a pump off or on at a time, the demand scaled everywhere or in a
district of the GIS register, a tank's initial level — under DD or PDD demand (``queries.runs.simulation``:
one scenario; the model's own controls on a changed link are removed so that the change holds).

``changes`` is a list of objects with a ``type`` and the fields that type needs: ``link_status``
(``link_id``, ``status`` open/closed, ``at``), ``link_setting`` (``link_id``, ``setting``, ``at``: a
pump's relative speed, a PRV/PSV/PBV's pressure or an FCV's flow in the project's units, a TCV's loss
coefficient), ``pump`` (``pump_id``, ``status`` on/off, ``at``), ``demand_multiplier`` (``multiplier``,
optional ``district``) and ``tank_level`` (``tank_id``, ``initial_level``). ``at`` is an ISO 8601 time
with its offset inside the window; the start when omitted. The order of the changes is kept: two changes
of one link at one time apply in the order given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from analyses.kinds import LABELS, REST_PATHS, TOOL_NAMES
from analyses.kinds.base import (
    DURATION,
    LIST_LIMIT,
    START,
    AnalysisKind,
    Outcome,
    Payload,
    Progress,
    ResultRow,
    begin,
    counted,
    from_si,
    iso_utc,
    measured,
    node_ref,
    object_schema,
    parse_utc,
    quantity_field,
    refuse,
    start_of,
    to_si,
    unit,
    window_shape,
    window_step,
)
from queries.units import Q_FLOW, Q_LENGTH, Q_PRESSURE

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape

STEP_S = 900
MAX_CHANGES = 50
#: The default pressure threshold and PDD required pressure, a round number in each unit system.
DEFAULT_THRESHOLD = {"SI": 20.0, "US": 30.0}
#: What each change type needs beside ``type`` (``at`` is optional for those that take it).
NEEDS: dict[str, tuple[str, ...]] = {
    "link_status": ("link_id", "status"),
    "link_setting": ("link_id", "setting"),
    "pump": ("pump_id", "status"),
    "demand_multiplier": ("multiplier",),
    "tank_level": ("tank_id", "initial_level"),
}
TAKES: dict[str, tuple[str, ...]] = {
    "link_status": ("at",),
    "link_setting": ("at",),
    "pump": ("at",),
    "demand_multiplier": ("district",),
    "tank_level": (),
}
STATUSES = {"link_status": ("open", "closed"), "pump": ("on", "off")}
#: The quantity of a link's setting, by link type (None: a number without unit).
SETTING_QUANTITY = {"PRV": Q_PRESSURE, "PSV": Q_PRESSURE, "PBV": Q_PRESSURE, "FCV": Q_FLOW, "TCV": None, "Pump": None}


def _change_schema(unit_system: str) -> dict[str, Any]:
    ident = {"type": "string", "minLength": 1, "maxLength": 100}
    return {"type": "object", "additionalProperties": False, "required": ["type"], "properties": {
        "type": {"enum": list(NEEDS), "description": "What changes: " + ", ".join(NEEDS) + "."},
        "link_id": {**ident, "description": "The pipe, pump or valve (link_status, link_setting)."},
        "pump_id": {**ident, "description": "The pump (pump)."},
        "tank_id": {**ident, "description": "The tank (tank_level)."},
        "status": {"enum": ["open", "closed", "on", "off"],
                   "description": "open/closed for a link_status, on/off for a pump."},
        "setting": {"type": "number", "minimum": 0, "description": "The link's new setting: a pump's relative "
                    "speed, a PRV/PSV/PBV's pressure or an FCV's flow in the project's units, a TCV's loss "
                    "coefficient."},
        "multiplier": {"type": "number", "exclusiveMinimum": 0, "maximum": 10,
                       "description": "The factor on every demand (or a district's)."},
        "district": {**ident, "description": "The GIS district whose junctions' demand is scaled."},
        "initial_level": quantity_field(Q_LENGTH, unit_system, "The tank's level above its bottom at the "
                                        "start.", minimum=0),
        "at": {"type": "string", "format": "date-time", "description": "When the change happens, inside the "
               "window (ISO 8601 with its offset); the start when omitted."},
    }}  # fmt: skip


class BelowThreshold(BaseModel):
    node_id: str
    lowest_pressure: float = measured(Q_PRESSURE)
    time: datetime | None = Field(description="When it was lowest.")


class TankLevels(BaseModel):
    tank_id: str
    level_start: float = measured(Q_LENGTH, "Above the tank's bottom.")
    level_end: float = measured(Q_LENGTH)
    level_lowest: float = measured(Q_LENGTH)
    level_highest: float = measured(Q_LENGTH)
    empty_at: datetime | None = Field(description="When it emptied, if it did.")


class SimulationSummary(Payload):
    """The window at a glance: the lowest pressure and where, the junctions below the threshold, the tanks."""

    min_pressure: float = measured(Q_PRESSURE)
    min_pressure_node: str
    min_pressure_time: datetime | None
    pressure_threshold: float = measured(Q_PRESSURE)
    junctions_below_threshold: int = counted("How many junctions fall below the threshold.")
    demand_model: str
    changes: int = counted("The changes applied.")
    controls_removed: list[str] = Field(description="The model's controls a change overrode.")
    tanks_emptied: list[str]
    junctions_below: list[BelowThreshold] = Field(description=f"The lowest first, at most {LIST_LIMIT}.")
    tanks: list[TankLevels]


class SimulationKind(AnalysisKind):
    """A what-if run: the lowest pressure and where, the junctions below a threshold, the tanks' levels."""

    name = "simulation"
    tool = TOOL_NAMES["simulation"]
    rest_path = REST_PATHS["simulation"]
    title = LABELS["simulation"]
    #: Example arguments against the demo utility (its network: JUNCTION-n, LINK-n).
    example: ClassVar[dict[str, Any]] = {
        "start": "2026-11-01T06:00:00Z",
        "duration_minutes": 360,
        "changes": [{"type": "pump", "pump_id": "PUMP-3829", "status": "off", "at": "2026-11-01T07:00:00Z"}],
    }
    results: ClassVar[dict[str, type[Payload]]] = {"summary": SimulationSummary}

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        threshold = DEFAULT_THRESHOLD[unit_system]
        properties = {
            "start": START,
            "duration_minutes": DURATION,
            "changes": {"type": "array", "items": _change_schema(unit_system), "maxItems": MAX_CHANGES,
                        "description": f"What differs from the model (at most {MAX_CHANGES}); none: the model "
                                       "as it is."},
            "demand_model": {"enum": ["DD", "PDD"], "default": "DD", "description": "Demand-driven (DD) or "
                             "pressure-driven (PDD: a junction draws less as its pressure falls)."},
            "required_pressure": quantity_field(Q_PRESSURE, unit_system, "PDD: the pressure at which a "
                                                "junction draws its full demand.", exclusiveMinimum=0,
                                                default=threshold),
            "minimum_pressure": quantity_field(Q_PRESSURE, unit_system, "PDD: the pressure below which a "
                                               "junction draws nothing.", minimum=0, default=0),
            "pressure_threshold": quantity_field(Q_PRESSURE, unit_system, "Junctions whose pressure falls below "
                                                 "this are listed.", default=threshold),
        }  # fmt: skip
        return object_schema(self.title, properties, ["start", "duration_minutes"])

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        start = start_of(params)
        duration_s = int(params["duration_minutes"]) * 60
        changes = [self._change(i, c, wn, unit_system, parse_utc(start), duration_s)
                   for i, c in enumerate(params.get("changes", []))]  # fmt: skip
        threshold = DEFAULT_THRESHOLD[unit_system]
        required = to_si(params.get("required_pressure", threshold), Q_PRESSURE, unit_system)
        minimum = to_si(params.get("minimum_pressure", 0), Q_PRESSURE, unit_system)
        model = str(params.get("demand_model", "DD"))
        if model == "PDD" and minimum >= required:
            raise refuse("minimum_pressure", "minimum_pressure must be less than required_pressure.")
        out: dict[str, Any] = {
            "start": start,
            "duration_minutes": int(params["duration_minutes"]),
            "changes": changes,
            "demand_model": model,
            "pressure_threshold": to_si(params.get("pressure_threshold", threshold), Q_PRESSURE, unit_system),
        }
        if model == "PDD":
            out.update(required_pressure=required, minimum_pressure=minimum)
        return out

    @staticmethod
    def _change(index: int, change: Mapping[str, Any], wn: WaterNetworkModel, unit_system: str,
                start: datetime, duration_s: int) -> dict[str, Any]:  # fmt: skip
        """One change, canonical: its type, target, seconds from the start, status and SI value."""
        kind, where = str(change["type"]), f"changes[{index}]"
        for needed in NEEDS[kind]:
            if needed not in change:
                raise refuse(f"{where}.{needed}", f"{where}.{needed} is required for a {kind} change.")
        extra = sorted(set(change) - {"type", *NEEDS[kind], *TAKES[kind]})
        if extra:
            raise refuse(f"{where}.{extra[0]}", f"{where}: {', '.join(extra)} does not apply to a {kind} change.")
        out: dict[str, Any] = {"type": kind, "target": "", "at_s": 0, "status": "", "value": 0.0, "district": ""}
        if "status" in change and change["status"] not in STATUSES[kind]:
            allowed = " or ".join(STATUSES[kind])
            raise refuse(f"{where}.status", f"{where}.status must be {allowed} for a {kind} change.")
        if kind in ("link_status", "link_setting"):
            out["target"] = _known(f"{where}.link_id", change["link_id"], wn.link_name_list, "a link")
        elif kind == "pump":
            out["target"] = _known(f"{where}.pump_id", change["pump_id"], wn.pump_name_list, "a pump")
        elif kind == "tank_level":
            out["target"] = _known(f"{where}.tank_id", change["tank_id"], wn.tank_name_list, "a tank")
            tank = wn.get_node(out["target"])
            level = to_si(change["initial_level"], Q_LENGTH, unit_system)
            if not tank.min_level <= level <= tank.max_level:
                low, high = (from_si(v, Q_LENGTH, unit_system) for v in (tank.min_level, tank.max_level))
                label = unit(Q_LENGTH, unit_system).label
                raise refuse(f"{where}.initial_level", f"{where}.initial_level must be between tank "
                             f"{out['target']}'s minimum {low} and maximum {high} {label}.")  # fmt: skip
            out["value"] = level
        if kind == "link_setting":
            link = wn.get_link(out["target"])
            link_type = str(getattr(link, "valve_type", "") or link.link_type)
            if link_type not in SETTING_QUANTITY:
                raise refuse(f"{where}.link_id", f"{where}.link_id {out['target']!r} is a {link_type}: only "
                             "pumps and PRV, PSV, PBV, FCV and TCV valves take a setting.")  # fmt: skip
            quantity = SETTING_QUANTITY[link_type]
            setting = float(change["setting"])
            out["value"] = setting if quantity is None else to_si(setting, quantity, unit_system)
        if kind == "demand_multiplier":
            out["value"], out["district"] = float(change["multiplier"]), str(change.get("district", ""))
        if "status" in change:
            out["status"] = str(change["status"])
        if "at" in change:
            at = parse_utc(start_of({"start": change["at"]}))
            offset = int((at - start).total_seconds())
            if not 0 <= offset < duration_s:
                raise refuse(f"{where}.at", f"{where}.at {change['at']!r} is outside the window "
                             f"({iso_utc(start)} for {duration_s // 60} minutes).")  # fmt: skip
            out["at_s"] = offset
        return out

    def check_project(self, si: Mapping[str, Any], project: Project) -> None:
        wanted = {c["district"] for c in si["changes"] if c["district"]}
        if not wanted:
            return
        from queries.models import ElementGisProperties

        rows = ElementGisProperties.objects.filter(project=project, element_type="junction", district__in=wanted)
        known = set(rows.values_list("district", flat=True).distinct())
        for index, change in enumerate(si["changes"]):
            name = change["district"]
            if name and name not in known:
                raise refuse(f"changes[{index}].district", f"changes[{index}].district {name!r} has no junction "
                             f"in project {project.slug}'s GIS register.", unknown=[name])  # fmt: skip

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        return window_shape(wn, int(si["duration_minutes"]), STEP_S, self.scenarios)

    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        from queries.runs.simulation import Change, SimulationError, what_if

        start = parse_utc(si["start"])
        duration_s = int(si["duration_minutes"]) * 60
        initial = begin(wn, start, project)
        changes = [Change(c["type"], c["target"], int(c["at_s"]), c["status"], float(c["value"]),
                          _district(project, c["district"])) for c in si["changes"]]  # fmt: skip
        progress(0.1, f"Simulating {duration_s // 60} minutes with {len(changes)} change(s).")
        try:
            result = what_if(wn, changes=changes, hours=duration_s / 3600, threshold=float(si["pressure_threshold"]),
                             step_s=window_step(duration_s, STEP_S), demand_model=str(si["demand_model"]),
                             in_place=True,
                             required_pressure=si.get("required_pressure"),
                             minimum_pressure=si.get("minimum_pressure"))  # fmt: skip
        except SimulationError as exc:
            raise refuse(str(exc).split(" ", 1)[0], f"{exc}.") from None
        progress(0.9, "Summarising the simulation.")
        pressure, length = unit(Q_PRESSURE, unit_system), unit(Q_LENGTH, unit_system)

        def at(seconds: int | None) -> str | None:
            return None if seconds is None else iso_utc(start + timedelta(seconds=seconds))

        listed = result.below[:LIST_LIMIT]
        tanks = [{"tank_id": t.tank_id, "level_start": length(t.start), "level_end": length(t.end),
                  "level_lowest": length(t.lowest), "level_highest": length(t.highest), "empty_at": at(t.empty_at_s)}
                 for t in result.tanks]  # fmt: skip
        summary = {
            **initial,
            "min_pressure": pressure(result.min_pressure), "min_pressure_node": result.min_pressure_node,
            "min_pressure_time": at(result.min_pressure_at_s),
            "pressure_threshold": pressure(float(si["pressure_threshold"])),
            "junctions_below_threshold": len(result.below), "demand_model": si["demand_model"],
            "changes": len(changes), "controls_removed": result.controls_removed,
            "tanks_emptied": sorted(t.tank_id for t in result.tanks if t.empty_at_s is not None),
            "units": {"min_pressure": pressure.label, "pressure_threshold": pressure.label},
        }  # fmt: skip
        payload = {
            **summary,
            "junctions_below": [{"node_id": p.node_id, "lowest_pressure": pressure(p.lowest), "time": at(p.at_s)}
                                for p in listed],
            "tanks": tanks,
            "units": {**summary["units"], "lowest_pressure": pressure.label, "level_start": length.label,
                      "level_end": length.label, "level_lowest": length.label, "level_highest": length.label},
        }  # fmt: skip
        refs = [node_ref(wn, n) for n in dict.fromkeys([result.min_pressure_node, *(p.node_id for p in listed),
                                                       *(t.tank_id for t in result.tanks)])]  # fmt: skip
        return Outcome(summary, [ResultRow("summary", payload, refs)], result.results, None, start)


def _known(field_name: str, value: Any, names: Sequence[str], what: str) -> str:
    ident = str(value)
    if ident not in set(names):
        raise refuse(field_name, f"{field_name} {ident!r} is not {what} of the model.", unknown=[ident])
    return ident


def _district(project: Project, district: str) -> tuple[str, ...]:
    """The junctions of ``district`` in the project's GIS register (none asked: the empty tuple)."""
    if not district:
        return ()
    from queries.models import ElementGisProperties

    rows = ElementGisProperties.objects.filter(project=project, element_type="junction", district=district)
    found = tuple(sorted(rows.values_list("element_id", flat=True)))
    if not found:
        raise refuse("changes", f"district {district!r} no longer has a junction in the GIS register.")
    return found
