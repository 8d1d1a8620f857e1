"""The valve isolation analysis (``run_valve_isolation_analysis``): the valves to close to isolate pipes,
what is inside the isolated segment, what else loses its supply, and the demand lost
(``queries.runs.isolation``, on the segments ``wntr.metrics.valve_segments`` cuts).

No EPANET run: the analysis is graph work on the model and the project's valve layer, which the caller
reads (``queries.runs.segments.valve_layer``, ``IsolationValve`` rows ``(source_fid, link_id, node_id)``)
and passes to ``compute``. Without ``hydraulic_check`` there is no EPANET run, no series and no window:
the cost model sees one scenario of one hourly step. With it, the network with the segment's links and the
valves' links closed runs pressure-driven over the check's window (``queries.runs.simulation.what_if``,
the what-if simulation's own computation), and ``affected_nodes`` lists the junctions whose pressure falls
below the threshold (``cut_off``: inside the segment or the outage).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from analyses.errors import InvalidArgument
from analyses.kinds import LABELS, REST_PATHS, TOOL_NAMES
from analyses.kinds.base import (
    DURATION,
    LIST_LIMIT,
    START,
    AnalysisKind,
    Outcome,
    Payload,
    Progress,
    ResultRow,
    begin,
    counted,
    id_list,
    iso_utc,
    link_ref,
    measured,
    node_ref,
    object_schema,
    parse_utc,
    quantity_field,
    refuse,
    start_of,
    to_si,
    unit,
    unknown_ids,
    window_shape,
    window_step,
)
from queries.units import Q_FLOW, Q_PRESSURE

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape


class ValveToClose(BaseModel):
    valve_id: str = Field(description="The valve's id in the valve layer (its feature id).")
    pipe_id: str = Field(description="The pipe it sits on.")
    node_id: str = Field(description="The node it sits next to.")


class IsolationSegment(Payload):
    """The valves to close and what they shut in: the pipes and junctions inside."""

    valves_to_close: list[ValveToClose]
    pipes: list[str]
    junctions: list[str]


class OutageSegments(Payload):
    """What loses its supply because the isolation cuts it from every source."""

    nodes: list[str]
    links: list[str]
    node_count: int = counted("Nodes cut off.")
    link_count: int = counted("Links cut off.")


class DemandLost(Payload):
    demand_lost: float = measured(Q_FLOW, "The base demand of the junctions inside and cut off.")
    junctions: int = counted("The junctions inside and cut off.")


class LowPressure(BaseModel):
    node_id: str
    lowest_pressure: float = measured(Q_PRESSURE)
    time: datetime = Field(description="When it was lowest.")
    cut_off: bool = Field(description="Inside the segment or cut off by it.")


class CheckedNodes(Payload):
    """The hydraulic check: junctions under the threshold with the valves closed (pressure-driven)."""

    nodes: list[LowPressure] = Field(description=f"The lowest first, at most {LIST_LIMIT}.")
    count: int = counted("How many junctions are under the threshold.")
    outside_segment: int = counted("Of them, outside the segment and its outage.")
    pressure_threshold: float = measured(Q_PRESSURE)
    demand_model: str
    links_closed: int = counted("The links closed for the check.")


#: What the cost model is told: graph work as cheap as one hydraulic step of one hour.
SHAPE_HOURS = 1.0
CHECK_STEP_S = 900
#: The hydraulic check's default threshold and PDD required pressure (the what-if simulation's defaults).
DEFAULT_THRESHOLD = {"SI": 20.0, "US": 30.0}
FAILED_VALVES = "Valves of the layer (by their id there) that do not close: the segment widens past them."


class ValveIsolationKind(AnalysisKind):
    """Pipes isolated by closing valves: the valves, the segment, the outage, the demand lost."""

    name = "valve_isolation"
    tool = TOOL_NAMES["valve_isolation"]
    rest_path = REST_PATHS["valve_isolation"]
    title = LABELS["valve_isolation"]
    #: Example arguments against the demo utility (its network: JUNCTION-n, LINK-n).
    example: ClassVar[dict[str, Any]] = {"pipe_ids": ["LINK-1523"]}
    scenarios = 1
    results: ClassVar[dict[str, type[Payload]]] = {
        "isolation_segment": IsolationSegment, "outage_segments": OutageSegments, "demand_lost": DemandLost,
        "affected_nodes": CheckedNodes,
    }  # fmt: skip

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        threshold = DEFAULT_THRESHOLD[unit_system]
        check = {"type": "object", "additionalProperties": False, "required": ["start", "duration_minutes"],
                 "description": "A pressure-driven run with the valves closed: which junctions fall below the "
                                "threshold.", "properties": {
            "start": START,
            "duration_minutes": DURATION,
            "pressure_threshold": quantity_field(Q_PRESSURE, unit_system, "Junctions below this are affected.",
                                                 minimum=0, default=threshold),
            "required_pressure": quantity_field(Q_PRESSURE, unit_system, "The pressure at which a junction "
                                                "draws its full demand.", exclusiveMinimum=0, default=threshold),
        }}  # fmt: skip
        properties = {
            "pipe_ids": id_list("The pipes to isolate (1 to 20).", 1, 20),
            "failed_valves": id_list(FAILED_VALVES, 0, 500),
            "hydraulic_check": check,
        }
        return object_schema(self.title, properties, ["pipe_ids"])

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        pipes = sorted(str(p) for p in params["pipe_ids"])
        unknown_ids("pipe_ids", pipes, wn.pipe_name_list, ("a pipe", "pipes"))
        # The valves are the project's layer, read at run time: an unknown fid is refused by the run.
        out: dict[str, Any] = {"pipe_ids": pipes,
                               "failed_valves": sorted(str(v) for v in params.get("failed_valves", []))}  # fmt: skip
        check = params.get("hydraulic_check")
        if check is not None:
            threshold = DEFAULT_THRESHOLD[unit_system]
            try:
                start = start_of(check)
            except InvalidArgument as exc:  # it names start: say it is the check's
                raise refuse("hydraulic_check.start", f"hydraulic_check.{exc.message}") from None
            out["hydraulic_check"] = {
                "start": start,
                "duration_minutes": int(check["duration_minutes"]),
                "pressure_threshold": to_si(check.get("pressure_threshold", threshold), Q_PRESSURE, unit_system),
                "required_pressure": to_si(check.get("required_pressure", threshold), Q_PRESSURE, unit_system),
            }
        return out

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        from queries.runs.cost import RunShape

        if self.window_minutes(si):
            return window_shape(wn, self.window_minutes(si), CHECK_STEP_S, 1)
        return RunShape(nodes=len(wn.node_name_list), links=len(wn.link_name_list), hours=SHAPE_HOURS,
                        step_s=int(SHAPE_HOURS * 3600), scenarios=self.scenarios)  # fmt: skip

    def window_minutes(self, si: Mapping[str, Any]) -> int:
        """The hydraulic check's window, if there is one (the isolation alone has none)."""
        return int((si.get("hydraulic_check") or {}).get("duration_minutes") or 0)

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
        progress(0.4 if si.get("hydraulic_check") else 0.9, "Summarising the isolation.")
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
        rows = [segment, outage, lost]
        check = si.get("hydraulic_check")
        if not check:
            return Outcome(summary, rows, None, None, now)
        progress(0.5, "Checking the network with the valves closed (pressure-driven).")
        affected, series, start, initial = self._check(wn, check, result, project, unit_system)
        progress(0.9, "Summarising the hydraulic check.")
        rows.append(affected)
        summary["affected_nodes"] = affected.payload["count"]
        summary.update(initial)
        return Outcome(summary, rows, series, None, start)

    @staticmethod
    def _check(wn: WaterNetworkModel, check: Mapping[str, Any], result: Any, project: Project,
               unit_system: str) -> tuple[ResultRow, Any, datetime, dict[str, Any]]:  # fmt: skip
        """The PDD run with the segment's and the valves' links closed, and its ``affected_nodes``."""
        from queries.runs.simulation import LINK_STATUS, Change, what_if

        start = parse_utc(check["start"])
        duration_s = int(check["duration_minutes"]) * 60
        initial = begin(wn, start, project)
        closed = sorted({*result.pipes, *(link for _, link, _ in result.valves_to_close)})
        sim = what_if(wn, in_place=True, changes=[Change(LINK_STATUS, link, status="closed") for link in closed],
                      hours=duration_s / 3600, threshold=float(check["pressure_threshold"]),
                      step_s=window_step(duration_s, CHECK_STEP_S), demand_model="PDD",
                      required_pressure=float(check["required_pressure"]), minimum_pressure=0.0)  # fmt: skip
        pressure = unit(Q_PRESSURE, unit_system)
        cut = {*result.junctions, *result.outage_nodes}
        listed = sim.below[:LIST_LIMIT]
        affected = ResultRow("affected_nodes", {
            "nodes": [{"node_id": p.node_id, "lowest_pressure": pressure(p.lowest),
                       "time": iso_utc(start + timedelta(seconds=p.at_s)), "cut_off": p.node_id in cut}
                      for p in listed],
            "count": len(sim.below), "outside_segment": sum(1 for p in sim.below if p.node_id not in cut),
            "pressure_threshold": pressure(float(check["pressure_threshold"])), "demand_model": "PDD",
            "links_closed": len(closed),
            "units": {"lowest_pressure": pressure.label, "pressure_threshold": pressure.label},
        }, [node_ref(wn, p.node_id) for p in listed])  # fmt: skip
        return affected, sim.results, start, initial
