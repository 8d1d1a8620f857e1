"""Declarations of the analysis family: runs, one run, a run's results, its series and its values.

Run listings and run details need ``webgis.view`` (the seed's rule for analysis runs); a run's node/link
series and values need ``simulation.view`` (R-TOOL). ``water_age`` in a ``field`` or ``result_type`` is
answered as a capability gap (``CAPABILITY_NOT_AVAILABLE``), not as empty data.
"""

from __future__ import annotations

from queries.registry import (
    ELEMENT_ID,
    ELEMENT_TYPE,
    SIMULATION_VIEW,
    WEBGIS_VIEW,
    ToolLimits,
    ToolSpec,
    input_object,
    page_from,
    page_properties,
)
from queries.schemas.analysis import (
    AnalysisResultListResult,
    AnalysisRunListResult,
    AnalysisRunResult,
    AnalysisSeriesResult,
    AnalysisValuesResult,
)
from queries.schemas.common import MAX_LIMIT
from queries.services import analysis
from queries.tools.scada import TIME, parse_time

RUN_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^[A-Za-z0-9_.:-]+$",
    "description": "An analysis run id, e.g. burst-20261101-0800 (list_analysis_runs lists them).",
}
FIELD = {
    "type": "string",
    "enum": [*analysis.NODE_FIELDS, *analysis.LINK_FIELDS, "water_age"],
    "description": "Nodes (junction, tank, reservoir): pressure, head, demand, quality, leak_demand. Links "
    "(pipe, pump, valve): flow, velocity, headloss, status, setting. water_age is answered as not "
    "available (the legacy water-age analysis is not offered).",
}
WINDOW_S = int(analysis.MAX_WINDOW.total_seconds())


def _runs_summary(r: AnalysisRunListResult) -> str:
    d = r.data
    runs = ", ".join(f"{i.run_id} ({i.kind}, {i.status})" for i in d.items)
    return f"{len(d.items)} of {d.total} analysis runs from offset {d.offset}: {runs}" + (
        "; more available." if d.has_more else "."
    )


def _run_summary(r: AnalysisRunResult) -> str:
    d = r.data
    text = f"Analysis run {d.run_id}: {d.kind}, {d.status}"
    if d.error_code:
        text += f" ({d.error_code}: {d.error_message})"
    types = ", ".join(f"{t.result_type}×{t.count}" for t in d.result_types) or "none"
    return f"{text}; results: {types}; series: {'yes' if d.has_series else 'none'}."


def _series_summary(r: AnalysisSeriesResult) -> str:
    d = r.data
    values = [p.value for p in d.points if p.value is not None]
    text = f"{len(d.points)} {d.field} points of {d.element_type} {d.element_id} from analysis run {d.run_id}"
    if values:
        text += f", min {min(values):.4g}, max {max(values):.4g}"
    return text + ("." if d.points else "; no values in the window (see data_gaps).")


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="list_analysis_runs",
        title="List analysis runs",
        description="One page of the project's analysis runs (burst, valve isolation, simulation, …), newest "
        "first, with status and error code. At most 100 per page.",
        input_schema=input_object(page_properties(analysis.MAX_RUN_PAGE), []),
        output_model=AnalysisRunListResult,
        permissions=(WEBGIS_VIEW,),
        source=analysis.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_page=analysis.MAX_RUN_PAGE),
        invoke=lambda scope, a: analysis.list_analysis_runs.plan(scope=scope, page=page_from(a, analysis.MAX_RUN_PAGE)),
        summarize=_runs_summary,
        rest="analysis/runs",
        examples=(
            {},
            {"limit": 2, "offset": 1},
        ),
    ),
    ToolSpec(
        name="get_analysis_run",
        title="Analysis run",
        description="One analysis run: parameters, summary, status (a failed run names its error code and "
        "message), the result types it holds and whether it has node/link series.",
        input_schema=input_object({"run_id": RUN_ID}, ["run_id"]),
        output_model=AnalysisRunResult,
        permissions=(WEBGIS_VIEW,),
        source=analysis.SOURCE,
        semantics="analysis_run",
        invoke=lambda scope, a: analysis.get_analysis_run.plan(scope=scope, run_id=a["run_id"]),
        item_parts=True,
        summarize=_run_summary,
        rest="analysis/runs/<str:run_id>",
        examples=(
            {"run_id": "burst-20261101-0800"},
            {"run_id": "no-such-run"},
        ),
    ),
    ToolSpec(
        name="list_analysis_results",
        title="Analysis run results",
        description="One page of an analysis run's typed results in sequence order (e.g. leak, "
        "affected_nodes, isolation_segment, demand_lost), optionally only one result_type.",
        input_schema=input_object(
            {
                "run_id": RUN_ID,
                "result_type": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "pattern": "^[A-Za-z0-9_.-]+$",
                    "description": "Only results of this type (get_analysis_run lists a run's types).",
                },
                **page_properties(),
            },
            ["run_id"],
        ),
        output_model=AnalysisResultListResult,
        permissions=(WEBGIS_VIEW,),
        source=analysis.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: analysis.list_analysis_results.plan(
            scope=scope, run_id=a["run_id"], result_type=a.get("result_type"), page=page_from(a)
        ),
        item_parts=True,
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} results of {r.data.run_id} from offset {r.data.offset}: "
            + ", ".join(f"#{i.sequence} {i.result_type}" for i in r.data.items)
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="analysis/runs/<str:run_id>/results",
        examples=(
            {"run_id": "isolation-20261101-0830"},
            {"run_id": "isolation-20261101-0830", "result_type": "demand_lost"},
        ),
    ),
    ToolSpec(
        name="query_analysis_series",
        title="Analysis run series",
        description="One field of one element over a window (at most 24 local hours of the project's "
        "timezone) as an analysis run computed it "
        "(scenario values of the run: neither measured nor the model baseline). A failed run has no series "
        "and is answered with ANALYSIS_RUN_HAS_NO_SERIES.",
        input_schema=input_object(
            {
                "run_id": RUN_ID,
                "element_type": ELEMENT_TYPE,
                "element_id": ELEMENT_ID,
                "field": FIELD,
                "start": {**TIME, "description": "From this time (inclusive), with a timezone."},
                "end": {
                    **TIME,
                    "description": "Until this time (exclusive), with a timezone; at most 24 local hours after start.",
                },
            },
            ["run_id", "element_type", "element_id", "field", "start", "end"],
        ),
        output_model=AnalysisSeriesResult,
        permissions=(SIMULATION_VIEW,),
        source=analysis.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_targets=1, max_window_s=WINDOW_S),
        invoke=lambda scope, a: analysis.query_analysis_series.plan(
            scope=scope,
            run_id=a["run_id"],
            element_type=a["element_type"],
            element_id=a["element_id"],
            field=a["field"],
            start=parse_time(a["start"], "start"),
            end=parse_time(a["end"], "end"),
        ),
        series_start="start",
        summarize=_series_summary,
        rest="timeseries/analysis/runs/<str:run_id>/series",
        examples=(
            {
                "run_id": "burst-20261101-0800",
                "element_type": "junction",
                "element_id": "JUNCTION-0",
                "field": "pressure",
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
            },
            {
                "run_id": "burst-20261101-0800",
                "element_type": "pipe",
                "element_id": "LINK-1523",
                "field": "flow",
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T10:00:00Z",
            },
        ),
    ),
    ToolSpec(
        name="query_analysis_values",
        title="Analysis run values at a time",
        description="One field of every element of a type at one instant of an analysis run (the run's "
        "reported instant at or before time), one page ordered by element id.",
        input_schema=input_object(
            {
                "run_id": RUN_ID,
                "element_type": ELEMENT_TYPE,
                "field": FIELD,
                "time": {**TIME, "description": "The instant, with a timezone."},
                **page_properties(),
            },
            ["run_id", "element_type", "field", "time"],
        ),
        output_model=AnalysisValuesResult,
        permissions=(SIMULATION_VIEW,),
        source=analysis.SOURCE,
        semantics="analysis_run",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: analysis.query_analysis_values.plan(
            scope=scope,
            run_id=a["run_id"],
            element_type=a["element_type"],
            field=a["field"],
            time=parse_time(a["time"], "time"),
            page=page_from(a),
        ),
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} {r.data.element_type} {r.data.field} values of "
            f"{r.data.run_id} at {r.data.time.isoformat() if r.data.time else 'no instant (see data_gaps)'}"
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="timeseries/analysis/runs/<str:run_id>/values",
        examples=(
            {
                "run_id": "burst-20261101-0800",
                "element_type": "junction",
                "field": "pressure",
                "time": "2026-11-01T08:00:00Z",
            },
            {
                "run_id": "burst-20261101-0800",
                "element_type": "junction",
                "field": "pressure",
                "time": "2026-11-01T08:30:00Z",
                "limit": 10,
            },
        ),
    ),
]
