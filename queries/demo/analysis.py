"""Demo analysis and sensor placement runs, computed for real with WNTR on the demo network.

The valve isolation and demo B's daily simulation are run by the analyses' own kinds and writer (the
runner the analyses app registers, ``queries.demo.seeders.demo_runner``) on the demo's model version, so
that the demo's runs and a utility's cannot drift apart:

* burst: a main break modelled the classic EPANET way — a burst node with an emitter (pressure-
  dependent outflow) hung off a junction through a short pipe that a time control opens at the burst
  time; the scenario's node/link series are stored for a 12-hour window. Not yet the burst kind's run:
  the kind starts its window from the model's initial state (the .inp's tank levels), while the demo's
  SCADA near the burst reads a burst eight hours into the day's baseline;
* valve isolation: the segment of the burst pipe with a strategic valve layer (WNTR
  ``generate_valve_layer``), the layer the demo's GIS also exports as a valve layer;
* a failed run: a what-if simulation EPANET refuses, with EPANET's own error code;
* sensor placement: greedy maximum coverage over the pipe graph (a candidate covers junctions within a
  network distance), with different parameters per run.
"""

from __future__ import annotations

import copy as _copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import pandas as pd
import wntr
from wntr.network import LinkStatus, WaterNetworkModel
from wntr.network.controls import Control, ControlAction, SimTimeCondition
from wntr.sim.results import SimulationResults

from queries.demo.seeders import demo_runner
from queries.importer.copy import copy_lines
from queries.importer.epanet import (
    LINK_SERIES_COLUMNS,
    NODE_SERIES_COLUMNS,
    link_series_lines,
    node_series_lines,
    with_leak_column,
)
from queries.models import (
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
    SensorPlacementRun,
)
from queries.runs.engine import EngineFailure, run_epanet
from queries.units import Q_EMITTER, Q_FLOW, Q_PRESSURE, Q_VOLUME, Shown, shown

if TYPE_CHECKING:
    from contexts.models import Project
    from queries.models import NetworkSource

BURST_NODE, BURST_LINK = "BURST-NODE", "BURST-LINK"


def _refs(element_type: str, ids: Sequence[str]) -> list[dict[str, str]]:
    return [{"element_type": element_type, "element_id": i} for i in ids]


@dataclass
class BurstOutcome:
    run: AnalysisRun
    pipe_id: str
    node_id: str


def burst_run(
    *,
    project_id: int,
    inp_path: Path,
    pipe_id: str,
    start: datetime,
    burst_hour: float,
    window: tuple[float, float],
    step_minutes: int,
    emitter_coefficient: float,
    run_id: str,
    created_at: datetime,
    unit_system: str = "SI",
) -> BurstOutcome:
    """Simulate a burst at the start node of ``pipe_id`` and store the run, its results (in
    ``unit_system``, the project's) and its series."""
    wn = WaterNetworkModel(str(inp_path))
    pipe = wn.get_link(pipe_id)
    node_id = pipe.start_node_name
    node = wn.get_node(node_id)
    step = step_minutes * 60
    wn.options.time.duration = int(window[1] * 3600)
    wn.options.time.hydraulic_timestep = step
    wn.options.time.report_timestep = step
    wn.add_junction(BURST_NODE, base_demand=0.0, elevation=node.elevation, coordinates=node.coordinates)
    wn.get_node(BURST_NODE).emitter_coefficient = emitter_coefficient
    wn.add_pipe(BURST_LINK, node_id, BURST_NODE, length=1.0, diameter=pipe.diameter, roughness=120.0,
                initial_status="CLOSED")  # fmt: skip
    opening = ControlAction(wn.get_link(BURST_LINK), "status", LinkStatus.Open)
    wn.add_control("burst-opens", Control(SimTimeCondition(wn, "=", int(burst_hour * 3600)), opening))
    results = run_epanet(wn)

    base_wn = WaterNetworkModel(str(inp_path))
    base_wn.options.time.duration = int(window[1] * 3600)
    base_wn.options.time.hydraulic_timestep = step
    base_wn.options.time.report_timestep = step
    baseline = run_epanet(base_wn)

    t0, t1 = int(window[0] * 3600), int(window[1] * 3600)
    leak = results.node["demand"][BURST_NODE]
    leak_after = leak[leak.index >= burst_hour * 3600]
    pressure_drop = baseline.node["pressure"] - results.node["pressure"][baseline.node["pressure"].columns]
    at_peak = pressure_drop.loc[int(burst_hour * 3600) + 2 * step].drop(labels=[], errors="ignore")
    junction_drop = at_peak[list(base_wn.junction_name_list)].sort_values(ascending=False)
    affected = junction_drop[junction_drop > 1.0]
    lost_m3 = float(np.trapezoid(leak_after.to_numpy(dtype=float), leak_after.index.to_numpy(dtype=float)))
    peak = float(leak_after.max())
    during = baseline.node["demand"].loc[int(burst_hour * 3600) : t1, list(affected.index)]
    demand_affected = float(during.mean().sum()) if len(affected) else 0.0
    flow, volume, pressure, emitter = (_shown(q, unit_system) for q in (Q_FLOW, Q_VOLUME, Q_PRESSURE, Q_EMITTER))

    run = AnalysisRun.objects.create(
        project_id=project_id,
        run_id=run_id,
        kind="burst",
        status="succeeded",
        title=f"Main break at {node_id} ({pipe_id})",
        parameters={
            "pipe_id": pipe_id,
            "node_id": node_id,
            "burst_time": (start + timedelta(hours=burst_hour)).isoformat(),
            "emitter_coefficient": emitter_coefficient,
            "window_start": (start + timedelta(hours=window[0])).isoformat(),
            "window_end": (start + timedelta(hours=window[1])).isoformat(),
            "step_minutes": step_minutes,
            "method": "emitter node opened by a time control (EPANET 2.2 via WNTR)",
        },
        created_at=created_at,
        started_at=created_at + timedelta(seconds=5),
        finished_at=created_at + timedelta(seconds=47),
        summary={
            "volume": volume(lost_m3),
            "peak_flow": flow(peak),
            "affected_nodes": len(affected),
            "demand_affected": flow(demand_affected),
            "units": {"volume": volume.label, "peak_flow": flow.label, "demand_affected": flow.label},
        },  # fmt: skip
    )
    # The burst kind's result types and payloads (``analyses.kinds.burst``: list_analysis_results publishes
    # their models), in the project's units; the burst point is the junction the burst node hangs off.
    results_rows = [
        AnalysisResult(run=run, sequence=1, result_type="leak", payload={
            "node_id": node_id, "pipe_id": pipe_id, "position": 0.0, "coefficient": emitter(emitter_coefficient),
            "coefficient_from_leak_flow": False, "peak_flow": flow(peak),
            "mean_flow": flow(float(leak_after.mean())), "volume": volume(lost_m3),
            "units": {"coefficient": emitter.label, "peak_flow": flow.label, "mean_flow": flow.label,
                      "volume": volume.label},
        }, element_refs=_refs("junction", [node_id]) + _refs("pipe", [pipe_id])),
        AnalysisResult(run=run, sequence=2, result_type="affected_nodes", payload={
            "nodes": [{"node_id": k, "pressure_drop": pressure(float(v))} for k, v in affected.head(50).items()],
            "count": len(affected), "threshold": pressure(1.0),
            "at": (start + timedelta(seconds=int(burst_hour * 3600) + 2 * step)).isoformat(),
            "units": {"pressure_drop": pressure.label, "threshold": pressure.label},
        }, element_refs=_refs("junction", list(affected.head(50).index))),
        AnalysisResult(run=run, sequence=3, result_type="customers_affected", payload={
            "demand_affected": flow(demand_affected), "junctions": len(affected),
            "units": {"demand_affected": flow.label},
        }),
    ]  # fmt: skip
    AnalysisResult.objects.bulk_create(results_rows)

    # Series of the real network's elements over the window (the artificial burst node/link are
    # reported through ``leak_demand`` at the burst junction, not as elements of their own).
    keep_nodes: dict[str, Sequence[str]] = {
        "junction": list(base_wn.junction_name_list),
        "reservoir": list(base_wn.reservoir_name_list),
        "tank": list(base_wn.tank_name_list),
    }
    keep_links: dict[str, Sequence[str]] = {
        "pipe": list(base_wn.pipe_name_list),
        "pump": list(base_wn.pump_name_list),
        "valve": list(base_wn.valve_name_list),
    }
    windowed = _window(results, t0, t1)
    node_lines = node_series_lines(windowed, base_wn, start=start, head=(run.pk,), names=keep_nodes)
    leak_by_time = {
        (start + timedelta(seconds=int(t))).isoformat(): float(v) for t, v in _window_series(leak, t0, t1).items()
    }

    copy_lines(
        AnalysisNodeSeries._meta.db_table,
        ["run_id", *NODE_SERIES_COLUMNS, "leak_demand"],
        with_leak_column(node_lines, node_id, leak_by_time),
    )
    copy_lines(
        AnalysisLinkSeries._meta.db_table,
        ["run_id", *LINK_SERIES_COLUMNS],
        link_series_lines(windowed, base_wn, start=start, head=(run.pk,), names=keep_links),
    )
    return BurstOutcome(run=run, pipe_id=pipe_id, node_id=node_id)


def _shown(quantity: str, unit_system: str) -> Shown:
    found = shown(quantity, unit_system=unit_system)
    if found is None:
        raise ValueError(f"no unit for {quantity!r} in {unit_system!r}")
    return found


def _window_series(series: pd.Series, t0: int, t1: int) -> pd.Series:
    return series[(series.index >= t0) & (series.index <= t1)]


def _window(results: SimulationResults, t0: int, t1: int) -> SimulationResults:
    out = _copy.copy(results)
    out.node = {k: v[(v.index >= t0) & (v.index <= t1)] for k, v in results.node.items()}
    out.link = {k: v[(v.index >= t0) & (v.index <= t1)] for k, v in results.link.items()}
    return out


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
