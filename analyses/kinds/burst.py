"""The burst analysis (``run_burst_analysis``): a pipe bursts at a position along it for the window; the
water it loses and where pressure drops (``queries.runs.burst``: the burst point is an emitter, compared
with the same split network without it — two scenarios).

The size is ``emitter_coefficient`` (flow per pressure^0.5 in the project's units) or ``leak_flow`` (the
flow at the burst point's baseline pressure at the window's start), exactly one. Affected junctions are
those whose pressure drops by more than ``pressure_drop_threshold`` (1 m by default, shown in psi for a US
project); the customers affected are weighed by their demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

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
    from_si,
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
    window_shape,
    window_step,
)
from queries.units import Q_EMITTER, Q_FLOW, Q_PRESSURE, Q_VOLUME, declared

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape


class Leak(Payload):
    """The burst itself: where, how big, and the water it lost over the window."""

    node_id: str = Field(description="The burst point: the node that splits the pipe.")
    pipe_id: str
    position: float = Field(ge=0, le=1, json_schema_extra=declared("fraction"),
                            description="Along the pipe, from its start node (0) to its end node (1).")  # fmt: skip
    coefficient: float = measured(Q_EMITTER, "The emitter coefficient (q = C·p^0.5).")
    coefficient_from_leak_flow: bool = Field(description="Whether the coefficient was derived from leak_flow.")
    peak_flow: float = measured(Q_FLOW)
    mean_flow: float = measured(Q_FLOW)
    volume: float = measured(Q_VOLUME, "The water lost over the window.")


class PressureDrop(BaseModel):
    node_id: str
    pressure_drop: float = measured(Q_PRESSURE)


class AffectedNodes(Payload):
    """The junctions whose pressure drops by more than the threshold, the most affected first."""

    nodes: list[PressureDrop] = Field(description=f"The most affected first, at most {LIST_LIMIT}.")
    count: int = counted("How many junctions are affected (all of them, listed or not).")
    threshold: float = measured(Q_PRESSURE)


class CustomersAffected(Payload):
    """The customers the pressure drop reaches, weighed by their demand."""

    demand_affected: float = measured(Q_FLOW, "The affected junctions' demand, averaged over the window.")
    junctions: int = counted("The affected junctions.")


DEFAULT_DROP_M = 1.0  # m of pressure head: the default pressure_drop_threshold, in SI
STEP_S = 900


class BurstKind(AnalysisKind):
    """A pipe burst: the leak, the junctions whose pressure drops, the customers it reaches."""

    name = "burst"
    tool = TOOL_NAMES["burst"]
    rest_path = REST_PATHS["burst"]
    title = LABELS["burst"]
    #: Example arguments against the demo utility (its network: JUNCTION-n, LINK-n).
    example: ClassVar[dict[str, Any]] = {
        "pipe_id": "LINK-1523",
        "start": "2026-11-01T08:00:00Z",
        "duration_minutes": 120,
        "leak_flow": 0.01,
    }
    scenarios = 2
    results: ClassVar[dict[str, type[Payload]]] = {
        "leak": Leak, "affected_nodes": AffectedNodes, "customers_affected": CustomersAffected,
    }  # fmt: skip

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        default_drop = from_si(DEFAULT_DROP_M, Q_PRESSURE, unit_system)
        properties = {
            "pipe_id": {"type": "string", "minLength": 1, "maxLength": 100, "description": "The pipe that bursts."},
            "position": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.5,
                         "description": "Where along the pipe, from its start node (0) to its end node (1)."},
            "start": START,
            "duration_minutes": DURATION,
            "emitter_coefficient": quantity_field(Q_EMITTER, unit_system, "The burst's size as an emitter "
                                                  "coefficient (q = C·p^0.5); give this or leak_flow.",
                                                  exclusiveMinimum=0),
            "leak_flow": quantity_field(Q_FLOW, unit_system, "The burst's size as its flow at the burst point's "
                                        "pressure at the start; give this or emitter_coefficient.",
                                        exclusiveMinimum=0),
            "pressure_drop_threshold": quantity_field(Q_PRESSURE, unit_system, "A junction is affected when its "
                                                      "pressure drops by more than this.", minimum=0,
                                                      default=default_drop),
        }  # fmt: skip
        return object_schema(self.title, properties, ["pipe_id", "start", "duration_minutes"],
                             oneOf=[{"required": ["emitter_coefficient"]}, {"required": ["leak_flow"]}])  # fmt: skip

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        pipe_id = str(params["pipe_id"])
        if pipe_id not in set(wn.pipe_name_list):
            raise refuse("pipe_id", f"pipe_id {pipe_id!r} is not a pipe of the model.", unknown=[pipe_id])
        out: dict[str, Any] = {
            "pipe_id": pipe_id,
            "position": float(params.get("position", 0.5)),
            "start": start_of(params),
            "duration_minutes": int(params["duration_minutes"]),
        }
        if "emitter_coefficient" in params:
            out["emitter_coefficient"] = to_si(params["emitter_coefficient"], Q_EMITTER, unit_system)
        else:
            out["leak_flow"] = to_si(params["leak_flow"], Q_FLOW, unit_system)
        drop = params.get("pressure_drop_threshold")
        out["pressure_drop_threshold"] = DEFAULT_DROP_M if drop is None else to_si(drop, Q_PRESSURE, unit_system)
        return out

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        return window_shape(wn, int(si["duration_minutes"]), STEP_S, self.scenarios, extra=1)  # the split

    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        from queries.runs.burst import BurstError, burst

        start = parse_utc(si["start"])
        duration_s = int(si["duration_minutes"]) * 60
        initial = begin(wn, start, project)
        progress(0.1, f"Simulating the burst of pipe {si['pipe_id']} and its baseline.")
        try:
            result = burst(wn, pipe_id=si["pipe_id"], hours=duration_s / 3600, position=float(si["position"]),
                           step_s=window_step(duration_s, STEP_S), coefficient=si.get("emitter_coefficient"),
                           in_place=True,
                           leak_flow=si.get("leak_flow"),
                           pressure_drop_threshold=float(si["pressure_drop_threshold"]))  # fmt: skip
        except BurstError as exc:
            first = str(exc).split(" ", 1)[0]
            named = {"coefficient": "emitter_coefficient", "duration": "duration_minutes"}.get(first, first)
            raise refuse(named if named in si else "parameters", f"{exc}.") from None
        progress(0.9, "Summarising the burst.")
        flow, pressure, volume = unit(Q_FLOW, unit_system), unit(Q_PRESSURE, unit_system), unit(Q_VOLUME, unit_system)
        emitter = unit(Q_EMITTER, unit_system)
        leak = ResultRow("leak", {
            "node_id": result.leak_node, "pipe_id": si["pipe_id"], "position": si["position"],
            "coefficient": emitter(result.coefficient), "coefficient_from_leak_flow": result.coefficient_from_leak_flow,
            "peak_flow": flow(result.peak_flow), "mean_flow": flow(result.mean_flow), "volume": volume(result.volume),
            "units": {"coefficient": emitter.label, "peak_flow": flow.label, "mean_flow": flow.label,
                      "volume": volume.label},
        }, [link_ref(wn, si["pipe_id"])])  # fmt: skip
        listed = result.affected[:LIST_LIMIT]
        affected = ResultRow("affected_nodes", {
            "nodes": [{"node_id": n, "pressure_drop": pressure(d)} for n, d in listed],
            "count": len(result.affected), "threshold": pressure(float(si["pressure_drop_threshold"])),
            "units": {"pressure_drop": pressure.label, "threshold": pressure.label},
        }, [node_ref(wn, n) for n, _ in listed])  # fmt: skip
        customers = ResultRow("customers_affected", {
            "demand_affected": flow(result.demand_affected), "junctions": len(result.affected),
            "units": {"demand_affected": flow.label},
        })  # fmt: skip
        summary = {
            **initial,
            "volume": volume(result.volume), "peak_flow": flow(result.peak_flow),
            "affected_nodes": len(result.affected), "demand_affected": flow(result.demand_affected),
            "units": {"volume": volume.label, "peak_flow": flow.label, "demand_affected": flow.label},
        }  # fmt: skip
        scenario = result.scenario
        series = None if scenario is None else (result.leak_node, scenario.node["demand"][result.leak_node])
        return Outcome(summary, [leak, affected, customers], scenario, series, start)
