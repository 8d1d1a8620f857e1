"""The flushing analysis's computation (issue 42 item 2, ``run_flushing_analysis``): hydrants open at a
flow each for the window simulated; which pipes reach the scouring velocity, what pressure is left.

Each hydrant is an extra demand at its node, constant over the window (a demand of its own pattern of
ones, so the node's own customers keep theirs). A pipe is flushed when its velocity reaches the target
at some report step; its direction is the sign of the flow then (with the pipe's start → end, or
against it). The sources are the reservoirs and tanks whose outflow the flushing raises, with that rise.
Values are SI (m³/s, m/s, m of head); the presentation step converts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from queries.runs.engine import run_epanet, set_window

HYDRANT_PATTERN = "tjw-hydrant-on"
DEFAULT_TARGET_VELOCITY = 0.75  # m/s (2.5 ft/s)


class FlushingError(ValueError):
    """The flushing cannot be computed as asked (the message names the parameter)."""


@dataclass(frozen=True)
class FlushedPipe:
    pipe_id: str
    max_velocity: float  # m/s
    direction: str  # "start_to_end" or "end_to_start" when the velocity peaked


@dataclass(frozen=True)
class FlushingResult:
    pipes_flushed: list[FlushedPipe]
    hydrant_pressure: dict[str, float]  # m, the lowest at each hydrant over the window
    min_pressure: float  # m, the lowest at any junction
    min_pressure_node: str
    #: Reservoirs and tanks whose mean outflow the flushing raised (m³/s), the largest first.
    sources: list[tuple[str, float]] = field(default_factory=list)
    scenario: SimulationResults | None = None
    baseline: SimulationResults | None = None


def _window(wn: WaterNetworkModel, hours: float, step_s: int, *, in_place: bool = False) -> WaterNetworkModel:
    wn = wn if in_place else copy.deepcopy(wn)
    set_window(wn, duration_s=int(hours * 3600), step_s=step_s)
    return wn


def with_hydrants(wn: WaterNetworkModel, flows: dict[str, float], *, in_place: bool = False) -> WaterNetworkModel:
    """A copy of ``wn`` (``wn`` itself when ``in_place``) with each hydrant's flow (m³/s) as an extra
    constant demand at its node."""
    out = wn if in_place else copy.deepcopy(wn)
    if HYDRANT_PATTERN not in out.pattern_name_list:
        out.add_pattern(HYDRANT_PATTERN, [1.0])
    for node, flow in flows.items():
        out.get_node(node).demand_timeseries_list.append((flow, HYDRANT_PATTERN, "hydrant"))
    return out


def flushing(
    wn: WaterNetworkModel,
    *,
    hydrants: dict[str, float],
    hours: float,
    step_s: int = 900,
    target_velocity: float = DEFAULT_TARGET_VELOCITY,
    in_place: bool = False,
) -> FlushingResult:
    """Open ``hydrants`` (junction id → flow, m³/s; 1 to 10) for ``hours`` from the model's start state;
    ``in_place``: ``wn`` is the caller's own copy, solved as it is and then with the hydrants open."""
    if not 1 <= len(hydrants) <= 10:
        raise FlushingError("hydrant_node_ids must name 1 to 10 junctions")
    for node, flow in hydrants.items():
        if node not in wn.junction_name_list:
            raise FlushingError(f"hydrant node {node!r} is not a junction of the model")
        if flow <= 0:
            raise FlushingError(f"the flow of hydrant {node!r} must be more than zero")
    if hours <= 0 or target_velocity <= 0:
        raise FlushingError("duration and target_velocity must be more than zero")
    base_wn = _window(wn, hours, step_s, in_place=in_place)
    baseline = run_epanet(base_wn)  # solving leaves the network as it was
    scenario = run_epanet(with_hydrants(base_wn, hydrants, in_place=in_place))
    velocity, flow = scenario.link["velocity"], scenario.link["flowrate"]
    flushed = []
    for pipe in wn.pipe_name_list:
        peak = float(velocity[pipe].max())
        if peak >= target_velocity:
            at = velocity[pipe].idxmax()
            direction = "start_to_end" if float(flow[pipe][at]) >= 0 else "end_to_start"
            flushed.append(FlushedPipe(pipe, peak, direction))
    flushed.sort(key=lambda p: (-p.max_velocity, p.pipe_id))
    pressure = scenario.node["pressure"][wn.junction_name_list]
    lowest = pressure.min()
    supply = [*wn.reservoir_name_list, *wn.tank_name_list]
    # A source's demand is negative while it supplies: the flushing's extra is the drop of that demand.
    rise = (baseline.node["demand"][supply] - scenario.node["demand"][supply]).mean()
    sources = sorted(((str(n), float(v)) for n, v in rise.items() if v > 1e-9), key=lambda s: -s[1])
    return FlushingResult(
        pipes_flushed=flushed,
        hydrant_pressure={n: float(pressure[n].min()) for n in hydrants},
        min_pressure=float(lowest.min()),
        min_pressure_node=str(lowest.idxmin()),
        sources=sources,
        scenario=scenario,
        baseline=baseline,
    )
