"""Declaration of query_peripheral_data (points, work orders, observations, lab test data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contexts.scope import QueryScope
from queries.plan import Plan
from queries.registry import WEBGIS_VIEW, ToolLimits, ToolSpec, input_object, page_from, page_properties
from queries.schemas.common import MAX_LIMIT
from queries.schemas.peripheral import PeripheralDataResult
from queries.services import peripheral
from queries.tools.scada import TIME, parse_time


def _invoke(scope: QueryScope, a: Mapping[str, Any]) -> Plan[PeripheralDataResult]:
    return peripheral.query_peripheral_data.plan(
        scope=scope,
        source=a["source"],
        page=page_from(a),
        point_id=a.get("point_id"),
        start=parse_time(a["start"], "start") if "start" in a else None,
        end=parse_time(a["end"], "end") if "end" in a else None,
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="query_peripheral_data",
        title="Peripheral data",
        description="One page of peripheral data: points (hydrants, sampling points, meters), work_orders, "
        "observations or test_data (lab tests), optionally for one point_id and a start/end time range "
        "(not for points). Every item says whether it is synthetic.",
        input_schema=input_object(
            {
                "source": {"type": "string", "enum": list(peripheral.SOURCES)},
                "point_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "e.g. HY-001"},
                "start": {**TIME, "description": "From this time (inclusive), with a timezone."},
                "end": {**TIME, "description": "Until this time (exclusive), with a timezone."},
                **page_properties(),
            },
            ["source"],
        ),
        output_model=PeripheralDataResult,
        permissions=(WEBGIS_VIEW,),
        source=peripheral.SOURCE,
        semantics="synthetic",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=_invoke,
        item_parts=True,
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} {r.data.source} from offset {r.data.offset}"
            + (f" for point {r.data.point_id}" if r.data.point_id else "")
            + (" (synthetic)" if r.origin == "synthetic" else "")
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="peripheral/<str:source>",
        examples=(
            {"source": "points"},
            {"source": "work_orders", "limit": 5},
            {"source": "observations", "point_id": "HY-001"},
            {"source": "test_data", "limit": 5},
            {"source": "observations", "point_id": "HY-001", "limit": 5},
        ),
    ),
]
