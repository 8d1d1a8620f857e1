"""The flushing analysis (``run_flushing_analysis``): hydrants open at a flow each for the window; which
pipes reach the scouring velocity, the pressure left at the hydrants and in the network, and the sources
that supply the extra water (``queries.runs.flushing``: the scenario against the same window without the
hydrants — two scenarios).

``flow`` is one number for every hydrant or one per hydrant (in ``hydrant_node_ids`` order); canonically
the hydrants are sorted with their flows beside them, so one number and the same number repeated are the
same question. ``target_velocity`` defaults to 0.75 m/s for an SI project and 2.5 ft/s for a US one.
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
    id_list,
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
from queries.units import Q_FLOW, Q_PRESSURE, Q_VELOCITY

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape


class FlushedPipe(BaseModel):
    pipe_id: str
    max_velocity: float = measured(Q_VELOCITY)
    direction: str = Field(description="start_to_end or end_to_start, when the velocity peaked.")


class PipesFlushed(Payload):
    """The pipes that reach the target velocity, the fastest first."""

    pipes: list[FlushedPipe] = Field(description=f"The fastest first, at most {LIST_LIMIT}.")
    count: int = counted("How many pipes reach the target velocity.")
    target_velocity: float = measured(Q_VELOCITY)


class HydrantPressure(BaseModel):
    node_id: str
    lowest_pressure: float = measured(Q_PRESSURE)


class NodePressure(BaseModel):
    node_id: str
    pressure: float = measured(Q_PRESSURE)


class FlushingPressure(Payload):
    """The lowest pressure at each hydrant, and the network's minimum while flushing."""

    hydrants: list[HydrantPressure]
    network_minimum: NodePressure


class Source(BaseModel):
    node_id: str
    extra_outflow: float = measured(Q_FLOW, "What it supplies beyond the baseline while flushing.")


class FlushingSources(Payload):
    """Where the flushing water comes from."""

    sources: list[Source]


#: The default target velocity in each unit system's own units (a round number in each).
DEFAULT_TARGET = {"SI": 0.75, "US": 2.5}
STEP_S = 900


class FlushingKind(AnalysisKind):
    """Hydrants opened: the pipes flushed, the pressure left, the sources drawn on."""

    name = "flushing"
    tool = TOOL_NAMES["flushing"]
    rest_path = REST_PATHS["flushing"]
    title = LABELS["flushing"]
    #: Example arguments against the demo utility (its network: JUNCTION-n, LINK-n).
    example: ClassVar[dict[str, Any]] = {
        "hydrant_node_ids": ["JUNCTION-10"],
        "flow": 0.03,
        "start": "2026-11-01T09:00:00Z",
        "duration_minutes": 60,
    }
    scenarios = 2
    results: ClassVar[dict[str, type[Payload]]] = {
        "pipes_flushed": PipesFlushed, "pressure": FlushingPressure, "sources": FlushingSources,
    }  # fmt: skip

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        one_flow = quantity_field(Q_FLOW, unit_system, "A hydrant's flow.", exclusiveMinimum=0)
        properties = {
            "hydrant_node_ids": id_list("The junctions where hydrants open (1 to 10).", 1, 10),
            "flow": {"oneOf": [one_flow, {"type": "array", "items": one_flow, "minItems": 1, "maxItems": 10}],
                     "x-unit": one_flow["x-unit"],
                     "description": f"Each hydrant's flow: one number for all, or one per hydrant in "
                                    f"hydrant_node_ids order. In {one_flow['x-unit']}."},
            "start": START,
            "duration_minutes": DURATION,
            "target_velocity": quantity_field(Q_VELOCITY, unit_system, "A pipe is flushed when its velocity "
                                              "reaches this.", exclusiveMinimum=0,
                                              default=DEFAULT_TARGET[unit_system]),
        }  # fmt: skip
        return object_schema(self.title, properties, ["hydrant_node_ids", "flow", "start", "duration_minutes"])

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        ids = [str(i) for i in params["hydrant_node_ids"]]
        unknown_ids("hydrant_node_ids", ids, wn.junction_name_list, ("a junction", "junctions"))
        given = params["flow"]
        flows = [float(f) for f in given] if isinstance(given, list) else [float(given)] * len(ids)
        if len(flows) != len(ids):
            raise refuse("flow", f"flow gives {len(flows)} flows for {len(ids)} hydrant_node_ids: give one number "
                         "for all, or one per hydrant.")  # fmt: skip
        pairs = sorted(zip(ids, flows, strict=True))
        target = params.get("target_velocity", DEFAULT_TARGET[unit_system])
        return {
            "hydrant_node_ids": [node for node, _ in pairs],
            "flow": [to_si(f, Q_FLOW, unit_system) for _, f in pairs],
            "start": start_of(params),
            "duration_minutes": int(params["duration_minutes"]),
            "target_velocity": to_si(target, Q_VELOCITY, unit_system),
        }

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        return window_shape(wn, int(si["duration_minutes"]), STEP_S, self.scenarios)

    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        from queries.runs.flushing import FlushingError, flushing

        start = parse_utc(si["start"])
        duration_s = int(si["duration_minutes"]) * 60
        initial = begin(wn, start, project)
        hydrants = dict(zip(si["hydrant_node_ids"], si["flow"], strict=True))
        progress(0.1, f"Simulating {len(hydrants)} open hydrant(s) and the baseline.")
        try:
            result = flushing(wn, hydrants=hydrants, hours=duration_s / 3600, step_s=window_step(duration_s, STEP_S),
                              target_velocity=float(si["target_velocity"]), in_place=True)  # fmt: skip
        except FlushingError as exc:
            raise refuse("hydrant_node_ids" if "hydrant" in str(exc) else "parameters", f"{exc}.") from None
        progress(0.9, "Summarising the flushing.")
        flow, pressure = unit(Q_FLOW, unit_system), unit(Q_PRESSURE, unit_system)
        velocity = unit(Q_VELOCITY, unit_system)
        listed = result.pipes_flushed[:LIST_LIMIT]
        pipes = ResultRow("pipes_flushed", {
            "pipes": [{"pipe_id": p.pipe_id, "max_velocity": velocity(p.max_velocity), "direction": p.direction}
                      for p in listed],
            "count": len(result.pipes_flushed), "target_velocity": velocity(float(si["target_velocity"])),
            "units": {"max_velocity": velocity.label, "target_velocity": velocity.label},
        }, [link_ref(wn, p.pipe_id) for p in listed])  # fmt: skip
        lowest = ResultRow("pressure", {
            "hydrants": [{"node_id": n, "lowest_pressure": pressure(p)} for n, p in result.hydrant_pressure.items()],
            "network_minimum": {"node_id": result.min_pressure_node, "pressure": pressure(result.min_pressure)},
            "units": {"lowest_pressure": pressure.label, "pressure": pressure.label},
        }, [node_ref(wn, n) for n in dict.fromkeys([*result.hydrant_pressure, result.min_pressure_node])])  # fmt: skip
        sources = ResultRow("sources", {
            "sources": [{"node_id": n, "extra_outflow": flow(q)} for n, q in result.sources],
            "units": {"extra_outflow": flow.label},
        }, [node_ref(wn, n) for n, _ in result.sources])  # fmt: skip
        summary = {
            **initial,
            "pipes_flushed": len(result.pipes_flushed), "min_pressure": pressure(result.min_pressure),
            "min_pressure_node": result.min_pressure_node, "total_hydrant_flow": flow(sum(hydrants.values())),
            "units": {"min_pressure": pressure.label, "total_hydrant_flow": flow.label},
        }  # fmt: skip
        return Outcome(summary, [pipes, lowest, sources], result.scenario, None, start)
