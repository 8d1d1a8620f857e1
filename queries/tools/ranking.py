"""Declarations of the ranking family: the lowest or highest baseline values, and the devices whose
cleaned readings depart most from the model — the searching done by the server, in SQL, bounded."""

from __future__ import annotations

from queries.registry import ELEMENT_TYPE, SCADA_VIEW, SIMULATION_VIEW, ToolLimits, ToolSpec, input_object
from queries.schemas.ranking import BaselineRankingResult, DeviationRankingResult
from queries.services import baseline, ranking
from queries.services.area import AREA_SCHEMA
from queries.tools.baseline import FIELD, _per_type, _with
from queries.tools.scada import TIME, WINDOW_S, parse_time

LIMIT = {
    "type": "integer",
    "minimum": 1,
    "maximum": ranking.MAX_RANK,
    "default": ranking.DEFAULT_RANK,
    "description": f"How many to return (1–{ranking.MAX_RANK}).",
}


def _deviation_summary(r: DeviationRankingResult) -> str:
    d = r.data
    text = f"{len(d.items)} of {d.total} {d.quantity} devices compared, ranked by mean |cleaned − model|"
    if d.items:
        top = d.items[0]
        text += f"; largest {top.device_id} {top.mean_abs_diff:.3g} {top.unit}"
    if d.unranked_total:
        text += f"; {d.unranked_total} not compared (no readings or no baseline)"
    return text + "."


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="rank_model_baseline",
        title="Rank model baseline",
        description="MODEL BASELINE (simulation output, not measurements): the limit (≤ 50) lowest (order "
        "asc) or highest (desc) values of one field among the elements of a type at the baseline instant at "
        "or nearest before time, ties by element id, optionally inside an area (a GIS district, a GIS "
        "polygon or a circle), with the count of elements ranked.",
        input_schema=_with(
            input_object(
                {
                    "element_type": ELEMENT_TYPE,
                    "field": FIELD,
                    "time": TIME,
                    "order": {"type": "string", "enum": list(ranking.ORDERS), "default": "asc"},
                    "limit": LIMIT,
                    "area": AREA_SCHEMA,
                },
                ["element_type", "field", "time"],
            ),
            _per_type("field", {"enum": list(baseline.NODE_FIELDS)}, {"enum": list(baseline.LINK_FIELDS)}),
        ),
        output_model=BaselineRankingResult,
        permissions=(SIMULATION_VIEW,),
        source="model_baseline",
        semantics="model_baseline",
        limits=ToolLimits(max_page=ranking.MAX_RANK),
        invoke=lambda scope, a: ranking.rank_model_baseline.plan(
            scope=scope,
            element_type=a["element_type"],
            field=a["field"],
            time=parse_time(a["time"], "time"),
            order=a.get("order", "asc"),
            limit=a.get("limit", ranking.DEFAULT_RANK),
            area=a.get("area"),
        ),
        summarize=lambda r: (
            f"{len(r.data.items)} {'lowest' if r.data.order == 'asc' else 'highest'} {r.data.field} of "
            f"{r.data.total} {r.data.element_type}s at {r.data.time.isoformat()}"
            + (f": {r.data.items[0].element_id} = {r.data.items[0].value}" if r.data.items else "")
            + "."
        ),
        rest="timeseries/baseline/ranking",
        examples=(
            {
                "element_type": "junction",
                "field": "pressure",
                "time": "2026-11-01T09:00:00Z",
                "area": {"district": "Hexi"},
            },
            {
                "element_type": "pipe",
                "field": "flow",
                "time": "2026-11-01T09:00:00Z",
                "order": "desc",
                "limit": 5,
                "area": {"center": [117.2, 39.1], "radius_m": 2000},
            },
            {
                "element_type": "junction",
                "field": "pressure",
                "time": "2026-11-01T09:00:00Z",
                "area": {"district": "Nowhere"},
            },
            {
                "element_type": "junction",
                "field": "head",
                "time": "2026-11-01T09:00:00Z",
                "area": {"layer_key": "water_mains", "source_fid": "WM-200003"},
            },
            {
                "element_type": "junction",
                "field": "pressure",
                "time": "2026-11-01T08:30:00Z",
                "limit": 10,
                "area": {"district": "Hexi"},
            },
        ),
    ),
    ToolSpec(
        name="rank_scada_deviation",
        title="Rank SCADA deviation from the model",
        description="CLEANED readings compared with the MODEL BASELINE at each device's element (linearly "
        "interpolated at each reading's time) over [start, end) (≤ 24 local hours of the project's timezone): "
        "devices of one quantity ranked by "
        "mean absolute difference, descending, ties by device id, with the worst difference and when, "
        "units, and the coverage of both series. Readings outside the baseline's coverage are left out; "
        "devices with nothing to compare are listed as unranked, never as zero deviation. Optional area.",
        input_schema=input_object(
            {
                "start": {**TIME, "description": "Window start (inclusive), with a timezone offset."},
                "end": {
                    **TIME,
                    "description": "Window end (exclusive, ≤ 24 local hours after start in the project's "
                    "timezone), with an offset.",
                },
                "quantity": {"type": "string", "enum": list(ranking.QUANTITIES)},
                "limit": LIMIT,
                "area": AREA_SCHEMA,
            },
            ["start", "end", "quantity"],
        ),
        output_model=DeviationRankingResult,
        permissions=(SCADA_VIEW, SIMULATION_VIEW),
        source="scada",
        semantics="cleaned",
        limits=ToolLimits(max_page=ranking.MAX_RANK, max_window_s=WINDOW_S),
        invoke=lambda scope, a: ranking.rank_scada_deviation.plan(
            scope=scope,
            start=parse_time(a["start"], "start"),
            end=parse_time(a["end"], "end"),
            quantity=a["quantity"],
            limit=a.get("limit", ranking.DEFAULT_RANK),
            area=a.get("area"),
        ),
        summarize=_deviation_summary,
        rest="timeseries/scada-deviation",
        examples=(
            {"start": "2026-11-01T08:00:00Z", "end": "2026-11-01T12:00:00Z", "quantity": "pressure"},
            {"start": "2026-11-01T08:00:00Z", "end": "2026-11-01T12:00:00Z", "quantity": "flow", "limit": 3},
            {
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T12:00:00Z",
                "quantity": "level",
                "area": {"district": "Hexi"},
            },
            {"start": "2026-11-01T06:00:00Z", "end": "2026-11-01T10:00:00Z", "quantity": "pressure", "limit": 5},
        ),
    ),
]
