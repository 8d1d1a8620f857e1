"""Peripheral data around the network: points, work orders, field observations, lab test data.

One fixed adapter per source (seed 001 "固定外围 points、work_orders、observations、test_data 适配器"):
the source picks the table and its stable order; ``point_id`` narrows to one point of the caller's
project (a point of another project, or none, is "not found" — never an empty page); ``start``/``end``
(timezone-aware, ``start`` inclusive, ``end`` exclusive) narrow ``recorded_at`` of the time-stamped
sources. Pages are cut in SQL (R-PAGE-1) with a stable total.

Every item keeps its own ``synthetic`` flag. The envelope's ``origin`` is ``synthetic`` unless the
selection holds rows and none of them is synthetic (then ``measured``): generated data is never
presented as real, even when only part of a selection is generated. The same grouped count that gives
``total`` tells which (one statement).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Model, QuerySet

from contexts.errors import InvalidParameter, NotFound
from contexts.scope import QueryScope
from queries.models import ELEMENT_TYPES, Observation, PeripheralPoint, TestData, WorkOrder
from queries.paging import collection, page_rows
from queries.plan import Plan, service, statement_factory
from queries.schemas.common import Origin, PageRequest, TimeWindow
from queries.schemas.peripheral import (
    ObservationItem,
    PeripheralDataResult,
    PeripheralItem,
    PeripheralPage,
    PeripheralPointItem,
    TestDataItem,
    WorkOrderItem,
)

SOURCE = "peripheral"
SOURCES = ("points", "work_orders", "observations", "test_data")


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _point(row: Mapping[str, Any]) -> PeripheralItem:
    geom = row["geom"]
    return PeripheralPointItem(
        point_id=row["point_id"],
        name=row["name"],
        kind=row["kind"],
        longitude=round(geom.x, 7),
        latitude=round(geom.y, 7),
        element_type=row["element_type"] if row["element_type"] in ELEMENT_TYPES else None,
        element_id=row["element_id"] or None,
        properties=row["properties"],
        synthetic=row["synthetic"],
    )


def _work_order(row: Mapping[str, Any]) -> PeripheralItem:
    return WorkOrderItem(
        order_id=row["order_id"],
        point_id=row["point__point_id"],
        kind=row["kind"],
        status=row["status"],
        priority=row["priority"],
        recorded_at=row["recorded_at"].astimezone(UTC),
        closed_at=_utc(row["closed_at"]),
        description=row["description"],
        synthetic=row["synthetic"],
    )


def _observation(row: Mapping[str, Any]) -> PeripheralItem:
    return ObservationItem(
        point_id=row["point__point_id"],
        recorded_at=row["recorded_at"].astimezone(UTC),
        quantity=row["quantity"],
        value=row["value"],
        unit=row["unit"],
        note=row["note"],
        observer=row["observer"],
        synthetic=row["synthetic"],
    )


def _test_data(row: Mapping[str, Any]) -> PeripheralItem:
    return TestDataItem(
        sample_id=row["sample_id"],
        point_id=row["point__point_id"],
        recorded_at=row["recorded_at"].astimezone(UTC),
        parameter=row["parameter"],
        value=row["value"],
        unit=row["unit"],
        method=row["method"],
        lab=row["lab"],
        synthetic=row["synthetic"],
    )


@dataclass(frozen=True)
class _Adapter:
    model: type[Model]
    fields: tuple[str, ...]
    order: tuple[str, ...]  # a total order: the last key is unique
    item: Callable[[Mapping[str, Any]], PeripheralItem]
    timed: bool = True


ADAPTERS: dict[str, _Adapter] = {
    "points": _Adapter(
        PeripheralPoint,
        ("point_id", "name", "kind", "geom", "element_type", "element_id", "properties", "synthetic"),
        ("point_id",),
        _point,
        timed=False,
    ),
    "work_orders": _Adapter(
        WorkOrder,
        (
            "order_id",
            "point__point_id",
            "kind",
            "status",
            "priority",
            "recorded_at",
            "closed_at",
            "description",
            "synthetic",
        ),  # fmt: skip
        ("recorded_at", "order_id"),
        _work_order,
    ),
    "observations": _Adapter(
        Observation,
        ("point__point_id", "recorded_at", "quantity", "value", "unit", "note", "observer", "synthetic"),
        ("recorded_at", "point__point_id", "id"),
        _observation,
    ),
    "test_data": _Adapter(
        TestData,
        ("sample_id", "point__point_id", "recorded_at", "parameter", "value", "unit", "method", "lab", "synthetic"),
        ("recorded_at", "sample_id", "parameter"),
        _test_data,
    ),
}


def _check(source: str, start: datetime | None, end: datetime | None) -> _Adapter:
    adapter = ADAPTERS.get(source)
    if adapter is None:
        raise InvalidParameter(f"source must be one of {', '.join(SOURCES)}.")
    for name, value in (("start", start), ("end", end)):
        if value is not None and value.tzinfo is None:
            raise InvalidParameter(f"{name} must carry a timezone offset (Z or ±hh:mm).")
        if value is not None and not adapter.timed:
            raise InvalidParameter(f"{name} applies to work_orders, observations and test_data, not to points.")
    if start is not None and end is not None and start >= end:
        raise InvalidParameter("start must be before end.")
    return adapter


def _origin(groups: list[dict[str, Any]]) -> tuple[int, Origin]:
    total = sum(int(g["n"]) for g in groups)
    all_real = total > 0 and not any(g["synthetic"] for g in groups)
    return total, "measured" if all_real else "synthetic"


def _filtered(
    source: str, by_point: bool, by_start: bool, by_end: bool, project_id: int, *values: Any
) -> QuerySet[Any]:
    """The project's rows of one source, filtered by what the call gave: its point, then the window's start
    and end, each present when its flag is (``values`` holds them in that order)."""
    rows: QuerySet[Any] = ADAPTERS[source].model.objects.filter(project_id=project_id)  # type: ignore[attr-defined]
    rest = iter(values)
    if by_point:
        rows = rows.filter(point_id=next(rest))
    if by_start:
        rows = rows.filter(recorded_at__gte=next(rest))
    if by_end:
        rows = rows.filter(recorded_at__lt=next(rest))
    return rows


@statement_factory(static=4)
def _groups(*args: Any) -> Any:
    """The rows' count per ``synthetic`` value (at most two groups): the total and the origin in one
    statement, a statement factory (the aggregate is compiled once per source and filters, then bound)."""
    rows = _filtered(*args)
    return rows.order_by().values("synthetic").annotate(n=Count("pk")).order_by("synthetic")[:2]


@collection(static=4)
def _rows_of(*args: Any) -> QuerySet[Any]:
    """The rows of ``_filtered`` in the source's order, read as statement factories
    (``queries.paging.collection``; the total comes from ``_groups``)."""
    adapter = ADAPTERS[args[0]]
    return _filtered(*args).order_by(*adapter.order).values(*adapter.fields)


@statement_factory
def _point_key(project_id: int, point_id: str) -> QuerySet[Any]:
    """A peripheral point of the project by its id (a statement factory: compiled once, then bound)."""
    point: QuerySet[Any] = PeripheralPoint.objects.filter(project_id=project_id, point_id=point_id).values("pk")[:1]
    return point


@service
def query_peripheral_data(
    *,
    scope: QueryScope,
    source: str,
    page: PageRequest,
    point_id: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> Plan[PeripheralDataResult]:
    """One page of one peripheral source of the caller's project, with its total (two queries; three
    with ``point_id`` on a time-stamped source: the point is looked up first)."""
    adapter = _check(source, start, end)
    point: Any = point_id
    if point_id is not None and adapter.timed:
        points = yield _point_key(scope.project_id, point_id)
        if not points:
            raise NotFound("No peripheral point with that id in this project.")
        point = points[0]["pk"]
    # The filters present are the statement's shape; their values are bound.
    shape = (source, point is not None, start is not None, end is not None)
    values = (scope.project_id, *(v for v in (point, start, end) if v is not None))
    # total and origin in one statement: at most two groups (synthetic true/false)
    groups = yield _groups(*shape, *values)
    total, origin = _origin(groups)
    if point_id is not None and not adapter.timed and total == 0:
        raise NotFound("No peripheral point with that id in this project.")
    rows = yield page_rows(_rows_of, shape, values, page.offset, page.limit)
    items = [adapter.item(row) for row in rows]
    data = PeripheralPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        source=source,  # type: ignore[arg-type]  # checked by _check above
        point_id=point_id,
    )
    ref = f"project:{scope.project_slug}/peripheral/{source}" + (f"/points/{point_id}" if point_id else "")
    return PeripheralDataResult(
        source=SOURCE,
        source_ref=ref,
        queried_at=datetime.now(UTC),
        origin=origin,
        data=data,
        window=TimeWindow(start=start.astimezone(UTC), end=end.astimezone(UTC)) if start and end else None,
        page=data.info(),
    )
