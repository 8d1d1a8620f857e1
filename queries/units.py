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
    """How one quantity is shown in one unit system: its label and the factor from the stored value."""

    label: str
    factor: float

    @property
    def identity(self) -> bool:
        return self.factor == 1.0


def _derive() -> dict[tuple[str, str, str, str], Shown]:
    """Every (quantity, unit system, quality type, headloss formula) variant → Shown, from pint, once."""
    ureg: pint.UnitRegistry[Any] = pint.UnitRegistry()

    def factor(stored: str, shown: str) -> float:
        return float(ureg.Quantity(1.0, stored).to(shown).magnitude)

    out: dict[tuple[str, str, str, str], Shown] = {}
    for quantity, (stored, si_label, us_label, us_unit) in _TABLE.items():
        out[(quantity, "SI", "", "")] = Shown(si_label, factor(stored, stored))
        out[(quantity, "US", "", "")] = Shown(us_label, factor(stored, us_unit))
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


def present(result: BaseModel, scope: Any) -> BaseModel:
    """Relabel ``result.units`` for the scope's project and scale the numbers of the fields whose factor is
    not 1, in place (the result was built for this call). Labels that are not quantities are units
    already (e.g. ``s``, ``degree``, a SCADA device's own unit) and stay as they are."""
    units: dict[str, str] | None = getattr(result, "units", None)
    if not units:
        return result
    system = getattr(scope, "unit_system", "SI")
    qtype = getattr(scope, "quality_type", "NONE")
    formula = getattr(scope, "headloss_formula", "H-W")
    scale: dict[str, float] = {}
    for name, label in list(units.items()):
        if label not in QUANTITIES:
            continue
        how = shown(label, unit_system=system, quality_type=qtype, headloss=formula)
        if how is None and label == Q_QUALITY and qtype == "":
            units[name] = "unknown: the quality type was not recorded (re-import the network)"
            continue
        if how is None:
            units[name] = ""  # unitless here (H-W/C-M roughness; quality without a quality simulation)
            continue
        units[name] = how.label
        if not how.identity:
            scale[name] = how.factor
    if scale:
        _scale(result.data, scale)  # type: ignore[attr-defined]
    return result


def _scale(obj: Any, scale: Mapping[str, float], value_factor: float | None = None) -> None:
    """Multiply, in place, every number held under a key of ``scale`` (and, in a page of one field's
    values — a model whose ``field`` names it — every ``value``). Pydantic models keep their fields in
    ``__dict__``, which is read and written directly (no validation: the numbers stay numbers)."""
    if isinstance(obj, list):
        for item in obj:
            if type(item) not in _SCALARS:
                _scale(item, scale, value_factor)
        return
    if isinstance(obj, BaseModel):
        fields = obj.__dict__
        field_name = fields.get("field")
        if isinstance(field_name, str) and field_name in scale:
            value_factor = scale[field_name]
    elif isinstance(obj, dict):
        fields = obj
    else:
        return
    for key, factor in scale.items():
        value: Any = fields.get(key)
        if type(value) in _NUMBERS:
            fields[key] = value * factor
    if value_factor is not None and type(fields.get("value")) in _NUMBERS:
        fields["value"] = fields["value"] * value_factor
    for value in fields.values():
        if type(value) not in _SCALARS:
            _scale(value, scale, value_factor)


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
