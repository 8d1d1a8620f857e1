"""The model-baseline family: the hydraulic simulation of the project's imported network.

Every value is model output (origin ``model_baseline``), never a measurement. Nodes (junction, tank,
reservoir) have pressure, head, demand and quality; links (pipe, pump, valve) flow, velocity,
headloss, status and setting (``queries.models.baseline``). Every lookup is filtered by the caller's
project and the element type.

Instants: the baseline is stepped (the demo: every 15 min, 2026-11-01T00:00Z … 2026-11-03T00:00Z), not
interpolated. A single-time query answers with the instant *at or nearest before* the asked time and
names that instant (``data.time``); a time before the first instant or after the last one is refused
(``NotFound`` naming the covered end) rather than answered with a stale value.

Series (R-PAGE-2): an element filter of 1–20 ids is required (never the whole network), a window of
≤ 24 h, ≤ 10000 points.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Max, Min, QuerySet

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.scope import QueryScope
from queries.fitting import fitting, least_json_bytes, model_skeleton
from queries.models import ELEMENT_MODELS, NODE_TYPES, LinkBaseline, NodeBaseline
from queries.paging import collection, page_of, page_rows
from queries.plan import Plan, Together, service, statement_factory
from queries.schemas.baseline import (
    BaselineAtTime,
    BaselineAtTimeResult,
    BaselineDataGap,
    BaselineFieldPage,
    BaselineFieldResult,
    BaselineFieldValue,
    BaselinePoint,
    BaselineSeriesPage,
    BaselineSeriesResult,
)
from queries.schemas.common import PageInfo, PageRequest, TimeWindow, check_series_bytes
from queries.services.scada import check_targets, time_window
from queries.units import Q_FLOW, Q_HEAD, Q_HEADLOSS, Q_PRESSURE, Q_QUALITY, Q_UNIT_HEADLOSS, Q_VELOCITY

SOURCE = "model_baseline"
#: The fewest bytes one item of a field page writes (``queries.fitting``).
_LEAST_FIELD_VALUE_BYTES = least_json_bytes(model_skeleton(BaselineFieldValue))
MAX_POINTS = 10000
NODE_FIELDS: tuple[str, ...] = ("pressure", "head", "demand", "quality")
LINK_FIELDS: tuple[str, ...] = ("flow", "velocity", "headloss", "status", "setting")
#: Each field's quantity (``queries.units``): turned into the project's unit system on the way out.
_UNITS: dict[str, str] = {
    "pressure": Q_PRESSURE,
    "head": Q_HEAD,
    "demand": Q_FLOW,
    "quality": Q_QUALITY,
    "flow": Q_FLOW,
    "velocity": Q_VELOCITY,
}
_HEADLOSS_UNIT = {"pipe": Q_UNIT_HEADLOSS, "pump": Q_HEADLOSS, "valve": Q_HEADLOSS}


def fields_of(element_type: str) -> tuple[str, ...]:
    """The baseline fields of an element type (node or link fields)."""
    if element_type not in ELEMENT_MODELS:
        raise InvalidParameter(f"element_type must be one of {', '.join(ELEMENT_MODELS)}.")
    return NODE_FIELDS if element_type in NODE_TYPES else LINK_FIELDS


def _model(element_type: str) -> type[NodeBaseline] | type[LinkBaseline]:
    return NodeBaseline if element_type in NODE_TYPES else LinkBaseline


def _check_fields(element_type: str, fields: Sequence[str] | None) -> list[str]:
    allowed = fields_of(element_type)
    if fields is None:
        return list(allowed)
    wrong = [f for f in fields if f not in allowed]
    if wrong or not fields:
        raise InvalidParameter(f"Fields of a {element_type} are {', '.join(allowed)}.")
    if len(set(fields)) != len(fields):
        raise InvalidParameter("The fields must be distinct.")
    return list(fields)


def _units(element_type: str, fields: Sequence[str]) -> dict[str, str]:
    units = {f: _UNITS[f] for f in fields if f in _UNITS}
    if "headloss" in fields:
        units["headloss"] = _HEADLOSS_UNIT[element_type]
    return units


def _aware(time: datetime) -> datetime:
    if time.tzinfo is None:
        raise InvalidParameter("time must carry a timezone offset (e.g. 2026-11-01T08:00:00Z).")
    return time.astimezone(UTC)


def _around(qs: QuerySet[Any], time: datetime, columns: Sequence[str]) -> QuerySet[Any]:
    """One statement for the baseline instants around ``time``: the latest at or before it and the
    first after it (each ``ORDER BY time LIMIT 1`` on the btree, joined by ``UNION ALL``)."""
    before = qs.filter(time__lte=time).order_by("-time").values("time", *columns)[:1]
    after = qs.filter(time__gt=time).order_by("time").values("time", *columns)[:1]
    return before.union(after, all=True)[:2]


@statement_factory(static=2)
def type_instants(element_type: str, columns: tuple[str, ...], project_id: int, time: datetime) -> QuerySet[Any]:
    """``_around`` among a project's elements of a type: a statement factory, so the union is compiled
    once per (type, columns) and afterwards only bound (``mcp_app.statement_cache``)."""
    return _around(_model(element_type).objects.filter(project_id=project_id, element_type=element_type), time, columns)


@statement_factory(static=2)
def element_instants(
    element_type: str, columns: tuple[str, ...], project_id: int, element_id: str, time: datetime
) -> QuerySet[Any]:
    """``_around`` for one element (its ``columns`` at those instants), as a statement factory."""
    return _around(
        _model(element_type).objects.filter(project_id=project_id, element_type=element_type, element_id=element_id),
        time,
        columns,
    )


def _instant(rows: list[dict[str, Any]], time: datetime, what: str) -> dict[str, Any]:
    """The row of the instant at or nearest before ``time`` among ``_around``'s rows, or ``NotFound``
    when ``time`` is outside the baseline (before its first instant, after its last, or none)."""
    before = next((r for r in rows if r["time"] <= time), None)
    after = next((r for r in rows if r["time"] > time), None)
    if before is None and after is None:
        raise NotFound(f"No model baseline for {what} in this project.")
    if before is None:
        first = after["time"].isoformat()  # type: ignore[index]  # after is set here
        raise NotFound(
            f"The model baseline of {what} starts at {first}; ask for a time at or after it.",
            details={"baseline_start": first},
        )
    if after is None and before["time"] < time:
        last = before["time"].isoformat()
        raise NotFound(
            f"The model baseline of {what} ends at {last}; ask for a time at or before it.",
            details={"baseline_end": last},
        )
    return before


def _window_series(element_type: str, project_id: int, start: datetime, end: datetime, ids: Sequence[str]) -> Any:
    """The baseline rows of ``ids`` (elements of ``element_type``) in ``[start, end)``."""
    return _model(element_type).objects.filter(
        project_id=project_id, element_type=element_type, element_id__in=ids, time__gte=start, time__lt=end
    )


@statement_factory(static=1)
def _known(element_type: str, project_id: int, *ids: str) -> Any:
    """Which of the ``ids`` are elements of ``element_type`` in the project's network: a statement factory
    (compiled once per type and number of ids — each id one value — then bound)."""
    named = ELEMENT_MODELS[element_type].objects.filter(project_id=project_id, element_id__in=ids)
    return named.values_list("element_id", flat=True)[: len(ids)]


@collection(static=2)
def _points_of(
    element_type: str, names: tuple[str, ...], project_id: int, start: datetime, end: datetime, *ids: str
) -> Any:
    """The ``names`` fields of the elements' baseline in ``[start, end)``, by element then time, read
    as statement factories (``queries.paging.collection``; the total comes from ``_spans``)."""
    series = _window_series(element_type, project_id, start, end, ids)
    return series.order_by("element_id", "time").values("element_id", "time", *names)


@statement_factory(static=1)
def _spans(element_type: str, project_id: int, start: datetime, end: datetime, *ids: str) -> Any:
    """Per element of the ``ids``, its count of instants and its first and last in ``[start, end)``: a
    statement factory (the aggregate is compiled once per type and number of elements, then bound)."""
    series = _window_series(element_type, project_id, start, end, ids)
    # Ordered by an aggregate, not by element_id: with ORDER BY element_id + LIMIT the planner walks
    # the (project, type, element, time) btree in order filtering every element of the type (0.8 s for
    # 20 junctions × 24 h on the demo) instead of probing the 20 ids (``element_id = ANY``, ~2 ms).
    return (
        series.order_by()
        .values("element_id")
        .annotate(n=Count("id"), first=Min("time"), last=Max("time"))
        .order_by("first", "element_id")[: len(ids)]
    )


@service
def query_model_baseline_series(
    *,
    scope: QueryScope,
    element_type: str,
    element_ids: Sequence[str],
    start: datetime,
    end: datetime,
    fields: Sequence[str] | None = None,
    page: PageRequest | None = None,
) -> Plan[BaselineSeriesResult]:
    """The baseline of 1–20 elements of one type in ``[start, end)`` (≤ 24 h): the requested fields
    (default all of the type) at every instant, ordered by element id then time; an element without
    instants in (part of) the window is reported in ``data_gaps``.

    ``page`` pages over the points in that order (the continuation of a result cut to fit inline); by
    default all points, at most 10000 (more → ``LimitExceeded``).

    Three queries: the elements in the network model (unknown ids → ``NotFound`` naming them) together
    with the count and time range per element in the window (one round trip on the MCP driver), then
    the page of points.
    """
    names = _check_fields(element_type, fields)
    ids = check_targets(element_ids, "element id")
    window = time_window(start, end, timezone=scope.timezone)
    page = page or PageRequest(limit=MAX_POINTS, max_limit=MAX_POINTS)
    # The elements and their spans need nothing from each other: one round trip on the MCP driver.
    known, spans = yield Together(
        _known(element_type, scope.project_id, *ids),
        _spans(element_type, scope.project_id, window.start, window.end, *ids),
    )
    unknown = [i for i in ids if i not in set(known)]
    if unknown:
        raise NotFound(
            f"No {element_type} with id {', '.join(unknown)} in this project.", details={"unknown_element_ids": unknown}
        )
    total = sum(s["n"] for s in spans)
    if total > MAX_POINTS:
        raise LimitExceeded(
            f"The window holds more than {MAX_POINTS} baseline points for these elements; ask for fewer elements "
            "or a shorter window."
        )
    gaps = _series_gaps(ids, spans, window)
    values = (scope.project_id, window.start, window.end, *ids)
    rows = yield page_rows(_points_of, (element_type, tuple(names)), values, page.offset, page.limit)
    # Rows typed by their columns: built without re-validation (up to 10000 points).
    items = [
        BaselinePoint.model_construct(element_id=r["element_id"], time=r["time"], values={f: r[f] for f in names})
        for r in rows
    ]
    check_series_bytes(items)  # ≤ 10000 points *or* 8 MiB (R-PAGE-2)
    data = BaselineSeriesPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        element_type=element_type,  # type: ignore[arg-type]  # checked by fields_of
        element_ids=ids,
        fields=names,  # type: ignore[arg-type]  # checked by _check_fields
    )
    return BaselineSeriesResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/model-baseline/{element_type}?elements={','.join(ids)}",
        queried_at=datetime.now(UTC),
        origin="model_baseline",
        data=data,
        window=window,
        units=_units(element_type, names),
        page=PageInfo(total=total, limit=page.limit, offset=page.offset, has_more=data.has_more),
        data_gaps=gaps,
    )


def _series_gaps(ids: Sequence[str], spans: Sequence[dict[str, Any]], window: TimeWindow) -> list[BaselineDataGap]:
    """Where the window has no baseline for an element: all of it, or the part before its first /
    after its last instant (more than one step, the step read off the element's own instants)."""
    by_id = {s["element_id"]: s for s in spans}
    gaps: list[BaselineDataGap] = []
    for element_id in ids:
        span = by_id.get(element_id)
        if span is None:
            gaps.append(
                BaselineDataGap(
                    element_id=element_id,
                    start=window.start,
                    end=window.end,
                    reason="no model baseline instant in this window",
                )
            )
            continue
        if span["n"] < 2:
            continue
        step = (span["last"] - span["first"]) / (span["n"] - 1)
        if span["first"] - window.start >= step:
            gaps.append(
                BaselineDataGap(
                    element_id=element_id,
                    start=window.start,
                    end=span["first"],
                    reason="before the first model baseline instant",
                )
            )
        if window.end - span["last"] > step:
            gaps.append(
                BaselineDataGap(
                    element_id=element_id,
                    start=span["last"] + step,
                    end=window.end,
                    reason="after the last model baseline instant",
                )
            )
    return gaps


@service
def get_model_baseline_at_time(
    *, scope: QueryScope, element_type: str, element_id: str, time: datetime
) -> Plan[BaselineAtTimeResult]:
    """One element's baseline at the instant at or nearest before ``time`` (every field of its type).
    One query (the instant at or before and the one after, to tell "past the end" from "in range")."""
    names = list(fields_of(element_type))
    asked = _aware(time)
    rows = yield element_instants(element_type, tuple(names), scope.project_id, element_id, asked)
    row = _instant(rows, asked, f"{element_type} {element_id}")
    return BaselineAtTimeResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/model-baseline/{element_type}/{element_id}@{row['time'].isoformat()}",
        queried_at=datetime.now(UTC),
        origin="model_baseline",
        data=BaselineAtTime(
            element_type=element_type,  # type: ignore[arg-type]  # checked by fields_of
            element_id=element_id,
            requested_time=asked,
            time=row["time"],
            values={f: row[f] for f in names},
        ),
        window=TimeWindow(start=row["time"], end=row["time"]),
        units=_units(element_type, names),
    )


@collection(static=2)
def _field_values(element_type: str, field: str, project_id: int, time: datetime) -> QuerySet[Any]:
    """One field of every element of a type at one baseline instant, in element-id order."""
    at = _model(element_type).objects.filter(project_id=project_id, element_type=element_type, time=time)
    return at.order_by("element_id").values_list("element_id", field)


@service
def query_model_baseline_field(
    *, scope: QueryScope, element_type: str, field: str, time: datetime, page: PageRequest
) -> Plan[BaselineFieldResult]:
    """One field of every element of a type at one baseline instant (at or nearest before ``time``),
    one page ordered by element id, with the total. Three queries: the instant, the count, the page."""
    _check_fields(element_type, [field])
    asked = _aware(time)
    instants = yield type_instants(element_type, (), scope.project_id, asked)
    instant = _instant(instants, asked, f"{element_type} elements")["time"]
    total, rows, has_more = yield from page_of(
        _field_values, (element_type, field), (scope.project_id, instant), page, _LEAST_FIELD_VALUE_BYTES
    )
    items = fitting(rows, lambda row: BaselineFieldValue(element_id=row[0], value=row[1]))  # only what can fit
    data = BaselineFieldPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=has_more,
        element_type=element_type,  # type: ignore[arg-type]  # checked by fields_of
        field=field,  # type: ignore[arg-type]  # checked by _check_fields
        requested_time=asked,
        time=instant,
    )
    return BaselineFieldResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/model-baseline/{element_type}/{field}@{instant.isoformat()}",
        queried_at=datetime.now(UTC),
        origin="model_baseline",
        data=data,
        window=TimeWindow(start=instant, end=instant),
        units=_units(element_type, [field]),
        page=data.info(),
    )
