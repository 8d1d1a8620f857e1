"""Declarations of the project's state, read only: get_workbench_runtime and get_project (its clock)."""

from __future__ import annotations

from queries.registry import WEBGIS_VIEW, ToolSpec, input_object
from queries.schemas.project import ProjectResult
from queries.schemas.runtime import WorkbenchRuntimeResult
from queries.services import project, runtime

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
    # Its own tool rather than a kind of get_network_options: the clock and units are facts of the
    # project, known before (and without) any network import, while get_network_options answers EPANET's
    # model options (its "time" kind is the simulation's duration and steps) and is NOT_FOUND until a
    # model is imported. An agent calls this first, then asks series windows in local time.
    ToolSpec(
        name="get_project",
        title="Project clock and units",
        description="The context's project: slug, name, IANA timezone, the UTC offset now (e.g. -05:00), "
        "the next DST change (UTC instant and the offset after it) and the unit system results come in "
        "(SI or US). Series windows (readings, baseline, history, analysis series, rankings) may be at "
        "most 24 local hours of this timezone, so a whole local day — 23 h or 25 h on a DST change — is "
        "one call; their answers give the timezone beside the UTC window.",
        input_schema=input_object({}, []),
        output_model=ProjectResult,
        permissions=(WEBGIS_VIEW,),
        source=project.SOURCE,
        semantics="diagnostic",
        invoke=lambda scope, a: project.get_project.plan(scope=scope),
        summarize=lambda r: (
            f"Project {r.data.slug}: {r.data.timezone} (UTC{r.data.utc_offset_now} now), {r.data.unit_system} units."
        ),
        rest="clock",
        examples=({},),
    ),
]
