"""The valve isolation analysis (``run_valve_isolation_analysis``): the valves to close to isolate pipes,
what is inside the isolated segment, what else loses its supply, and the demand lost
(``queries.runs.isolation``, on the segments ``wntr.metrics.valve_segments`` cuts).

No EPANET run: the analysis is graph work on the model and the project's valve layer, which the caller
reads (``queries.runs.segments.valve_layer``, ``IsolationValve`` rows ``(source_fid, link_id, node_id)``)
and passes to ``compute``. This version has no hydraulic check of the isolated network, so no series and
no window: the cost model sees one scenario of one hourly step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from analyses.kinds import REST_PATHS, TOOL_NAMES
from analyses.kinds.base import (
    AnalysisKind,
    Outcome,
    Progress,
    ResultRow,
    id_list,
    link_ref,
    node_ref,
    object_schema,
    refuse,
    unit,
    unknown_ids,
)
from queries.units import Q_FLOW

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape

#: What the cost model is told: graph work as cheap as one hydraulic step of one hour.
SHAPE_HOURS = 1.0
FAILED_VALVES = "Valves of the layer (by their id there) that do not close: the segment widens past them."


class ValveIsolationKind(AnalysisKind):
    """Pipes isolated by closing valves: the valves, the segment, the outage, the demand lost."""

    name = "valve_isolation"
    tool = TOOL_NAMES["valve_isolation"]
    rest_path = REST_PATHS["valve_isolation"]
    title = "Valve isolation analysis"
    scenarios = 1

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        properties = {
            "pipe_ids": id_list("The pipes to isolate (1 to 20).", 1, 20),
            "failed_valves": id_list(FAILED_VALVES, 0, 500),
        }
        return object_schema(self.title, properties, ["pipe_ids"])

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        pipes = sorted(str(p) for p in params["pipe_ids"])
        unknown_ids("pipe_ids", pipes, wn.pipe_name_list, ("a pipe", "pipes"))
        # The valves are the project's layer, read at run time: an unknown fid is refused by the run.
        return {"pipe_ids": pipes, "failed_valves": sorted(str(v) for v in params.get("failed_valves", []))}

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        from queries.runs.cost import RunShape

        return RunShape(nodes=len(wn.node_name_list), links=len(wn.link_name_list), hours=SHAPE_HOURS,
                        step_s=int(SHAPE_HOURS * 3600), scenarios=self.scenarios)  # fmt: skip

    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        from queries.runs.isolation import IsolationError, isolate

        if valves is None:
            raise ValueError("valve isolation computes with the project's valve layer: pass its valves")
        # The run has no window; its start is the instant it computed (no series is stored against it).
        now = datetime.now(UTC).replace(microsecond=0)
        progress(0.1, f"Finding the valves that isolate {len(si['pipe_ids'])} pipe(s).")
        try:
            result = isolate(wn, [(str(f), str(link), str(node)) for f, link, node in valves], list(si["pipe_ids"]),
                             frozenset(si["failed_valves"]))  # fmt: skip
        except IsolationError as exc:
            first = str(exc).split(" ", 1)[0]
            raise refuse(first if first in si else "parameters", f"{exc}.") from None
        progress(0.9, "Summarising the isolation.")
        flow = unit(Q_FLOW, unit_system)
        segment = ResultRow("isolation_segment", {
            "valves_to_close": [{"valve_id": f, "pipe_id": link, "node_id": node}
                                for f, link, node in result.valves_to_close],
            "pipes": result.pipes, "junctions": result.junctions, "units": {},
        }, [*(link_ref(wn, p) for p in result.pipes), *(node_ref(wn, n) for n in result.junctions)])  # fmt: skip
        cut = [node_ref(wn, n) for n in result.outage_nodes] + [link_ref(wn, k) for k in result.outage_links]
        outage = ResultRow("outage_segments", {
            "nodes": result.outage_nodes, "links": result.outage_links,
            "node_count": len(result.outage_nodes), "link_count": len(result.outage_links), "units": {},
        }, cut)  # fmt: skip
        junctions = set(wn.junction_name_list)
        cut_off = [n for n in [*result.junctions, *result.outage_nodes] if n in junctions]
        lost = ResultRow("demand_lost", {
            "demand_lost": flow(result.demand_lost), "junctions": len(cut_off), "units": {"demand_lost": flow.label},
        })  # fmt: skip
        summary = {
            "valves_to_close": len(result.valves_to_close), "pipes_isolated": len(result.pipes),
            "outage_nodes": len(result.outage_nodes), "demand_lost": flow(result.demand_lost),
            "units": {"demand_lost": flow.label},
        }  # fmt: skip
        return Outcome(summary, [segment, outage, lost], None, None, now)
