"""Units of results: what stored numbers are in, and their conversion to the project's unit system on the
way out (R-ONB-3) — in this one module.

Storage is SI exactly as WNTR holds a network and its results (WNTR's units table: lengths, heads and
pressure heads in m, flows in m³/s, pump power in W, concentrations in kg/m³, water age in s, trace in %,
first-order reaction coefficients per second, Darcy-Weisbach roughness in m). Services label a result's
fields with *quantities* (``Q_PRESSURE``, ``Q_FLOW``, …) in the envelope's ``units``; ``present`` — called
once per tool call by the registry (``ToolSpec.invoke``), so MCP, REST and the evidence they save all get
the same numbers — turns each quantity into the label of the project's unit system and scales the numbers
of those fields.

Factors come from pint, derived once when this module is imported (``FACTORS``), never per value: the hot
path is a dict lookup and a multiplication (see ``tests/queries/test_units.py`` for the measurement).
Pressure heads go to psi through pint's ``m_H2O`` (conventional water density: 1 m = 1.42233 psi; EPANET
and WNTR use 1.4216–1.4220, within 0.05 %).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pint
from pydantic import BaseModel

# Quantities: what a stored number is. Labels in ``units`` before ``present`` are these names.
Q_LENGTH = "length"  # elevations, levels, pipe lengths
Q_HEAD = "head"
Q_PRESSURE = "pressure"  # pressure head
Q_FLOW = "flow"  # flows and demands
Q_VELOCITY = "velocity"
Q_PIPE_DIAMETER = "pipe_diameter"
Q_TANK_DIAMETER = "tank_diameter"
Q_VOLUME = "volume"
Q_POWER = "power"
Q_UNIT_HEADLOSS = "unit_headloss"  # pipes: head lost per length
Q_HEADLOSS = "headloss"  # pumps and valves: head lost (a pump's is negative: its gain)
Q_QUALITY = "quality"  # by the project's quality type
Q_BULK_RATE = "bulk_rate"  # first-order bulk reaction coefficient
Q_WALL_RATE = "wall_rate"  # first-order wall reaction coefficient
Q_ROUGHNESS = "roughness"  # by the project's headloss formula
Q_EMITTER = "emitter_coefficient"
# SCADA-only quantities (a device measures them; no model field is one): chlorine is read in mg/L in both
# systems, temperature in °C or °F — an absolute temperature with pint's offset, a difference (an
# accuracy, a deviation) without it.
Q_CHLORINE = "chlorine"
Q_TEMPERATURE = "temperature"
Q_TEMPERATURE_DELTA = "temperature_difference"

#: A SCADA device's quantity → the quantity its readings are (absolute values, then differences: accuracy,
#: deviation). State quantities (pump status and speed, valve position) have no unit system: not listed,
#: their storage labels stay.
SCADA_QUANTITY: dict[str, tuple[str, str]] = {
    "pressure": (Q_PRESSURE, Q_PRESSURE),
    "flow": (Q_FLOW, Q_FLOW),
    "level": (Q_LENGTH, Q_LENGTH),
    "chlorine": (Q_CHLORINE, Q_CHLORINE),
    "temperature": (Q_TEMPERATURE, Q_TEMPERATURE_DELTA),
}

#: quantity → (stored unit in pint syntax, SI label, US label, US pint unit). SI is shown as stored
#: except where the stored SI unit is not what anyone reads (kg/m³ of chlorine: shown in mg/L).
_TABLE: dict[str, tuple[str, str, str, str]] = {
    Q_LENGTH: ("m", "m", "ft", "ft"),
    Q_HEAD: ("m", "m", "ft", "ft"),
    Q_PRESSURE: ("m_H2O", "m", "psi", "psi"),
    Q_FLOW: ("m**3/s", "m3/s", "gpm", "gallon/minute"),
    Q_VELOCITY: ("m/s", "m/s", "ft/s", "ft/s"),
    Q_PIPE_DIAMETER: ("m", "m", "in", "inch"),
    Q_TANK_DIAMETER: ("m", "m", "ft", "ft"),
    Q_VOLUME: ("m**3", "m3", "ft3", "ft**3"),
    Q_POWER: ("W", "W", "hp", "hp"),
    Q_UNIT_HEADLOSS: ("m/m", "m/m", "ft/ft", "ft/ft"),
    Q_HEADLOSS: ("m", "m", "ft", "ft"),
    Q_BULK_RATE: ("1/s", "1/s", "1/day", "1/day"),
    Q_WALL_RATE: ("m/s", "m/s", "ft/day", "ft/day"),
    Q_EMITTER: ("m**3/s/m_H2O**0.5", "m3/s/m^0.5", "gpm/psi^0.5", "gallon/minute/psi**0.5"),
    Q_CHLORINE: ("mg/L", "mg/L", "mg/L", "mg/L"),
    Q_TEMPERATURE: ("degC", "degC", "degF", "degF"),
    Q_TEMPERATURE_DELTA: ("delta_degC", "degC", "degF", "delta_degF"),
}
#: Quality by the network's quality type: (stored pint unit, SI label, SI pint unit, US label, US pint unit).
_QUALITY: dict[str, tuple[str, str, str, str, str]] = {
    "CHEMICAL": ("kg/m**3", "mg/L", "mg/L", "mg/L", "mg/L"),
    "AGE": ("s", "s", "s", "h", "h"),
    "TRACE": ("percent", "%", "percent", "%", "percent"),
}
#: Roughness by headloss formula: Hazen-Williams C and Chezy-Manning n are unitless; Darcy-Weisbach ε is a
#: length (WNTR: m; EPANET's .inp: mm or millifeet).
_DW_ROUGHNESS = ("m", "m", "mm", "ft", "ft")


@dataclass(frozen=True, slots=True)
class Shown:
    """How one quantity is shown in one unit system: its label, and ``shown = stored · factor + offset``
    (the offset is non-zero only for an absolute temperature in °F)."""

    label: str
    factor: float
    offset: float = 0.0

    @property
    def identity(self) -> bool:
        return self.factor == 1.0 and self.offset == 0.0

    def __call__(self, value: float) -> float:
        """The stored ``value`` as shown, to 6 significant digits (R-ONB-3: a converted number carries no
        more digits than the conversion knows — never ``147.00000000000003``)."""
        return _sig6(value * self.factor + self.offset)


def _sig6(value: float) -> float:
    """``value`` to 6 significant digits (its cost per value: mcp_app/README.md "Measuring")."""
    return float(f"{value:.6g}")


def _derive() -> dict[tuple[str, str, str, str], Shown]:
    """Every (quantity, unit system, quality type, headloss formula) variant → Shown, from pint, once."""
    ureg: pint.UnitRegistry[Any] = pint.UnitRegistry()

    def factor(stored: str, shown: str) -> float:
        return float(ureg.Quantity(1.0, stored).to(shown).magnitude)

    def linear(label: str, stored: str, shown: str) -> Shown:
        """``shown = stored · factor + offset``, both from pint (0 and 1 converted: offset units too)."""
        zero = float(ureg.Quantity(0.0, stored).to(shown).magnitude)
        one = float(ureg.Quantity(1.0, stored).to(shown).magnitude)
        return Shown(label, one - zero, zero)

    out: dict[tuple[str, str, str, str], Shown] = {}
    for quantity, (stored, si_label, us_label, us_unit) in _TABLE.items():
        out[(quantity, "SI", "", "")] = linear(si_label, stored, stored)
        out[(quantity, "US", "", "")] = linear(us_label, stored, us_unit)
    for qtype, (stored, si_label, si_unit, us_label, us_unit) in _QUALITY.items():
        out[(Q_QUALITY, "SI", qtype, "")] = Shown(si_label, factor(stored, si_unit))
        out[(Q_QUALITY, "US", qtype, "")] = Shown(us_label, factor(stored, us_unit))
    stored, si_label, si_unit, us_label, us_unit = _DW_ROUGHNESS
    out[(Q_ROUGHNESS, "SI", "", "D-W")] = Shown(si_label, factor(stored, si_unit))
    out[(Q_ROUGHNESS, "US", "", "D-W")] = Shown(us_label, factor(stored, us_unit))
    return out


FACTORS: dict[tuple[str, str, str, str], Shown] = _derive()
QUANTITIES = frozenset({*_TABLE, Q_QUALITY, Q_ROUGHNESS})


def shown(quantity: str, *, unit_system: str, quality_type: str = "NONE", headloss: str = "H-W") -> Shown | None:
    """How ``quantity`` is shown for a project; None when the field has no unit there (quality without a
    quality simulation, H-W or C-M roughness)."""
    if quantity == Q_QUALITY:
        return FACTORS.get((quantity, unit_system, quality_type, ""))
    if quantity == Q_ROUGHNESS:
        return FACTORS.get((quantity, unit_system, "", headloss))
    return FACTORS.get((quantity, unit_system, "", ""))


def unit(quantity: str, unit_system: str) -> Shown:
    """How ``quantity`` is shown in ``unit_system`` (``ValueError`` for a system or quantity without one)."""
    found = shown(quantity, unit_system=unit_system)
    if found is None:
        raise ValueError(f"no unit for {quantity!r} in unit system {unit_system!r}")
    return found


#: Declarations of a numeric output field's quantity (R-ONB-3), in the field's JSON Schema as
#: ``x-quantity``: a quantity of this module (a fixed one, e.g. ``Q_FLOW``), or a kind saying where the
#: quantity comes from, or what a unitless number is. ``tests/queries/test_units_declared.py`` walks every
#: registered tool's output schema and fails on a number without one.
BY_FIELD = "by_field"  # the envelope's ``units`` under this field's name (or under the model's ``field``)
BY_DEVICE = "by_device"  # a SCADA device's reading: the device's quantity (its ``quantity``, or the result's map)
BY_DEVICE_DELTA = "by_device_delta"  # a difference of readings (accuracy, deviation) of that quantity
DEVICE_UNIT = "device_unit"  # the label (a string) of the device's quantity in the project's system
#: Numbers whose unit is fixed by their meaning, whatever the unit system: counts, indexes and sequence
#: numbers, fractions, seconds, degrees of longitude/latitude, years, bytes, and metres where the field's
#: name says so (``distance_m``, ``radius_m``); ``as_imported``: the attributes of a utility's own GIS or
#: peripheral records, in whatever unit its file had (a GIS attribute carries none); ``own_unit``: a
#: record that names its unit beside the value (a field observation, a lab result).
UNITLESS = frozenset({"count", "index", "fraction", "s", "degree", "year", "byte", "m", "as_imported", "own_unit"})
KINDS = frozenset({BY_FIELD, BY_DEVICE, BY_DEVICE_DELTA, DEVICE_UNIT, *UNITLESS})


def declared(kind: str) -> dict[str, Any]:
    """``json_schema_extra`` declaring a field's quantity: ``Field(json_schema_extra=declared("count"))``."""
    if kind not in KINDS and kind not in QUANTITIES:
        raise ValueError(f"unknown quantity kind {kind!r}")
    return {"x-quantity": kind}


def _device_fields(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """``(field, kind)`` of a model's fields declared per device (cached per class, read once)."""
    plan = _DEVICE_PLANS.get(cls)
    if plan is None:
        found = []
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra
            kind = extra.get("x-quantity") if isinstance(extra, dict) else None
            if kind in (BY_DEVICE, BY_DEVICE_DELTA, DEVICE_UNIT):
                found.append((name, str(kind)))
        plan = _DEVICE_PLANS[cls] = tuple(found)
    return plan


_DEVICE_PLANS: dict[type[BaseModel], tuple[tuple[str, str], ...]] = {}


def present(result: BaseModel, scope: Any) -> BaseModel:
    """Relabel ``result.units`` for the scope's project and convert the numbers, in place (the result was
    built for this call). Labels that are not quantities are units already (e.g. ``s``, ``degree``) and
    stay as they are. SCADA results name each device's quantity in ``_device_quantities`` (a private
    attribute of the envelope: device id → SCADA quantity): the device fields of their models are
    converted by it, and ``units`` under the same key gets its label."""
    units: dict[str, str] | None = getattr(result, "units", None)
    devices: dict[str, str] | None = getattr(result, "_device_quantities", None)
    if not units and not devices:
        return result
    system = getattr(scope, "unit_system", "SI")
    qtype = getattr(scope, "quality_type", "NONE")
    formula = getattr(scope, "headloss_formula", "H-W")
    scale: dict[str, Shown] = {}
    for name, label in list((units or {}).items()):
        if label not in QUANTITIES:
            continue
        how = shown(label, unit_system=system, quality_type=qtype, headloss=formula)
        if how is None and label == Q_QUALITY and qtype == "":
            units[name] = "unknown: the quality type was not recorded (re-import the network)"  # type: ignore[index]
            continue
        if how is None:
            units[name] = ""  # type: ignore[index]  # unitless here (H-W/C-M roughness; no quality simulation)
            continue
        units[name] = how.label  # type: ignore[index]
        if not how.identity:
            scale[name] = how
    per_device: dict[str, tuple[Shown, Shown]] = {}
    if devices and system != "SI":  # SI labels and numbers are the storage units': nothing to do
        for device_id, scada in devices.items():
            pair = scada_shown(scada, system)
            if pair is not None:
                per_device[device_id] = pair
                if units is not None and device_id in units:
                    units[device_id] = pair[0].label
    if scale or per_device:
        _scale(result.data, scale, _ScadaIn(system, per_device))  # type: ignore[attr-defined]
    return result


def scada_shown(scada: str, system: str) -> tuple[Shown, Shown] | None:
    """How a SCADA quantity's readings and their differences are shown in ``system`` (None: a state,
    shown as stored). The admin's device chart uses it too."""
    pair = SCADA_QUANTITY.get(scada)
    if pair is None:
        return None
    return FACTORS[(pair[0], system, "", "")], FACTORS[(pair[1], system, "", "")]


@dataclass(frozen=True, slots=True)
class _ScadaIn:
    """The SCADA side of one ``present``: the unit system and each named device's (values, differences)."""

    system: str
    devices: Mapping[str, tuple[Shown, Shown]]

    def of(self, fields: Mapping[str, Any]) -> tuple[Shown, Shown] | None:
        own = fields.get("quantity")
        if isinstance(own, str) and own in SCADA_QUANTITY:
            return scada_shown(own, self.system)
        device_id = fields.get("device_id")
        return self.devices.get(device_id) if isinstance(device_id, str) else None


def _scale(obj: Any, scale: Mapping[str, Shown], scada: _ScadaIn, value_how: Shown | None = None) -> None:
    """Convert, in place, every number held under a key of ``scale`` (and, in a page of one field's
    values — a model whose ``field`` names it — every ``value``), and the device fields of SCADA models.
    Pydantic models keep their fields in ``__dict__``, which is read and written directly (no validation:
    the numbers stay numbers)."""
    if isinstance(obj, list):
        for item in obj:
            if type(item) not in _SCALARS:
                _scale(item, scale, scada, value_how)
        return
    device_plan: tuple[tuple[str, str], ...] = ()
    if isinstance(obj, BaseModel):
        fields = obj.__dict__
        field_name = fields.get("field")
        if isinstance(field_name, str) and field_name in scale:
            value_how = scale[field_name]
        device_plan = _device_fields(type(obj))
    elif isinstance(obj, dict):
        fields = obj
    else:
        return
    for key, how in scale.items():
        value: Any = fields.get(key)
        if type(value) in _NUMBERS:
            fields[key] = how(value)
    if value_how is not None and type(fields.get("value")) in _NUMBERS:
        fields["value"] = value_how(fields["value"])
    if device_plan:
        pair = scada.of(fields)
        if pair is not None:
            for key, kind in device_plan:
                if kind == DEVICE_UNIT:
                    fields[key] = pair[0].label
                    continue
                how = pair[0] if kind == BY_DEVICE else pair[1]
                value = fields.get(key)
                if type(value) in _NUMBERS and not how.identity:
                    fields[key] = how(value)
    for value in fields.values():
        if type(value) not in _SCALARS:
            _scale(value, scale, scada, value_how)


_NUMBERS = frozenset({float, int})
_SCALARS = frozenset({float, int, str, bool, type(None)})


def presented(invoke: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tool's ``invoke`` (scope, args → plan) so the plan's result goes through ``present``
    (idempotent: a wrapped ``invoke`` is returned as it is, so a result is never converted twice)."""
    if getattr(invoke, "presents_units", False):
        return invoke

    def run(scope: Any, args: Mapping[str, Any]) -> Any:
        result = yield from invoke(scope, args)
        return present(result, scope)

    run.presents_units = True  # type: ignore[attr-defined]
    return run
