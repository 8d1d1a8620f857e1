"""Demo analysis and sensor placement runs, computed for real with WNTR on the demo network.

The burst, the valve isolation and demo B's daily simulation are run by the analyses' own kinds and
writer (the runner the analyses app registers, ``queries.demo.seeders.demo_runner``) on the demo's model
version, starting from the demo's stored baseline at their start, so that the demo's runs and a utility's
cannot drift apart:

* burst: LINK-1523 bursts at 2026-11-01T08:00Z (R-DEMO-1), an emitter a quarter along the pipe, for the
  10 hours until it is isolated and repaired;
* valve isolation: the segment of the burst pipe with a strategic valve layer (WNTR
  ``generate_valve_layer``), the layer the demo's GIS also exports as a valve layer;
* a failed run: a what-if simulation EPANET refuses, with EPANET's own error code;
* sensor placement: greedy maximum coverage over the pipe graph (a candidate covers junctions within a
  network distance), with different parameters per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import pandas as pd
import wntr
from wntr.network import WaterNetworkModel

from queries.demo.seeders import demo_runner
from queries.models import (
    AnalysisRun,
    SensorPlacementRun,
)
from queries.runs.engine import EngineFailure, run_epanet
from queries.units import Q_EMITTER, unit

if TYPE_CHECKING:
    from contexts.models import Project
    from queries.models import NetworkSource

#: The demo's burst point, as a fraction of LINK-1523 from its start node: nearer JUNCTION-1304 (the pipe's
#: start), where the burst's flow is stored and the demo's transmitters are placed.
BURST_POSITION = 0.25


@dataclass
class BurstOutcome:
    run: AnalysisRun
    pipe_id: str
    node_id: str


def burst_run(
    *,
    project: Project,
    wn: WaterNetworkModel,
    version: NetworkSource,
    pipe_id: str,
    start: datetime,
    duration_minutes: int,
    emitter_coefficient_si: float,
    run_id: str,
    created_at: datetime,
) -> BurstOutcome:
    """The demo's main break, run by the burst analysis itself (``run_burst_analysis``'s kind) from
    ``start`` for ``duration_minutes``, starting from the demo's stored baseline at ``start``; the size is
    given in SI (m³/s per m^0.5) and submitted in the project's units."""
    params = {
        "pipe_id": pipe_id, "position": BURST_POSITION, "start": start.isoformat().replace("+00:00", "Z"),
        "duration_minutes": duration_minutes,
        "emitter_coefficient": unit(Q_EMITTER, project.unit_system)(emitter_coefficient_si),
    }  # fmt: skip
    pipe = wn.get_link(pipe_id)
    node_id = pipe.start_node_name if BURST_POSITION < 0.5 else pipe.end_node_name
    run, _ = demo_runner()(
        project=project, kind="burst", params=params, wn=wn, version=version, run_id=run_id,
        title=f"Main break at {node_id} ({pipe_id})", created_at=created_at,
    )  # fmt: skip
    return BurstOutcome(run=run, pipe_id=pipe_id, node_id=node_id)


def valve_isolation_run(
    *,
    project: Project,
    wn: WaterNetworkModel,
    version: NetworkSource,
    pipe_id: str,
    seed: int,
    run_id: str,
    created_at: datetime,
) -> tuple[AnalysisRun, pd.DataFrame]:
    """Isolate ``pipe_id`` with the demo's valve layer (a strategic N-2 layer, WNTR's
    ``generate_valve_layer``), run by the valve isolation analysis itself; returns the run and the layer
    (``link``, ``node`` per valve, its fid ``valve_fid(i)``) for the GIS layer of isolation valves."""
    valve_layer = wntr.network.generate_valve_layer(wn, "strategic", 2, seed=seed)
    valves = [(valve_fid(i), str(row["link"]), str(row["node"])) for i, row in valve_layer.iterrows()]
    run, _ = demo_runner()(
        project=project, kind="valve_isolation", params={"pipe_ids": [pipe_id]}, wn=wn, version=version,
        run_id=run_id, title=f"Isolate the segment of {pipe_id}", created_at=created_at, valves=valves,
    )  # fmt: skip
    return run, valve_layer


def valve_fid(index: object) -> str:
    """The GIS feature id of the demo's valve ``index`` (its isolation_valves layer numbers them)."""
    return f"IV-{50000 + int(str(index))}"


def simulation_run(
    *, project: Project, wn: WaterNetworkModel, version: NetworkSource, start: datetime, hours: int, run_id: str,
    created_at: datetime,
) -> AnalysisRun:  # fmt: skip
    """The daily extended-period simulation of demo B: the what-if simulation with no change."""
    params = {"start": start.isoformat().replace("+00:00", "Z"), "duration_minutes": hours * 60}
    run: AnalysisRun
    run, _ = demo_runner()(
        project=project, kind="simulation", params=params, wn=wn, version=version, run_id=run_id,
        title="Daily extended-period simulation", created_at=created_at,
    )  # fmt: skip
    return run


def failed_run(*, project_id: int, inp_path: Path, pipe_id: str, run_id: str, created_at: datetime) -> AnalysisRun:
    """A what-if simulation EPANET rejects (a pipe 'upsized' to a zero diameter): the run records
    EPANET's own error code, no series."""
    wn = WaterNetworkModel(str(inp_path))
    # WNTR's setter refuses a zero diameter, so the bad value from the "planning sheet" is put on the
    # private attribute; EPANET itself then rejects the input file, which is the failure we record.
    wn.get_link(pipe_id)._diameter = 0.0
    wn.options.time.duration = 6 * 3600
    code, message = "", ""
    try:
        run_epanet(wn)
        status = "succeeded"
    except EngineFailure as exc:
        status = "failed"
        code = exc.error_code
        message = "EPANET rejected the scenario's input (a link property is out of range)"
    return AnalysisRun.objects.create(
        project_id=project_id,
        run_id=run_id,
        kind="simulation",
        status=status,
        title=f"What-if: replace {pipe_id}",
        parameters={"pipe_id": pipe_id, "diameter_m": 0.0, "duration_h": 6},
        created_at=created_at,
        started_at=created_at + timedelta(seconds=2),
        finished_at=created_at + timedelta(seconds=4),
        summary={"error": code} if code else {},
        error_code=code,
        error_message=message,
    )


def sensor_placement_run(
    *,
    project_id: int,
    wn: WaterNetworkModel,
    run_id: str,
    n_sensors: int,
    radius_m: float,
    weight: str,
    candidates: int,
    seed: int,
    created_at: datetime,
) -> SensorPlacementRun:
    """Greedy maximum coverage: each candidate junction covers the junctions within ``radius_m`` of
    pipe-network distance; weights are 1 per junction (``weight='node'``) or base demand
    (``weight='demand'``). Greedy is within (1 - 1/e) of the optimum for this submodular objective."""
    graph: nx.Graph[str] = nx.Graph()
    for name, link in wn.links():
        length = float(getattr(link, "length", 1.0) or 1.0)
        graph.add_edge(link.start_node_name, link.end_node_name, weight=length, name=name)
    junctions = sorted(wn.junction_name_list)
    if weight == "demand":
        w = {j: float(wn.get_node(j).base_demand or 0.0) for j in junctions}
    else:
        w = dict.fromkeys(junctions, 1.0)
    total = sum(w.values()) or 1.0
    rng = np.random.default_rng(seed)
    pool = sorted(rng.choice(len(junctions), size=min(candidates, len(junctions)), replace=False).tolist())
    cand = [junctions[i] for i in pool]
    cover: dict[str, set[str]] = {}
    for c in cand:
        reach = nx.single_source_dijkstra_path_length(graph, c, cutoff=radius_m, weight="weight")
        cover[c] = {n for n in reach if n in w}
    covered: set[str] = set()
    selected: list[dict[str, Any]] = []
    for rank in range(1, n_sensors + 1):
        best, gain = None, -1.0
        for c in cand:
            if any(s["element_id"] == c for s in selected):
                continue
            g = sum(w[n] for n in cover[c] - covered)
            if g > gain:
                best, gain = c, g
        if best is None:
            break
        covered |= cover[best]
        selected.append({"rank": rank, "element_type": "junction", "element_id": best,
                         "marginal_gain": round(gain / total, 6)})  # fmt: skip
    objective_value = sum(w[n] for n in covered) / total
    return SensorPlacementRun.objects.create(
        project_id=project_id,
        run_id=run_id,
        status="succeeded",
        title=f"{n_sensors} pressure sensors, {weight}-weighted coverage within {radius_m:g} m",
        parameters={
            "n_sensors": n_sensors,
            "radius_m": radius_m,
            "weight": weight,
            "candidates": len(cand),
            "candidate_seed": seed,
            "algorithm": "greedy max coverage",
        },  # fmt: skip
        objective=f"{weight}_coverage",
        objective_value=round(objective_value, 6),
        selected_sensors=selected,
        scores={
            "coverage": round(objective_value, 6),
            "covered_junctions": len(covered),
            "junctions": len(junctions),
            "marginal_gains": [s["marginal_gain"] for s in selected],
            "upper_bound_note": "greedy is within 1 - 1/e of the optimal coverage",
        },
        created_at=created_at,
        finished_at=created_at + timedelta(seconds=math.ceil(len(cand) / 50)),
    )
