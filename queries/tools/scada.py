"""Declarations of the SCADA family: devices, one device, readings (measured or cleaned).

Also the wire pieces every time-series tool of this catalog shares here: ``TIME`` (an RFC 3339
date-time that must carry ``Z`` or ``±hh:mm`` — JSON Schema's ``format`` is not enforced by the
validator, so the ``pattern`` is what turns a naive time into -32602) and ``parse_time``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from contexts.errors import InvalidParameter
from queries.registry import SCADA_VIEW, ToolLimits, ToolSpec, input_object, page_from, page_properties
from queries.schemas.common import MAX_LIMIT, MAX_OFFSET, PageRequest
from queries.schemas.scada import ScadaDeviceListResult, ScadaDeviceResult, ScadaReadingsResult
from queries.services import scada

TIME = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$",
    "description": "RFC 3339 date-time with a timezone offset (Z or ±hh:mm), e.g. 2026-11-01T08:00:00Z.",
}
DEVICE_ID = {"type": "string", "minLength": 1, "maxLength": 64, "description": "A SCADA device id, e.g. PT-001."}
WINDOW_S = int(scada.MAX_WINDOW.total_seconds())  # of local wall-clock time (queries.services.windows)


def point_page_properties(max_points: int) -> dict[str, Any]:
    """``limit``/``offset`` over the points of a time series, in the result's order. Not needed for a
    first call (all points of the window, up to ``max_points``); they continue a result that was cut to
    fit inline (its ``continue_with``)."""
    return {
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": max_points,
            "default": max_points,
            "description": "Points per page (continuation of a truncated result).",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_OFFSET,
            "default": 0,
            "description": "Points to skip (continuation of a truncated result).",
        },
    }


def point_page_from(args: Mapping[str, Any], max_points: int) -> PageRequest:
    return PageRequest(limit=args.get("limit", max_points), offset=args.get("offset", 0), max_limit=max_points)


def parse_time(value: str, name: str) -> datetime:
    """An input time (already matched against ``TIME``) as an aware datetime in UTC; an impossible date
    (month 13, hour 24) or one outside the representable range once in UTC → ``InvalidParameter``.
    Normalised to UTC here, once for every family: PostgreSQL refuses offsets Python accepts (beyond
    ±15:59), and every output is UTC anyway."""
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise InvalidParameter(f"{name} must carry a timezone offset.")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidParameter(f"{name} is not a valid date-time.") from None


def _readings_summary(r: ScadaReadingsResult) -> str:
    data = r.data
    text = (
        f"{len(data.items)} of {data.total} {data.origin} points ({data.field}) of {len(data.device_ids)} "
        f"device(s) from offset {data.offset}, {len(r.data_gaps)} gap range(s)"
    )
    if r.truncated and r.continue_with:
        text += f"; covers only up to {r.window.end.isoformat() if r.window else '?'} (too many gaps to list)"
    return text + ("; more points available." if data.has_more else ".")


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="list_scada_devices",
        title="List SCADA devices",
        description="One page of the project's SCADA measuring devices (pressure, flow, level), ordered by "
        "device id, with the total: what each measures, on which network element, where, how often.",
        input_schema=input_object(page_properties(), []),
        output_model=ScadaDeviceListResult,
        permissions=(SCADA_VIEW,),
        source="scada",
        semantics="measured",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: scada.list_scada_devices.plan(scope=scope, page=page_from(a)),
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} devices from offset {r.data.offset}"
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="scada-devices",
        examples=(
            {"limit": 5},
            {"limit": 2, "offset": 3},
            {"limit": 7, "offset": 2},
        ),
    ),
    ToolSpec(
        name="get_scada_device",
        title="SCADA device",
        description="One SCADA device of the project: quantity, unit, network element, location, sample "
        "interval and accuracy.",
        input_schema=input_object({"device_id": DEVICE_ID}, ["device_id"]),
        output_model=ScadaDeviceResult,
        permissions=(SCADA_VIEW,),
        source="scada",
        semantics="measured",
        invoke=lambda scope, a: scada.get_scada_device.plan(scope=scope, device_id=a["device_id"]),
        summarize=lambda r: (
            f"{r.data.device_id}: {r.data.quantity} ({r.data.unit}) on {r.data.element_type} {r.data.element_id}."
        ),
        rest="scada-devices/<str:device_id>",
        examples=(
            {"device_id": "PT-001"},
            {"device_id": "NOPE-1"},
            {"device_id": "PT-004"},
        ),
    ),
    ToolSpec(
        name="query_scada_readings",
        title="SCADA readings",
        description="Readings of up to 20 SCADA devices in [start, end) (at most 24 local hours of the "
        "project's timezone, see get_project; a whole local day, 23 h or 25 h on a DST change, is one call): "
        "field "
        "monitored_value = what the devices sent (origin measured) or cleaned_value = after cleaning "
        "(origin cleaned), never both in one result. Every slot keeps its quality flag (good, spike, "
        "stuck, gap); slots without a value are null and listed as gap ranges in data_gaps, never filled "
        "in. At most 10000 points per call.",
        input_schema=input_object(
            {
                "device_ids": {
                    "type": "array",
                    "items": DEVICE_ID,
                    "minItems": 1,
                    "maxItems": scada.MAX_TARGETS,
                    "uniqueItems": True,
                    "description": f"1–{scada.MAX_TARGETS} device ids of the project.",
                },
                "start": {**TIME, "description": "Window start (inclusive), with a timezone offset."},
                "end": {
                    **TIME,
                    "description": "Window end (exclusive, ≤ 24 local hours after start in the project's "
                    "timezone), with a timezone offset.",
                },
                "field": {"type": "string", "enum": list(scada.READING_FIELDS)},
                **point_page_properties(scada.MAX_POINTS),
            },
            ["device_ids", "start", "end", "field"],
        ),
        output_model=ScadaReadingsResult,
        permissions=(SCADA_VIEW,),
        source="scada",
        semantics="measured",
        limits=ToolLimits(max_page=scada.MAX_POINTS, max_targets=scada.MAX_TARGETS, max_window_s=WINDOW_S),
        invoke=lambda scope, a: scada.query_scada_readings.plan(
            scope=scope,
            device_ids=a["device_ids"],
            start=parse_time(a["start"], "start"),
            end=parse_time(a["end"], "end"),
            field=a["field"],
            page=point_page_from(a, scada.MAX_POINTS),
        ),
        summarize=_readings_summary,
        rest="timeseries/scada-readings",
        examples=(
            {
                "device_ids": ["PT-001", "PT-002"],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
                "field": "monitored_value",
                "limit": 50,
            },
            {
                "device_ids": ["PT-003"],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T09:00:00Z",
                "field": "cleaned_value",
            },
            {
                "device_ids": ["PT-004", "FT-001"],
                "start": "2026-11-01T06:00:00Z",
                "end": "2026-11-01T10:00:00Z",
                "field": "cleaned_value",
                "limit": 40,
            },
        ),
    ),
]
