"""The SCADA family: the project's measuring devices and their readings.

Readings keep what a device sent (``monitored_value``, origin ``measured``) apart from what cleaning
made of it (``cleaned_value``, origin ``cleaned``): one call reads one of them, never both. Slots
without a value are reported as gap ranges in ``data_gaps`` and never filled in (R-PAGE-6). Every
lookup goes through the device, filtered by the caller's project (STYLE "scoped lookups").

Time series limits (R-PAGE-2): ≤ 20 devices, a window of ≤ 24 h, ≤ 10000 points or 8 MiB — each checked
by the service, the points by a capped ``COUNT`` in SQL (``LIMIT 10001``), their bytes measured before
the result is built (``check_series_bytes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from pydantic import TypeAdapter

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.scope import QueryScope
from queries.coordinates import coordinates, rounded
from queries.fitting import least_json_bytes, model_skeleton
from queries.models import ScadaDevice, ScadaReading
from queries.paging import budgeted_rows, collection, page_of
from queries.plan import CountOf, Plan, Raw, count_of, service, statement_factory
from queries.schemas.common import PageInfo, PageRequest, TimeWindow, check_series_bytes
from queries.schemas.scada import (
    ReadingField,
    ScadaDataGap,
    ScadaDeviceData,
    ScadaDeviceListResult,
    ScadaDevicePage,
    ScadaDeviceResult,
    ScadaReadingPage,
    ScadaReadingPoint,
    ScadaReadingsResult,
)
from queries.services.windows import MAX_LOCAL_WINDOW, local_window

SOURCE = "scada"
MAX_TARGETS = 20
MAX_WINDOW = MAX_LOCAL_WINDOW  # 24 *local* hours of the project's zone (queries.services.windows)
MAX_POINTS = 10000
#: Gap ranges listed in one result. More than this and the result stops at the first unlisted gap
#: (``truncated``, ``continue_with`` from there): a gap list may not crowd the points out of the
#: 12000-byte inline result (R-PAGE-5), and "gaps not listed" must never read as "no gaps".
MAX_GAPS = 40
READING_FIELDS: tuple[str, ...] = ("monitored_value", "cleaned_value")

_DEVICE_FIELDS = (
    "device_id",
    "name",
    "quantity",
    "unit",
    "native_unit",
    "element_type",
    "element_id",
    "sample_interval_s",
    "accuracy",
)
#: The device's location as longitude/latitude computed in SQL (no GEOS object per row).
_DEVICE_COORDINATES = coordinates("location")
_DEVICE_UNITS = {"longitude": "degree", "latitude": "degree", "sample_interval_s": "s"}
_GAP_REASONS = {
    "gap": "no reading received",
    "spike": "removed by cleaning: spike",
    "stuck": "removed by cleaning: stuck value",
    "absent": "no reading stored",
}


def time_window(start: datetime, end: datetime, *, timezone: str = "UTC") -> TimeWindow:
    """The window ``[start, end)`` in UTC tagged with the project's zone, refused unless both carry an
    offset, ``start < end`` and the window is at most 24 local hours of ``timezone`` (R-PAGE-2: the one
    rule, ``queries.services.windows.local_window``)."""
    return local_window(start, end, timezone=timezone)


def check_targets(ids: Sequence[str], what: str) -> list[str]:
    """1–20 distinct ids (R-PAGE-2), in the caller's order."""
    if not ids:
        raise InvalidParameter(f"Name at least one {what}.")
    if len(ids) > MAX_TARGETS:
        raise LimitExceeded(f"At most {MAX_TARGETS} {what}s per call; ask for fewer.")
    if len(set(ids)) != len(ids):
        raise InvalidParameter(f"The {what}s must be distinct.")
    return list(ids)


def _device(row: dict[str, Any]) -> ScadaDeviceData:
    return ScadaDeviceData(
        device_id=row["device_id"],
        name=row["name"],
        quantity=row["quantity"],
        unit=row["unit"],
        native_unit=row["native_unit"] or row["unit"],
        element_type=row["element_type"],
        element_id=row["element_id"],
        longitude=rounded(row["longitude"]),
        latitude=rounded(row["latitude"]),
        sample_interval_s=row["sample_interval_s"],
        accuracy=row["accuracy"],
    )


@collection()
def _devices(project_id: int) -> Any:
    """The project's SCADA devices in device-id order (counted and paged as statement factories)."""
    devices = ScadaDevice.objects.filter(project_id=project_id)
    return devices.order_by("device_id").values(*_DEVICE_FIELDS, **_DEVICE_COORDINATES)


@service
def list_scada_devices(*, scope: QueryScope, page: PageRequest) -> Plan[ScadaDeviceListResult]:
    """One page of the project's SCADA devices, ordered by device id, with the total (two queries:
    the count and the page, both in SQL)."""
    total, rows, has_more = yield from page_of(_devices, (), (scope.project_id,), page)
    items = [_device(row) for row in rows]
    data = ScadaDevicePage(items=items, total=total, limit=page.limit, offset=page.offset, has_more=has_more)
    result = ScadaDeviceListResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/scada-devices",
        queried_at=datetime.now(UTC),
        origin="measured",
        data=data,
        units=_DEVICE_UNITS,
        page=data.info(),
    )
    result._device_quantities = {d.device_id: d.quantity for d in items}  # converted by present
    return result


@statement_factory
def _one_device(project_id: int, device_id: str) -> QuerySet[Any]:
    """One device of the project (a statement factory: compiled once, then bound)."""
    lookup = ScadaDevice.objects.filter(project_id=project_id, device_id=device_id)
    one: QuerySet[Any] = lookup.values(*_DEVICE_FIELDS, **_DEVICE_COORDINATES)[:1]
    return one


@statement_factory
def _devices_named(project_id: int, *ids: str) -> QuerySet[Any]:
    """The project's devices among the ``ids`` (key, unit, pk, quantity): a statement factory (compiled once per
    number of ids — each id one value — then bound)."""
    named = ScadaDevice.objects.filter(project_id=project_id, device_id__in=ids)
    return named.values_list("device_id", "unit", "id", "quantity")[:MAX_TARGETS]


@statement_factory
def _readings_count(project_id: int, start: datetime, end: datetime, *pks: int) -> CountOf:
    """How many readings the devices (their keys ``pks``, found in this project) have in ``[start,
    end)``, counted up to one past ``MAX_POINTS``: a statement factory (compiled once per number of
    devices, then bound). By the devices' keys: the (device, time) btree is probed per device instead of
    every device's rows of the window being scanned and joined. Counted unordered."""
    readings = ScadaReading.objects.filter(
        device_id__in=pks, device__project_id=project_id, time__gte=start, time__lt=end
    ).order_by()
    return count_of(readings.values_list("time")[: MAX_POINTS + 1])


@service
def get_scada_device(*, scope: QueryScope, device_id: str) -> Plan[ScadaDeviceResult]:
    """One SCADA device of the caller's project (one query)."""
    rows = yield _one_device(scope.project_id, device_id)
    if not rows:
        raise NotFound("No SCADA device with that id in this project.")
    device = _device(rows[0])
    result = ScadaDeviceResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/scada-devices/{device_id}",
        queried_at=datetime.now(UTC),
        origin="measured",
        data=device,
        units={**_DEVICE_UNITS, "accuracy": device.unit},
    )
    # converted by present (the device's fields, and the label of ``units["accuracy"]``)
    result._device_quantities = {device.device_id: device.quantity, "accuracy": device.quantity}
    return result


def _gaps_sql(field: str) -> str:
    """Gap ranges of the requested devices in ``[start, end)``, ordered by start then device, with a
    LIMIT: runs of slots whose ``field`` is NULL, one run per device and quality while the slots follow
    each other one step apart (a running sum of "this slot starts a run"), plus stretches with no row at
    all (between rows, before the first and after the last slot of the window, or the whole window).
    The window functions sort only the missing slots; the one pass over every row (``lag`` for the
    stretches without rows) is in (device, time) order. ``device_id = ANY (ARRAY(…))`` lets the
    planner probe the ``(device, time)`` btree per device rather than scan every device's rows of the
    window (BRIN) and join. ``field`` is one of ``READING_FIELDS`` (a
    constant, never client text)."""
    device = ScadaDevice._meta.db_table
    reading = ScadaReading._meta.db_table
    return f"""
WITH dev AS (
    SELECT id, device_id, make_interval(secs => sample_interval_s) AS step
    FROM {device} WHERE project_id = %s AND device_id = ANY(%s)
), r AS (
    SELECT dev.device_id, dev.step, x.time, x.quality, x.{field} IS NULL AS missing,
           lag(x.time) OVER (PARTITION BY x.device_id ORDER BY x.time) AS prev
    FROM {reading} x JOIN dev ON dev.id = x.device_id
    WHERE x.device_id = ANY (ARRAY(SELECT id FROM dev)) AND x.time >= %s::timestamptz AND x.time < %s::timestamptz
), m AS (
    SELECT device_id, step, time, quality,
           CASE WHEN lag(time) OVER (PARTITION BY device_id, quality ORDER BY time) >= time - step
                THEN 0 ELSE 1 END AS fresh
    FROM r WHERE missing
), runs AS (
    SELECT device_id, step, time, quality, sum(fresh) OVER (PARTITION BY device_id, quality ORDER BY time) AS run
    FROM m
), b AS (
    SELECT dev.device_id, dev.step, min(r.time) AS first, max(r.time) AS last
    FROM dev LEFT JOIN r ON r.device_id = dev.device_id GROUP BY dev.device_id, dev.step
), g AS (
    SELECT device_id, min(time) AS gap_start, max(time) + step AS gap_end, quality AS kind
    FROM runs GROUP BY device_id, step, quality, run
    UNION ALL
    SELECT device_id, prev + step, time, 'absent' FROM r WHERE time - prev > step
    UNION ALL
    SELECT device_id, %s::timestamptz, COALESCE(first, %s::timestamptz), 'absent'
    FROM b WHERE first IS NULL OR first - %s::timestamptz >= step
    UNION ALL
    SELECT device_id, last + step, %s::timestamptz, 'absent' FROM b WHERE last + step < %s::timestamptz
)
SELECT device_id, gap_start, LEAST(gap_end, %s::timestamptz), kind FROM g
ORDER BY gap_start, device_id LIMIT %s
"""  # noqa: S608 - table names and the field are constants of this module


_GAPS_SQL = {field: _gaps_sql(field) for field in READING_FIELDS}


def _points_sql(field: str) -> str:
    """One page of points in (device id, time) order, the time as epoch seconds (a float: exact to the
    microsecond at these magnitudes), validated into points by pydantic in one call (in Rust): building
    5760 points from Python rows with aware datetimes and a model each took three quarters of a maximal
    call, and PostgreSQL's JSON functions cost more than they saved. Both sides by the devices' keys
    (found in this project first): the (device, time) btree is probed for those devices only, whatever
    the planner believes of the project's device count. ``field`` is one of ``READING_FIELDS`` (a
    constant, never client text)."""
    device = ScadaDevice._meta.db_table
    reading = ScadaReading._meta.db_table
    return f"""
SELECT d.device_id, extract(epoch FROM x.time)::float8 AS time, x.{field} AS value, x.quality
FROM {reading} x JOIN {device} d ON d.id = x.device_id
WHERE x.device_id = ANY(%s) AND d.id = ANY(%s) AND d.project_id = %s AND x.time >= %s AND x.time < %s
ORDER BY d.device_id, x.time LIMIT %s OFFSET %s
"""  # noqa: S608 - table names and the field are constants of this module


_POINTS_SQL = {field: _points_sql(field) for field in READING_FIELDS}
_POINTS = TypeAdapter(list[ScadaReadingPoint])
#: The fewest bytes one point writes (``queries.fitting``).
_LEAST_POINT_BYTES = least_json_bytes(model_skeleton(ScadaReadingPoint))


@service
def query_scada_readings(
    *,
    scope: QueryScope,
    device_ids: Sequence[str],
    start: datetime,
    end: datetime,
    field: ReadingField,
    page: PageRequest | None = None,
) -> Plan[ScadaReadingsResult]:
    """Readings of up to 20 devices of the project in ``[start, end)`` (≤ 24 h): one field only
    (``monitored_value`` → origin ``measured``, ``cleaned_value`` → origin ``cleaned``), every stored
    slot with its quality flag, gaps as merged ranges in ``data_gaps``.

    ``page`` pages over the window's points in their order (device id, time) — the continuation of a
    result cut to fit inline; by default all points, at most 10000 (more → ``LimitExceeded``). When more
    than ``MAX_GAPS`` gap ranges fall in the window, the result covers ``[start, T)`` only, T the start
    of the first unlisted gap, and says so (``truncated``, ``continue_with`` start=T).

    Four queries: the devices (unknown ids → ``NotFound`` naming them), the gap ranges, a capped count
    of the points, the page of points.
    """
    if field not in READING_FIELDS:
        raise InvalidParameter("field must be monitored_value or cleaned_value.")
    ids = check_targets(device_ids, "device id")
    window = time_window(start, end, timezone=scope.timezone)
    page = page or PageRequest(limit=MAX_POINTS, max_limit=MAX_POINTS)
    devices = yield _devices_named(scope.project_id, *ids)
    units = {device_id: unit for device_id, unit, _, _ in devices}
    unknown = [i for i in ids if i not in units]
    if unknown:
        raise NotFound(
            f"No SCADA device with id {', '.join(unknown)} in this project.", details={"unknown_device_ids": unknown}
        )
    gap_rows = yield Raw(
        _GAPS_SQL[field],
        [
            scope.project_id,
            ids,
            window.start,
            window.end,
            window.start,
            window.end,
            window.start,
            window.end,
            window.end,
            window.end,
            MAX_GAPS + 1,
        ],
        ("device_id", "start", "end", "kind"),
    )
    covered_end = window.end
    if len(gap_rows) > MAX_GAPS:
        covered_end = gap_rows[MAX_GAPS]["start"]
    gaps = [
        ScadaDataGap(
            device_id=g["device_id"], start=g["start"], end=min(g["end"], covered_end), reason=_GAP_REASONS[g["kind"]]
        )
        for g in gap_rows[:MAX_GAPS]
        if g["start"] < covered_end
    ]
    pks = [pk for _, _, pk, _ in devices]
    total = yield _readings_count(scope.project_id, window.start, covered_end, *pks)
    if total > MAX_POINTS:
        raise LimitExceeded(
            f"The window holds more than {MAX_POINTS} points for these devices; ask for fewer devices or a "
            "shorter window."
        )
    # Under the MCP edge's inline budget only the points that can fit are read (``queries.fitting``): a
    # few hundred of a maximal window's thousands; the total above stays exact.
    points, _ = yield from budgeted_rows(
        lambda n: Raw(
            _POINTS_SQL[field],
            [pks, pks, scope.project_id, window.start, covered_end, n, page.offset],
            ("device_id", "time", "value", "quality"),
        ),
        page.limit,
        _LEAST_POINT_BYTES,
        extra=0,
    )
    items = _POINTS.validate_python(points)
    check_series_bytes(items)  # ≤ 10000 points *or* 8 MiB (R-PAGE-2)
    data = ScadaReadingPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        field=field,
        origin="measured" if field == "monitored_value" else "cleaned",
        device_ids=ids,
    )
    cut = covered_end < window.end
    result = ScadaReadingsResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/scada-readings/{field}?devices={','.join(ids)}",
        queried_at=datetime.now(UTC),
        origin=data.origin,
        data=data,
        window=TimeWindow(start=window.start, end=covered_end, timezone=window.timezone),
        units={device_id: units[device_id] for device_id in ids},
        page=PageInfo(total=total, limit=page.limit, offset=page.offset, has_more=data.has_more),
        truncated=cut,
        continue_with=(
            {"device_ids": ids, "start": covered_end.isoformat(), "end": window.end.isoformat(), "field": field}
            if cut
            else None
        ),
        data_gaps=gaps,
    )
    result._device_quantities = {device_id: q for device_id, _, _, q in devices}  # converted by present
    return result
