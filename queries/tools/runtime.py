"""Declaration of get_workbench_runtime (read only)."""

from __future__ import annotations

from queries.registry import WEBGIS_VIEW, ToolSpec, input_object
from queries.schemas.runtime import WorkbenchRuntimeResult
from queries.services import runtime

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_workbench_runtime",
        title="Workbench runtime",
        description="The project's workbench state, read only: simulation clock, active scenario, mode, "
        "and for each data source (scada, model_baseline, gis, work_orders, …) its last sync and "
        "freshness. Optionally only one data_source.",
        input_schema=input_object(
            {
                "data_source": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "pattern": "^[A-Za-z0-9_.-]+$",
                    "description": "Only this data source's status (e.g. scada).",
                }
            },
            [],
        ),
        output_model=WorkbenchRuntimeResult,
        permissions=(WEBGIS_VIEW,),
        source=runtime.SOURCE,
        semantics="diagnostic",
        invoke=lambda scope, a: runtime.get_workbench_runtime.plan(scope=scope, data_source=a.get("data_source")),
        item_parts=True,  # data_sources is a free-form map of the workbench: not a page, no bound
        summarize=lambda r: (
            f"Workbench {r.data.mode}, clock {r.data.simulation_clock.isoformat()}, scenario "
            f"{r.data.active_scenario or 'none'}; "
            + ", ".join(f"{s.name} {s.status or 'unknown'}" for s in r.data.data_sources)
            + "."
        ),
        rest="workbench/runtime",
        examples=(
            {},
            {"data_source": "scada"},
        ),
    ),
]
