"""The contaminant simulation's computation (issue 42 item 2, ``run_contaminant_simulation``): a
contaminant enters at nodes for a while; which nodes see it above a threshold, when, and how much of it
the customers draw.

EPANET water quality of a chemical (CHEM, no decay): each injection node is a source — ``SETPOINT`` for a
``concentration`` (mg/L leaving the node), ``MASS`` for a ``mass_rate`` (mg/min added) — on from the
window's start for ``injection_minutes``, then off (a source pattern of the quality step's length). The
arrival at a node is the first report time its concentration passes the threshold; the extent is how
many nodes and pipes are above it at each report time; the exposure is the mass and volume drawn at
junctions while above it (demand × concentration × the time to the next report). SI: m³/s, mg/L, mg, m³.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from queries.runs.engine import run_epanet

SOURCE_PATTERN = "tjw-injection"
L_PER_M3 = 1000.0


class ContaminantError(ValueError):
    """The simulation cannot be computed as asked (the message names the parameter)."""


@dataclass(frozen=True)
class ContaminantResult:
    #: Node → seconds from the window's start when it first passed the threshold (reached nodes only).
    arrival: dict[str, int]
    #: (seconds, nodes above, pipes above) at each report time.
    extent: list[tuple[int, int, int]] = field(default_factory=list)
    mass_consumed: float = 0.0  # mg drawn at junctions while above the threshold
    volume_consumed: float = 0.0  # m³
    results: SimulationResults | None = None


def contaminant(
    wn: WaterNetworkModel,
    *,
    injection_node_ids: list[str],
    injection_minutes: float,
    hours: float,
    threshold: float,
    concentration: float | None = None,
    mass_rate: float | None = None,
    step_s: int = 900,
    quality_step_s: int = 300,
    in_place: bool = False,
) -> ContaminantResult:
    """Inject at ``injection_node_ids`` (1–10) for ``injection_minutes`` and follow it for ``hours``;
    ``in_place``: ``wn`` is the caller's own copy, changed as it is."""
    if not 1 <= len(injection_node_ids) <= 10:
        raise ContaminantError("injection_node_ids must name 1 to 10 nodes")
    unknown = [n for n in injection_node_ids if n not in wn.node_name_list]
    if unknown:
        raise ContaminantError(f"injection_node_ids {', '.join(map(repr, unknown))} are not nodes of the model")
    if (concentration is None) == (mass_rate is None):
        raise ContaminantError("give the injection as concentration or as mass_rate, one of them")
    strength = concentration if concentration is not None else mass_rate
    assert strength is not None
    if strength <= 0 or threshold < 0 or hours <= 0 or not 0 < injection_minutes <= hours * 60:
        raise ContaminantError(
            "the injection's strength, its minutes (within the window) and the duration must be more than zero"
        )
    model = wn if in_place else copy.deepcopy(wn)
    t = model.options.time
    # Reported at the quality step, so an arrival is known to within one quality step.
    t.duration, t.report_timestep, t.report_start = int(hours * 3600), quality_step_s, 0
    t.hydraulic_timestep, t.quality_timestep = min(step_s, quality_step_s), quality_step_s
    # EPANET has one pattern step: the injection's pattern needs one that divides its minutes, so every
    # pattern is refined to it, each multiplier repeated (the demands follow the same clock as before).
    injection_s = int(round(injection_minutes * 60))
    fine = math.gcd(int(t.pattern_timestep), injection_s)
    if fine < 60:
        raise ContaminantError("injection_minutes must be whole minutes")
    factor = int(t.pattern_timestep) // fine
    if factor > 1:
        for _, pattern in model.patterns():
            pattern.multipliers = np.repeat(np.asarray(pattern.multipliers, dtype=float), factor)
        t.pattern_timestep = fine
    model.options.quality.parameter = "CHEMICAL"
    on = injection_s // fine
    model.add_pattern(SOURCE_PATTERN, [1.0] * on + [0.0] * max(1, math.ceil(hours * 3600 / fine) - on))
    kind = "SETPOINT" if concentration is not None else "MASS"
    # WNTR's SI: a concentration in kg/m³ (mg/L / 1000), a mass rate in kg/s (mg/min · 1e-6 / 60).
    value = strength / L_PER_M3 if concentration is not None else strength * 1e-6 / 60.0
    for node in injection_node_ids:
        model.add_source(f"tjw-src-{node}", node, kind, value, SOURCE_PATTERN)
    results = run_epanet(model)
    quality = results.node["quality"] * L_PER_M3  # kg/m³ → mg/L
    above = quality > threshold
    times = quality.index.to_numpy(dtype=float)
    arrival = {str(n): int(times[np.argmax(above[n].to_numpy())]) for n in quality.columns if above[n].any()}
    link_q = results.link["quality"] * L_PER_M3 if "quality" in results.link else None
    extent = [
        (int(t_), int(above.loc[t_].sum()), int((link_q.loc[t_] > threshold).sum()) if link_q is not None else 0)
        for t_ in quality.index
    ]
    junctions = model.junction_name_list
    demand = results.node["demand"][junctions].clip(lower=0).to_numpy()[:-1]
    conc = quality[junctions].to_numpy()[:-1]
    dt = np.diff(times)[:, None]
    drawn = (conc > threshold) & (demand > 0)
    return ContaminantResult(
        arrival=arrival,
        extent=extent,
        mass_consumed=float(np.sum(np.where(drawn, demand * conc * L_PER_M3 * dt, 0.0))),
        volume_consumed=float(np.sum(np.where(drawn, demand * dt, 0.0))),
        results=results,
    )
