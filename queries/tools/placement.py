"""Declarations of the sensor placement family. Both tools need ``optimization.run`` (R-TOOL: the seed's
sensor-placement routes require it as a whole; not weakened to a view permission)."""

from __future__ import annotations

from queries.registry import OPTIMIZATION_RUN, ToolLimits, ToolSpec, input_object, page_from, page_properties
from queries.schemas.common import MAX_LIMIT
from queries.schemas.placement import SensorPlacementRunListResult, SensorPlacementRunResult
from queries.services import placement

RUN_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^[A-Za-z0-9_.:-]+$",
    "description": "A sensor placement run id, e.g. placement-coverage-10.",
}

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="list_sensor_placement_runs",
        title="List sensor placement runs",
        description="One page of the project's sensor placement optimisation runs, newest first: objective, "
        "objective value, parameters and how many sensors each selected.",
        input_schema=input_object(page_properties(), []),
        output_model=SensorPlacementRunListResult,
        permissions=(OPTIMIZATION_RUN,),
        source=placement.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: placement.list_sensor_placement_runs.plan(scope=scope, page=page_from(a)),
        item_parts=True,
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} sensor placement runs from offset {r.data.offset}: "
            + ", ".join(
                f"{i.run_id} ({i.sensor_count} sensors, {i.objective}={i.objective_value})" for i in r.data.items
            )
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="sensor-placement-runs",
        examples=({},),
    ),
    ToolSpec(
        name="get_sensor_placement_run",
        title="Sensor placement run",
        description="One sensor placement run: parameters, objective, scores, and its selected sensor "
        "locations in rank order — one page of them (limit/offset page the selected sensors).",
        input_schema=input_object({"run_id": RUN_ID, **page_properties()}, ["run_id"]),
        output_model=SensorPlacementRunResult,
        permissions=(OPTIMIZATION_RUN,),
        source=placement.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: placement.get_sensor_placement_run.plan(
            scope=scope, run_id=a["run_id"], page=page_from(a)
        ),
        item_parts=True,
        summarize=lambda r: (
            f"Sensor placement run {r.data.run.run_id} ({r.data.run.status}): {r.data.run.objective}="
            f"{r.data.run.objective_value}; sensors {r.data.offset + 1}-{r.data.offset + len(r.data.items)} of "
            f"{r.data.total}" + ("; more available." if r.data.has_more else ".")
        ),
        rest="sensor-placement-runs/<str:run_id>",
        examples=(
            {"run_id": "placement-coverage-10"},
            {"run_id": "placement-demand-20", "limit": 3},
            {"run_id": "placement-coverage-10", "limit": 5},
        ),
    ),
]
