"""SCADA quantities, their storage units and the conversion of a device's native unit (pint).

Every quantity has ONE storage unit: readings are stored (and answered by every tool) in it, whatever
the device reports. A device's ``native_unit`` is what its historian sends; the importer converts with
a linear ``stored = native * scale + offset`` whose two numbers pint computes once per (quantity, unit)
(``conversion``, cached) — the offset is non-zero only for temperatures (°F → °C).

=================  ============  =========================================================  ========
quantity           storage unit  native units accepted (examples)                           kind
=================  ============  =========================================================  ========
``pressure``       ``m``         m, ft (head of water), psi, kPa, bar, Pa, m_H2O             analog
``flow``           ``m3/s``      m3/s (m³/s), L/s, m3/h, gpm, MGD, cfs                      analog
``level``          ``m``         m, ft, cm                                                  analog
``pump_status``    ``on/off``    on/off (values on/off, true/false, 1/0); stored 1 on, 0 off  state
``pump_speed``     ``1``         1 (relative speed, EPANET's setting), %                    state
``valve_position`` ``%``         % (open), 1 (fraction open)                                state
``chlorine``       ``mg/L``      mg/L, ppm (≈ mg/L in water)                                analog
``temperature``    ``degC``      °C (degC), °F (degF), K                                    analog
=================  ============  =========================================================  ========

Pressure is stored as metres of water head (1 m = 9806.65 Pa, pint's ``meter_H2O``, conventional
water density and standard gravity), the unit EPANET reports pressure in, so readings compare with the
model baseline directly. *Analog* quantities are measured continuously (several samples in a reporting
slot are averaged; the full cleaning runs); *state* quantities are set points or positions (the last
sample in a slot wins; cleaning only marks gaps — a pump that stays on for hours is not "stuck").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any


@cache
def _registry() -> Any:
    """pint's registry with the historians' extra units, built on the first conversion: the models import
    this module, and a server process that never converts should not load pint (≈ 20 MB)."""
    import pint

    ureg: pint.UnitRegistry[Any] = pint.UnitRegistry()
    ureg.define("gpm = gallon / minute")
    ureg.define("MGD = 1e6 * gallon / day")
    ureg.define("cfs = foot ** 3 / second")
    return ureg


@dataclass(frozen=True)
class QuantitySpec:
    """One quantity: its storage unit, whether it is analog or a state, the element types a device of it
    may sit on, and the model field it compares with (``None``: the baseline has no such field)."""

    storage_unit: str
    kind: str  # "analog" | "state"
    element_types: tuple[str, ...]
    model_field: str | None


NODES = ("junction", "reservoir", "tank")
LINKS = ("pipe", "pump", "valve")

QUANTITIES: dict[str, QuantitySpec] = {
    "pressure": QuantitySpec("m", "analog", NODES, "pressure"),
    "flow": QuantitySpec("m3/s", "analog", LINKS, "flow"),
    "level": QuantitySpec("m", "analog", ("tank",), "pressure"),
    "pump_status": QuantitySpec("on/off", "state", ("pump",), "status"),
    "pump_speed": QuantitySpec("1", "state", ("pump",), "setting"),
    "valve_position": QuantitySpec("%", "state", ("valve",), None),
    "chlorine": QuantitySpec("mg/L", "analog", NODES + LINKS, "quality"),
    "temperature": QuantitySpec("degC", "analog", NODES + LINKS, None),
}
QUANTITY_NAMES: tuple[str, ...] = tuple(QUANTITIES)
STORAGE_UNITS: dict[str, str] = {q: s.storage_unit for q, s in QUANTITIES.items()}

#: Spellings historians use, mapped to pint's names (pint parses the rest itself).
_ALIASES = {
    "m³/s": "m**3/s",
    "m3/s": "m**3/s",
    "m³/h": "m**3/h",
    "m3/h": "m**3/h",
    "l/s": "L/s",
    "°c": "degC",
    "°f": "degF",
    "degc": "degC",
    "degf": "degF",
    "c": "degC",
    "f": "degF",
    "k": "K",
    "%": "percent",
    "1": "dimensionless",
    "fraction": "dimensionless",
    "ppm": "mg/L",
    "mh2o": "meter_H2O",
    "m_h2o": "meter_H2O",
    "m h2o": "meter_H2O",
    "ft h2o": "foot_H2O",
    "ft_h2o": "foot_H2O",
    "fth2o": "foot_H2O",
    # Spellings users write in upper case or with a gauge suffix (issue 40 item 2). A gauge pressure (psig,
    # kPag, barg) is what a pressure head is: the pressure above the atmosphere's.
    "psi": "psi",
    "psig": "psi",
    "kpa": "kPa",
    "kpag": "kPa",
    "bar": "bar",
    "barg": "bar",
    "pa": "Pa",
    "gpm": "gpm",
    "mgd": "MGD",
    "cfs": "cfs",
    "lps": "L/s",
    "ft": "ft",
    "m": "m",
    "cm": "cm",
    "mg/l": "mg/L",
}
#: What a device's unit may be written as, per quantity (case and spaces do not matter): named in the
#: refusal of any other spelling, so a user can correct the file.
ACCEPTED_UNITS: dict[str, tuple[str, ...]] = {
    "pressure": ("m", "ft", "psi", "psig", "kPa", "bar", "Pa", "m H2O", "ft H2O"),
    "flow": ("m3/s", "L/s", "m3/h", "gpm", "MGD", "cfs"),
    "level": ("m", "ft", "cm"),
    "pump_status": ("on/off",),
    "pump_speed": ("1", "%"),
    "valve_position": ("%", "1"),
    "chlorine": ("mg/L", "ppm"),
    "temperature": ("degC", "degF", "K"),
}
#: Storage units in pint's spelling.
_PINT_STORAGE = {
    "m": "meter",
    "m3/s": "m**3/s",
    "mg/L": "mg/L",
    "degC": "degC",
    "%": "percent",
    "1": "dimensionless",
}
STATE_WORDS = {"on": 1.0, "off": 0.0, "true": 1.0, "false": 0.0, "1": 1.0, "0": 0.0, "open": 1.0, "closed": 0.0}


class UnitError(ValueError):
    """A unit that does not fit the quantity (the message names both)."""


@dataclass(frozen=True)
class Conversion:
    """``stored = native * scale + offset``."""

    scale: float
    offset: float

    def apply(self, value: float) -> float:
        return value * self.scale + self.offset


def _pint_name(unit: str) -> str:
    text = unit.strip()
    return _ALIASES.get(" ".join(text.lower().split()), text)


def _accepted(quantity: str) -> str:
    return ", ".join(ACCEPTED_UNITS[quantity])


@cache
def conversion(quantity: str, unit: str) -> Conversion:
    """The linear conversion of ``unit`` to ``quantity``'s storage unit, computed with pint once per
    pair. ``UnitError`` when the quantity is unknown or the unit cannot express it."""
    spec = QUANTITIES.get(quantity)
    if spec is None:
        raise UnitError(f"unknown quantity {quantity!r} (known: {', '.join(QUANTITY_NAMES)})")
    if quantity == "pump_status":
        if unit.strip().lower() not in ("on/off", "1", "state"):
            raise UnitError(f"pump_status is reported as on/off, not {unit!r}")
        return Conversion(1.0, 0.0)
    import pint

    _ureg = _registry()
    name = _pint_name(unit)
    try:
        native = _ureg.Unit(name)
    except (pint.UndefinedUnitError, pint.DefinitionSyntaxError, ValueError, TypeError, AttributeError) as exc:
        raise UnitError(f"unknown unit {unit!r} for {quantity} (accepted: {_accepted(quantity)})") from exc
    target = _PINT_STORAGE[spec.storage_unit]
    if quantity == "pressure" and native.dimensionality != _ureg.Unit("meter").dimensionality:
        target = "meter_H2O"  # a pressure: to metres of water head
    try:
        zero = _ureg.Quantity(0.0, native).to(target).magnitude
        one = _ureg.Quantity(1.0, native).to(target).magnitude
    except pint.DimensionalityError as exc:
        raise UnitError(
            f"unit {unit!r} cannot express {quantity} (stored in {spec.storage_unit}; accepted: {_accepted(quantity)})"
        ) from exc
    return Conversion(scale=float(one - zero), offset=float(zero))
