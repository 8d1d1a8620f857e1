"""The what-if simulation's computation (issue 42 item 2, ``run_simulation``): the model over a window with
the investigator's changes — a link closed or opened, a setting changed, a pump off or on at a time, the
demand scaled (everywhere or at some junctions), a tank's initial level — under demand-driven (DD) or
pressure-driven (PDD) demand.

A change at the window's start sets the element's initial state; a later one is an EPANET time control
(``LINK … AT TIME``). So that a change holds, the model's own controls and rules acting on a changed link
are removed for the window (they are listed in the result): a pump tripped at 06:00 stays off even though
its tank-level control would restart it. SI: m, m³/s, seconds from the window's start.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from wntr.network import LinkStatus, WaterNetworkModel
from wntr.network.controls import Control, ControlAction, SimTimeCondition
from wntr.sim.results import SimulationResults

from queries.runs.engine import run_epanet, set_window

#: The change types.
LINK_STATUS, LINK_SETTING, PUMP = "link_status", "link_setting", "pump"
DEMAND, TANK_LEVEL = "demand_multiplier", "tank_level"
CHANGE_TYPES = (LINK_STATUS, LINK_SETTING, PUMP, DEMAND, TANK_LEVEL)
#: A tank is empty when its level is within this of its minimum (m).
EMPTY_TOLERANCE_M = 1e-3


class SimulationError(ValueError):
    """The scenario cannot be built as asked (the message names the change)."""


@dataclass(frozen=True)
class Change:
    """One change, SI. ``at_s``: seconds from the window's start (link and pump changes). ``target``: the
    link, pump or tank; for a demand multiplier, the junctions it scales (empty: every junction)."""

    type: str
    target: str = ""
    at_s: int = 0
    status: str = ""  # "open"/"closed" (links), "on"/"off" (pumps)
    value: float = 0.0  # a setting, a multiplier or a level (m)
    junctions: tuple[str, ...] = ()


@dataclass(frozen=True)
class TankLevels:
    tank_id: str
    start: float  # m above the tank's bottom
    end: float
    lowest: float
    highest: float
    empty_at_s: int | None  # the first report time the tank is at its minimum level, if it is


@dataclass(frozen=True)
class LowPressure:
    node_id: str
    lowest: float  # m
    at_s: int


@dataclass(frozen=True)
class SimulationResult:
    min_pressure: float  # m, the lowest at any junction over the window
    min_pressure_node: str
    min_pressure_at_s: int
    #: Junctions whose pressure falls below the threshold at some report time, the lowest first.
    below: list[LowPressure]
    tanks: list[TankLevels]
    controls_removed: list[str] = field(default_factory=list)
    results: SimulationResults | None = None


def _status(change: Change) -> LinkStatus:
    return LinkStatus.Closed if change.status in ("closed", "off") else LinkStatus.Open


def _remove_controls_on(wn: WaterNetworkModel, links: set[str]) -> list[str]:
    """Remove the model's controls and rules whose actions act on ``links``; their names, sorted."""
    removed = []
    for name, control in list(wn.controls()):
        targets = {action.target()[0].name for action in control.actions()}
        if targets & links:
            wn.remove_control(name)
            removed.append(name)
    return sorted(removed)


def _apply(wn: WaterNetworkModel, change: Change, index: int) -> None:
    if change.type == DEMAND:
        junctions = set(wn.junction_name_list)
        for name in [j for j in change.junctions if j in junctions] if change.junctions else junctions:
            for demand in wn.get_node(name).demand_timeseries_list:
                demand.base_value *= change.value
        return
    if change.type == TANK_LEVEL:
        tank = wn.get_node(change.target)
        if not tank.min_level <= change.value <= tank.max_level:
            raise SimulationError(f"changes[{index}].initial_level is outside tank {change.target}'s levels")
        tank.init_level = change.value
        return
    link = wn.get_link(change.target)
    if change.type == LINK_SETTING:
        attribute, value = ("base_speed" if link.link_type == "Pump" else "setting"), change.value
    else:
        attribute, value = "status", _status(change)
    if change.at_s == 0:
        if attribute == "status":
            link.initial_status = value
        elif attribute == "base_speed":
            link.base_speed = value
        else:
            link.initial_setting = value
        return
    action = ControlAction(link, attribute, value)
    wn.add_control(f"tjw-change-{index}", Control(SimTimeCondition(wn, "=", change.at_s), action))


def scenario(
    wn: WaterNetworkModel, changes: Sequence[Change], *, in_place: bool = False
) -> tuple[WaterNetworkModel, list[str]]:
    """A copy of ``wn`` (``wn`` itself when ``in_place``) with ``changes`` made, and the model's controls
    removed to let them hold."""
    out = wn if in_place else copy.deepcopy(wn)
    changed = {c.target for c in changes if c.type in (LINK_STATUS, LINK_SETTING, PUMP)}
    removed = _remove_controls_on(out, changed)
    for index, change in enumerate(changes):
        _apply(out, change, index)
    return out, removed


def what_if(
    wn: WaterNetworkModel,
    *,
    changes: Sequence[Change],
    hours: float,
    threshold: float,
    step_s: int = 900,
    demand_model: str = "DD",
    required_pressure: float | None = None,
    minimum_pressure: float | None = None,
    in_place: bool = False,
) -> SimulationResult:
    """Simulate ``wn`` with ``changes`` for ``hours`` from its start state (``EngineFailure`` when EPANET
    refuses the scenario); ``in_place``: ``wn`` is the caller's own copy, changed as it is."""
    if hours <= 0:
        raise SimulationError("duration must be more than zero")
    changed, removed = scenario(wn, changes, in_place=in_place)
    set_window(changed, duration_s=int(hours * 3600), step_s=step_s)
    hydraulic = changed.options.hydraulic
    hydraulic.demand_model = demand_model
    if demand_model == "PDD":
        hydraulic.required_pressure = float(required_pressure if required_pressure is not None else 20.0)
        hydraulic.minimum_pressure = float(minimum_pressure if minimum_pressure is not None else 0.0)
    results = run_epanet(changed)
    pressure = results.node["pressure"][wn.junction_name_list]
    lowest, when = pressure.min(), pressure.idxmin()
    node = str(lowest.idxmin())
    below = [LowPressure(str(n), float(lowest[n]), int(when[n])) for n in lowest.index if lowest[n] < threshold]
    below.sort(key=lambda p: (p.lowest, p.node_id))
    head = results.node["head"]
    tanks = []
    for name in wn.tank_name_list:
        tank = changed.get_node(name)
        level = head[name] - tank.elevation
        empty = level[level <= tank.min_level + EMPTY_TOLERANCE_M]
        tanks.append(TankLevels(name, float(level.iloc[0]), float(level.iloc[-1]), float(level.min()),
                                float(level.max()), int(empty.index[0]) if len(empty) else None))  # fmt: skip
    return SimulationResult(float(lowest[node]), node, int(when[node]), below, tanks, removed, results)
