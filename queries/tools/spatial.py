"""Declarations of the spatial family: elements near a point (SPEC R-GEO)."""

from __future__ import annotations

from queries.registry import ELEMENT_TYPE, WEBGIS_VIEW, ToolLimits, ToolSpec, input_object
from queries.schemas.common import MAX_OFFSET
from queries.schemas.spatial import NearbyElementsResult
from queries.services import spatial

CENTER = {
    "type": "array",
    "description": "[longitude, latitude] in EPSG:4326 degrees (e.g. a geocoded address).",
    "prefixItems": [
        {"type": "number", "minimum": -180, "maximum": 180, "description": "longitude"},
        {"type": "number", "minimum": -90, "maximum": 90, "description": "latitude"},
    ],
    "items": False,
    "minItems": 2,
    "maxItems": 2,
}

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="query_nearby_elements",
        title="Nearby network elements",
        description="Network elements of one type (default pipe) within radius_m metres (default 200, max "
        "10000) of a [lon, lat] point, nearest first, with the WGS84 spheroid distance to the whole "
        "geometry and the element's properties. Pages of limit (default 5, max 100). No hits → empty "
        "items: the radius is never widened. Nearness does not prove connection or supply.",
        input_schema=input_object(
            {
                "center": CENTER,
                "element_type": {**ELEMENT_TYPE, "default": spatial.DEFAULT_ELEMENT_TYPE},
                "radius_m": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": spatial.MAX_RADIUS_M,
                    "default": spatial.DEFAULT_RADIUS_M,
                    "description": "Search radius in metres.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": spatial.MAX_LIMIT,
                    "default": spatial.DEFAULT_LIMIT,
                },
                "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
            },
            ["center"],
        ),
        output_model=NearbyElementsResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        limits=ToolLimits(max_page=spatial.MAX_LIMIT),
        invoke=lambda scope, a: spatial.query_nearby_elements.plan(
            scope=scope,
            center=a["center"],
            element_type=a.get("element_type", spatial.DEFAULT_ELEMENT_TYPE),
            radius_m=a.get("radius_m", spatial.DEFAULT_RADIUS_M),
            page=spatial.nearby_page(limit=a.get("limit", spatial.DEFAULT_LIMIT), offset=a.get("offset", 0)),
        ),
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} {r.data.element_type}s within {r.data.radius_m:g} m"
            + (f", nearest {r.data.items[0].element_id} at {r.data.items[0].distance_m:.1f} m" if r.data.items else "")
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="spatial/nearby",
        examples=(
            {"center": [117.1392082, 39.0752639], "element_type": "junction", "radius_m": 300},
            {"center": [117.1392082, 39.0752639], "radius_m": 1000, "limit": 10, "offset": 5},
            {"center": [117.2, 39.1], "radius_m": 800, "limit": 4},
        ),
    ),
]
