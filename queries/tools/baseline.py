"""Declarations of the model-baseline family: a series of named elements, one element at one time,
one field of every element at one time. Always labelled ``model_baseline``, never measured."""

from __future__ import annotations

from typing import Any

from queries.models import LINK_TYPES, NODE_TYPES
from queries.registry import (
    ELEMENT_ID,
    ELEMENT_TYPE,
    SIMULATION_VIEW,
    ToolLimits,
    ToolSpec,
    input_object,
    page_from,
    page_properties,
)
from queries.schemas.baseline import BaselineAtTimeResult, BaselineFieldResult, BaselineSeriesResult
from queries.schemas.common import MAX_LIMIT
from queries.services import baseline
from queries.services.scada import MAX_TARGETS
from queries.tools.scada import TIME, WINDOW_S, parse_time, point_page_from, point_page_properties

FIELD = {
    "type": "string",
    "enum": [*baseline.NODE_FIELDS, *baseline.LINK_FIELDS],
    "description": "Node types (junction, tank, reservoir): pressure, head, demand, quality. Link types "
    "(pipe, pump, valve): flow, velocity, headloss, status, setting.",
}


def _per_type(prop: str, node: dict[str, Any], link: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON Schema 2020-12 ``if``/``then``: ``prop`` must match ``node`` for node types and ``link``
    for link types (the field enum depends on the element type)."""
    return [
        {
            "if": {"properties": {"element_type": {"enum": list(types)}}, "required": ["element_type"]},
            "then": {"properties": {prop: schema}},
        }
        for types, schema in ((NODE_TYPES, node), (LINK_TYPES, link))
    ]


def _with(schema: dict[str, Any], rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {**schema, "allOf": rules}


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="query_model_baseline_series",
        title="Model baseline series",
        description="MODEL BASELINE (hydraulic simulation output, not measurements) of 1–20 named elements "
        "of one type in [start, end) (at most 24 local hours of the project's timezone, see get_project): "
        "the requested fields (default all of the type) at "
        "every baseline instant, ordered by element id then time. At most 10000 points per call.",
        input_schema=_with(
            input_object(
                {
                    "element_type": ELEMENT_TYPE,
                    "element_ids": {
                        "type": "array",
                        "items": ELEMENT_ID,
                        "minItems": 1,
                        "maxItems": MAX_TARGETS,
                        "uniqueItems": True,
                        "description": f"1–{MAX_TARGETS} element ids (required: never the whole network).",
                    },
                    "start": {**TIME, "description": "Window start (inclusive), with a timezone offset."},
                    "end": {
                        **TIME,
                        "description": "Window end (exclusive, ≤ 24 local hours after start in the project's "
                        "timezone), with an offset.",
                    },
                    "fields": {
                        "type": "array",
                        "items": FIELD,
                        "minItems": 1,
                        "uniqueItems": True,
                        "description": "Fields to return (default: every field of the element type).",
                    },
                    **point_page_properties(baseline.MAX_POINTS),
                },
                ["element_type", "element_ids", "start", "end"],
            ),
            _per_type(
                "fields",
                {"items": {"enum": list(baseline.NODE_FIELDS)}},
                {"items": {"enum": list(baseline.LINK_FIELDS)}},
            ),
        ),
        output_model=BaselineSeriesResult,
        permissions=(SIMULATION_VIEW,),
        source="model_baseline",
        semantics="model_baseline",
        limits=ToolLimits(max_page=baseline.MAX_POINTS, max_targets=MAX_TARGETS, max_window_s=WINDOW_S),
        invoke=lambda scope, a: baseline.query_model_baseline_series.plan(
            scope=scope,
            element_type=a["element_type"],
            element_ids=a["element_ids"],
            start=parse_time(a["start"], "start"),
            end=parse_time(a["end"], "end"),
            fields=a.get("fields"),
            page=point_page_from(a, baseline.MAX_POINTS),
        ),
        summarize=lambda r: (
            f"Model baseline: {len(r.data.items)} of {r.data.total} points of {len(r.data.element_ids)} "
            f"{r.data.element_type}(s) from offset {r.data.offset}" + ("; more available." if r.data.has_more else ".")
        ),
        rest="timeseries/baseline/series",
        examples=(
            {
                "element_type": "junction",
                "element_ids": ["JUNCTION-0", "JUNCTION-1"],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
            },
            {
                "element_type": "junction",
                "element_ids": ["JUNCTION-0", "JUNCTION-1"],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T10:00:00Z",
            },
        ),
    ),
    ToolSpec(
        name="get_model_baseline_at_time",
        title="Model baseline at a time",
        description="MODEL BASELINE (simulation output, not measurements) of one element at the baseline "
        "instant at or nearest before the given time (data.time names that instant; the baseline is "
        "stepped, not interpolated). A time outside the baseline is refused.",
        input_schema=input_object(
            {"element_type": ELEMENT_TYPE, "element_id": ELEMENT_ID, "time": TIME},
            ["element_type", "element_id", "time"],
        ),
        output_model=BaselineAtTimeResult,
        permissions=(SIMULATION_VIEW,),
        source="model_baseline",
        semantics="model_baseline",
        invoke=lambda scope, a: baseline.get_model_baseline_at_time.plan(
            scope=scope, element_type=a["element_type"], element_id=a["element_id"], time=parse_time(a["time"], "time")
        ),
        summarize=lambda r: (
            f"Model baseline of {r.data.element_type} {r.data.element_id} at {r.data.time.isoformat()}: "
            + ", ".join(f"{k}={v}" for k, v in r.data.values.items())
        ),
        rest="timeseries/baseline/at-time",
        examples=(
            {"element_type": "junction", "element_id": "JUNCTION-0", "time": "2026-11-01T08:00:00Z"},
            {"element_type": "pipe", "element_id": "LINK-1523", "time": "2026-11-01T08:30:00Z"},
        ),
    ),
    ToolSpec(
        name="query_model_baseline_field",
        title="Model baseline field",
        description="MODEL BASELINE (simulation output, not measurements): one field of every element of a "
        "type at one baseline instant (at or nearest before the given time), one page ordered by element "
        "id, with the total.",
        input_schema=_with(
            input_object(
                {"element_type": ELEMENT_TYPE, "field": FIELD, "time": TIME, **page_properties()},
                ["element_type", "field", "time"],
            ),
            _per_type("field", {"enum": list(baseline.NODE_FIELDS)}, {"enum": list(baseline.LINK_FIELDS)}),
        ),
        output_model=BaselineFieldResult,
        permissions=(SIMULATION_VIEW,),
        source="model_baseline",
        semantics="model_baseline",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: baseline.query_model_baseline_field.plan(
            scope=scope,
            element_type=a["element_type"],
            field=a["field"],
            time=parse_time(a["time"], "time"),
            page=page_from(a),
        ),
        summarize=lambda r: (
            f"Model baseline {r.data.field} of {len(r.data.items)} of {r.data.total} {r.data.element_type}s at "
            f"{r.data.time.isoformat()} from offset {r.data.offset}" + ("; more available." if r.data.has_more else ".")
        ),
        rest="timeseries/baseline/records",
        examples=(
            {"element_type": "junction", "field": "pressure", "time": "2026-11-01T08:00:00Z"},
            {"element_type": "tank", "field": "pressure", "time": "2026-11-01T08:30:00Z", "limit": 10},
        ),
    ),
]
