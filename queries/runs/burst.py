"""The burst analysis's computation (issue 42 item 2, ``run_burst_analysis``): a pipe bursts at a position
along it for the window simulated; how much water it loses and where pressure drops.

The pipe is split at ``position`` (``wntr.morph.split_pipe``: the new junction's elevation interpolated
between the pipe's ends) and the burst is an EPANET emitter at the new junction, ``q = C·p^0.5`` (EPANET's
convention, exponent 0.5), on for the whole window: the scenario. The baseline for comparison is the same
split network without the emitter (a junction of no demand changes nothing), over the same window — two
scenarios, as the cost model counts them. A size given as ``leak_flow`` is turned into the coefficient at
the baseline pressure of the burst point at the window's start (``C = q / √p``) and reported.

Values are SI (m³/s, m of head, m³), the units the model is stored in; the presentation step converts.
EPANET holds a hydraulic state until the next step, so the volume lost is the sum of each reported flow
times the time to the next report.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import wntr
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from queries.runs.engine import run_epanet, set_window

BURST_NODE = "tjw-burst-node"
BURST_PIPE = "tjw-burst-pipe"


class BurstError(ValueError):
    """The burst cannot be computed as asked (the message names the parameter)."""


@dataclass(frozen=True)
class BurstResult:
    leak_node: str
    coefficient: float  # m³/s per m^0.5
    coefficient_from_leak_flow: bool
    peak_flow: float  # m³/s
    mean_flow: float  # m³/s
    volume: float  # m³
    #: Junctions whose pressure drops by more than the threshold, the most affected first: (id, drop m).
    affected: list[tuple[str, float]] = field(default_factory=list)
    #: Their base demand (m³/s) over the window, averaged: the customers' water the drop reaches.
    demand_affected: float = 0.0
    scenario: SimulationResults | None = None
    baseline: SimulationResults | None = None


def _split(wn: WaterNetworkModel, pipe_id: str, position: float, *, in_place: bool = False) -> WaterNetworkModel:
    if pipe_id not in wn.pipe_name_list:
        raise BurstError(f"pipe_id {pipe_id!r} is not a pipe of the model")
    if not 0.0 < position < 1.0:
        raise BurstError(f"position must be between 0 and 1 (exclusive), not {position}")
    split: WaterNetworkModel = wntr.morph.split_pipe(wn, pipe_id, BURST_PIPE, BURST_NODE, split_at_point=position,
                                                     return_copy=not in_place)  # fmt: skip
    return split


def _run(wn: WaterNetworkModel, hours: float, step_s: int) -> SimulationResults:
    set_window(wn, duration_s=int(hours * 3600), step_s=step_s)
    return run_epanet(wn)


def volume_of(flow: pd.Series) -> float:
    """m³ lost: each reported flow (m³/s) held until the next report (EPANET's hydraulic steps)."""
    times = flow.index.to_numpy(dtype=float)
    if len(times) < 2:
        return 0.0
    return float(np.sum(flow.to_numpy()[:-1] * np.diff(times)))


def burst(
    wn: WaterNetworkModel,
    *,
    pipe_id: str,
    hours: float,
    position: float = 0.5,
    step_s: int = 900,
    coefficient: float | None = None,
    leak_flow: float | None = None,
    pressure_drop_threshold: float = 0.0,
    in_place: bool = False,
) -> BurstResult:
    """The burst of ``pipe_id`` over ``hours`` from the model's start state, sized by ``coefficient``
    (m³/s per m^0.5) or by ``leak_flow`` (m³/s at the baseline pressure), one of them. ``in_place``: ``wn``
    is the caller's own copy, split and solved as it is (no copy: a run's model is its own)."""
    if (coefficient is None) == (leak_flow is None):
        raise BurstError("give the burst's size as coefficient or as leak_flow, one of them")
    if hours <= 0:
        raise BurstError("duration must be more than zero")
    split = _split(wn, pipe_id, position, in_place=in_place)
    # Solving a network leaves it as it was: the baseline and then the scenario on the same one.
    baseline = _run(split if in_place else copy.deepcopy(split), hours, step_s)
    from_flow = coefficient is None
    if coefficient is None:
        assert leak_flow is not None
        p0 = float(baseline.node["pressure"][BURST_NODE].iloc[0])
        if p0 <= 0 or leak_flow <= 0:
            raise BurstError(f"leak_flow needs a positive flow and pressure at the burst point (pressure {p0:.2f} m)")
        coefficient = leak_flow / math.sqrt(p0)
    if coefficient <= 0:
        raise BurstError("coefficient must be more than zero")
    scenario_wn = split if in_place else copy.deepcopy(split)
    scenario_wn.get_node(BURST_NODE).emitter_coefficient = coefficient
    scenario = _run(scenario_wn, hours, step_s)
    flow = scenario.node["demand"][BURST_NODE]
    junctions = [j for j in split.junction_name_list if j != BURST_NODE]
    drop = (baseline.node["pressure"][junctions] - scenario.node["pressure"][junctions]).max()
    hit = drop[drop > pressure_drop_threshold].sort_values(ascending=False)
    demand = baseline.node["demand"][list(hit.index)].mean() if len(hit) else pd.Series(dtype=float)
    return BurstResult(
        leak_node=BURST_NODE,
        coefficient=float(coefficient),
        coefficient_from_leak_flow=from_flow,
        peak_flow=float(flow.max()),
        mean_flow=float(flow.iloc[:-1].mean()) if len(flow) > 1 else float(flow.mean()),
        volume=volume_of(flow),
        affected=[(str(j), float(d)) for j, d in hit.items()],
        demand_affected=float(demand.clip(lower=0).sum()),
        scenario=scenario,
        baseline=baseline,
    )
