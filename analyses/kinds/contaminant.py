"""The contaminant simulation (``run_contaminant_simulation``): a contaminant enters at nodes for
``injection_minutes`` from the window's start; when it reaches each node above ``threshold``, how far it
spreads, and how much of it the customers draw (``queries.runs.contaminant``: EPANET CHEM quality, one
scenario).

Concentrations are mg/L and mass rates mg/min in both unit systems (how utilities state them), which is
what the computation takes (it converts to WNTR's kg/m³ and kg/s itself): they pass through unchanged.
The exposure's volume is in the project's volume unit. Times are UTC instants: the window's start plus
the report time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from analyses.kinds import LABELS, REST_PATHS, TOOL_NAMES
from analyses.kinds.base import (
    DURATION,
    LIST_LIMIT,
    MAX_DURATION_MINUTES,
    START,
    AnalysisKind,
    Outcome,
    Payload,
    Progress,
    ResultRow,
    begin,
    counted,
    fixed_unit_field,
    id_list,
    iso_utc,
    measured,
    node_ref,
    object_schema,
    parse_utc,
    refuse,
    start_of,
    unit,
    unknown_ids,
    window_step,
)
from queries.units import Q_VOLUME, declared

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.runs.cost import RunShape

CONCENTRATION = "mg/L"
MASS_RATE = "mg/min"
DEFAULT_THRESHOLD = 0.01  # mg/L
STEP_S = 900
QUALITY_STEP_S = 300


def _mg_per_l(description: str) -> Any:
    return Field(description=f"{description} (mg/L, whatever the unit system).", json_schema_extra=declared("own_unit"))


class Arrival(BaseModel):
    node_id: str
    time: datetime = Field(description="The first instant it passes the threshold.")
    minutes_after_start: float = Field(json_schema_extra=declared("count"), description="Minutes after the start.")


class Arrivals(Payload):
    """The nodes the contaminant reaches above the threshold, the earliest first."""

    nodes: list[Arrival] = Field(description=f"The earliest first, at most {LIST_LIMIT}.")
    count: int = counted("How many nodes it reaches.")
    threshold: float = _mg_per_l("The threshold")


class ExtentStep(BaseModel):
    time: datetime
    nodes_above: int = counted("Nodes above the threshold then.")
    pipes_above: int = counted("Pipes above the threshold then.")


class Extent(Payload):
    """How far it has spread at each quality report step."""

    steps: list[ExtentStep]
    peak_nodes_above: int = counted("The most nodes above the threshold at once.")
    threshold: float = _mg_per_l("The threshold")


class Exposure(Payload):
    """What customers consumed above the threshold, demand-weighted."""

    mass: float = Field(json_schema_extra=declared("own_unit"), description="mg, whatever the unit system.")
    volume: float = measured(Q_VOLUME)


class ContaminantKind(AnalysisKind):
    """An injection followed through the network: arrival times, extent over time, exposure."""

    name = "contaminant"
    tool = TOOL_NAMES["contaminant"]
    rest_path = REST_PATHS["contaminant"]
    title = LABELS["contaminant"]
    #: Example arguments against the demo utility (its network: JUNCTION-n, LINK-n).
    example: ClassVar[dict[str, Any]] = {
        "injection_node_ids": ["JUNCTION-10"],
        "start": "2026-11-01T06:00:00Z",
        "injection_minutes": 30,
        "concentration": 10.0,
        "duration_minutes": 360,
    }
    quality = True
    scenarios = 1
    results: ClassVar[dict[str, type[Payload]]] = {"arrival": Arrivals, "extent": Extent, "exposure": Exposure}

    def input_schema(self, unit_system: str) -> dict[str, Any]:
        properties = {
            "injection_node_ids": id_list("The nodes where the contaminant enters (1 to 10).", 1, 10),
            "start": START,
            "injection_minutes": {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MINUTES,
                                  "description": "How long the injection lasts from the start, in minutes (at "
                                                 "most duration_minutes)."},
            "duration_minutes": DURATION,
            "concentration": fixed_unit_field(CONCENTRATION, "The concentration leaving each injection node; "
                                              "give this or mass_rate.", exclusiveMinimum=0),
            "mass_rate": fixed_unit_field(MASS_RATE, "The mass added at each injection node per minute; give "
                                          "this or concentration.", exclusiveMinimum=0),
            "threshold": fixed_unit_field(CONCENTRATION, "A node is reached when its concentration passes this.",
                                          minimum=0, default=DEFAULT_THRESHOLD),
        }  # fmt: skip
        return object_schema(self.title, properties, ["injection_node_ids", "start", "injection_minutes",
                                                      "duration_minutes"],
                             oneOf=[{"required": ["concentration"]}, {"required": ["mass_rate"]}])  # fmt: skip

    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        ids = sorted(str(i) for i in params["injection_node_ids"])
        unknown_ids("injection_node_ids", ids, wn.node_name_list, ("a node", "nodes"))
        minutes, duration = int(params["injection_minutes"]), int(params["duration_minutes"])
        if minutes > duration:
            raise refuse("injection_minutes", f"injection_minutes ({minutes}) must be at most duration_minutes "
                         f"({duration}).")  # fmt: skip
        out: dict[str, Any] = {"injection_node_ids": ids, "start": start_of(params), "injection_minutes": minutes,
                               "duration_minutes": duration}  # fmt: skip
        if "concentration" in params:
            out["concentration"] = float(params["concentration"])
        else:
            out["mass_rate"] = float(params["mass_rate"])
        out["threshold"] = float(params.get("threshold", DEFAULT_THRESHOLD))
        return out

    def _steps(self, si: Mapping[str, Any]) -> tuple[int, int]:
        """The hydraulic and quality steps (the computation solves hydraulics at the smaller of the two)."""
        duration_s = int(si["duration_minutes"]) * 60
        quality_step = window_step(duration_s, QUALITY_STEP_S)
        return min(window_step(duration_s, STEP_S), quality_step), quality_step

    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        from queries.runs.cost import RunShape

        step, quality_step = self._steps(si)
        return RunShape(nodes=len(wn.node_name_list), links=len(wn.link_name_list),
                        hours=int(si["duration_minutes"]) / 60, step_s=step, quality=True,
                        quality_step_s=quality_step, scenarios=self.scenarios)  # fmt: skip

    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        from queries.runs.contaminant import ContaminantError, contaminant

        start = parse_utc(si["start"])
        initial = begin(wn, start, project)
        step, quality_step = self._steps(si)
        progress(0.1, f"Simulating the injection at {len(si['injection_node_ids'])} node(s).")
        try:
            result = contaminant(wn, in_place=True, injection_node_ids=list(si["injection_node_ids"]),
                                 injection_minutes=int(si["injection_minutes"]), hours=int(si["duration_minutes"]) / 60,
                                 threshold=float(si["threshold"]), concentration=si.get("concentration"),
                                 mass_rate=si.get("mass_rate"), step_s=step, quality_step_s=quality_step)  # fmt: skip
        except ContaminantError as exc:
            first = str(exc).split(" ", 1)[0]
            raise refuse(first if first in si else "parameters", f"{exc}.") from None
        progress(0.9, "Summarising the spread.")

        def at(seconds: int) -> str:
            return iso_utc(start + timedelta(seconds=seconds))

        reached = sorted(result.arrival.items(), key=lambda item: (item[1], item[0]))
        listed = reached[:LIST_LIMIT]
        arrival = ResultRow("arrival", {
            "nodes": [{"node_id": n, "time": at(s), "minutes_after_start": s / 60} for n, s in listed],
            "count": len(reached), "threshold": float(si["threshold"]), "units": {"threshold": CONCENTRATION},
        }, [node_ref(wn, n) for n, _ in listed])  # fmt: skip
        extent = ResultRow("extent", {
            "steps": [{"time": at(s), "nodes_above": n, "pipes_above": p} for s, n, p in result.extent],
            "peak_nodes_above": max((n for _, n, _ in result.extent), default=0),
            "threshold": float(si["threshold"]), "units": {"threshold": CONCENTRATION},
        })  # fmt: skip
        volume = unit(Q_VOLUME, unit_system)
        exposure = ResultRow("exposure", {
            "mass": float(f"{result.mass_consumed:.6g}"), "volume": volume(result.volume_consumed),
            "units": {"mass": "mg", "volume": volume.label},
        })  # fmt: skip
        summary = {
            **initial,
            "nodes_reached": len(reached), "first_arrival": at(reached[0][1]) if reached else None,
            "mass_consumed": float(f"{result.mass_consumed:.6g}"), "volume_consumed": volume(result.volume_consumed),
            "units": {"mass_consumed": "mg", "volume_consumed": volume.label},
        }  # fmt: skip
        return Outcome(summary, [arrival, extent, exposure], result.results, None, start)
