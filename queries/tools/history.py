"""Declaration of query_element_history (R-PAGE-3).

Tool permission ``scada.view`` (every mode reads SCADA); the comparison modes also read simulation data
and need ``simulation.view`` too, declared here (``argument_permissions``) and checked by
``contexts.access`` so every edge refuses alike.

``elements`` is a list of 1–20 ``{"element_type", "element_id"}`` objects (the network's own ids, e.g.
``{"element_type": "junction", "element_id": "JUNCTION-1308"}``), no repeats. ``limit``/``offset`` page the
points of all series together, in the order stated in the result (``data.order``).
"""

from __future__ import annotations

from queries.registry import ELEMENT_ID, ELEMENT_TYPE, SCADA_VIEW, SIMULATION_VIEW, ToolLimits, ToolSpec, input_object
from queries.schemas.common import MAX_OFFSET, PageRequest
from queries.schemas.history import ElementHistoryResult, ElementKey
from queries.services import history
from queries.tools.analysis import RUN_ID
from queries.tools.scada import TIME, parse_time

WINDOW_S = int(history.MAX_WINDOW.total_seconds())


def _summary(r: ElementHistoryResult) -> str:
    d = r.data
    counts: dict[str, int] = {}
    for p in d.items:
        counts[p.origin] = counts.get(p.origin, 0) + 1
    parts = ", ".join(f"{n} {o}" for o, n in counts.items()) or "no points"
    return (
        f"{d.mode} history of {len(d.elements)} element(s), {len(d.devices)} SCADA device(s): {parts} "
        f"from offset {d.offset}" + ("; more available." if d.has_more else ".")
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="query_element_history",
        title="Element history",
        description="What the SCADA devices on some elements measured (measured and cleaned, quality flags "
        "kept) over a window of at most 24 local hours of the project's timezone (see get_project); "
        "realtime_comparison adds the model baseline of those "
        "elements, analysis_comparison (needs run_id) an analysis run's series. One globally ordered list "
        "of points, paged with limit/offset (has_more; total is not counted).",
        input_schema=input_object(
            {
                "elements": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": history.MAX_ELEMENTS,
                    "uniqueItems": True,
                    "items": {
                        "type": "object",
                        "properties": {"element_type": ELEMENT_TYPE, "element_id": ELEMENT_ID},
                        "required": ["element_type", "element_id"],
                        "additionalProperties": False,
                    },
                    "description": '1-20 network elements, e.g. [{"element_type": "junction", '
                    '"element_id": "JUNCTION-1308"}].',
                },
                "start": {**TIME, "description": "From this time (inclusive), with a timezone."},
                "end": {
                    **TIME,
                    "description": "Until this time (exclusive), with a timezone; at most 24 local hours after start.",
                },
                "mode": {
                    "type": "string",
                    "enum": list(history.MODES),
                    "description": "observed: SCADA only; realtime_comparison: + model baseline; "
                    "analysis_comparison: + the series of analysis run run_id.",
                },
                "run_id": {**RUN_ID, "description": "The analysis run (only with mode analysis_comparison)."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": history.MAX_POINTS,
                    "default": history.DEFAULT_POINTS,
                    "description": "Points per page.",
                },
                "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
            },
            ["elements", "start", "end", "mode"],
        ),
        output_model=ElementHistoryResult,
        permissions=(SCADA_VIEW,),
        # The comparison modes also read simulation data (R-TOOL).
        argument_permissions=lambda a: () if a.get("mode") == "observed" else (SIMULATION_VIEW,),
        source=history.SOURCE,
        semantics="measured",
        limits=ToolLimits(max_page=history.MAX_POINTS, max_targets=history.MAX_ELEMENTS, max_window_s=WINDOW_S),
        invoke=lambda scope, a: history.query_element_history.plan(
            scope=scope,
            elements=[ElementKey.model_validate(e) for e in a["elements"]],
            start=parse_time(a["start"], "start"),
            end=parse_time(a["end"], "end"),
            mode=a["mode"],
            run_id=a.get("run_id"),
            page=PageRequest(
                limit=a.get("limit", history.DEFAULT_POINTS), offset=a.get("offset", 0), max_limit=history.MAX_POINTS
            ),
        ),
        summarize=_summary,
        rest="timeseries/element-history",
        examples=(
            {
                "elements": [{"element_type": "junction", "element_id": "JUNCTION-0"}],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
                "mode": "observed",
            },
            {
                "elements": [{"element_type": "junction", "element_id": "JUNCTION-0"}],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
                "mode": "analysis_comparison",
                "run_id": "burst-20261101-0800",
            },
            {
                "elements": [{"element_type": "pipe", "element_id": "LINK-225"}],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T10:00:00Z",
                "mode": "realtime_comparison",
                "limit": 30,
            },
        ),
    ),
]
