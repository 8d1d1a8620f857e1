"""The analysis family: analysis runs, their typed results, and their node/link series.

Every lookup goes through the run, scoped to the caller's project (``run__project_id``): a run of another
project is "not found", like a missing one. Series are the run's scenario values (``origin=analysis_run``),
never measurements and never the model baseline. A run that failed (or has not finished) has no series:
asking for them is answered with ``AnalysisRunWithoutSeries`` naming the run's status and error code,
so an empty answer never reads as "the scenario changed nothing". Legacy features a caller may name in
``result_type`` or ``field`` (water age, pipeline health) are a ``CapabilityGap`` (``queries.legacy``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, Exists, OuterRef, Q, Subquery

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.scope import QueryScope
from queries.errors import AnalysisRunWithoutSeries
from queries.fitting import fitting, least_json_bytes, model_skeleton
from queries.legacy import refuse_unavailable
from queries.models import (
    ELEMENT_MODELS,
    NODE_TYPES,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
)
from queries.paging import collection, page_of, page_rows
from queries.plan import Plan, service, statement_factory
from queries.schemas.analysis import (
    AnalysisResultItem,
    AnalysisResultListResult,
    AnalysisResultPage,
    AnalysisRunDetail,
    AnalysisRunListResult,
    AnalysisRunPage,
    AnalysisRunResult,
    AnalysisRunSummary,
    AnalysisSeriesData,
    AnalysisSeriesResult,
    AnalysisValuesPage,
    AnalysisValuesResult,
    ElementRef,
    ElementValue,
    ModelVersionRef,
    ResultTypeCount,
    SeriesPoint,
)
from queries.schemas.common import DataGap, PageRequest, check_series_bytes
from queries.services.windows import MAX_LOCAL_WINDOW, local_window
from queries.units import Q_FLOW, Q_HEAD, Q_HEADLOSS, Q_PRESSURE, Q_UNIT_HEADLOSS, Q_VELOCITY

SOURCE = "analysis_runs"
_LEAST_VALUE_BYTES = least_json_bytes(model_skeleton(ElementValue))  # one value's fewest bytes (queries.fitting)
MAX_RUN_PAGE = 100  # R-PAGE-1: analysis runs page at most 100
MAX_WINDOW = MAX_LOCAL_WINDOW  # R-PAGE-2: 24 *local* hours of the project's zone (queries.services.windows)
MAX_POINTS = 10000  # R-PAGE-2
NODE_FIELDS = ("pressure", "head", "demand", "quality", "leak_demand")
LINK_FIELDS = ("flow", "velocity", "headloss", "status", "setting")
#: Each field's quantity (``queries.units``, shown in the project's unit system) or its fixed meaning.
UNITS = {
    "pressure": Q_PRESSURE,
    "head": Q_HEAD,
    "demand": Q_FLOW,
    "leak_demand": Q_FLOW,
    "flow": Q_FLOW,
    "velocity": Q_VELOCITY,
    "headloss": Q_HEADLOSS,  # pumps and valves; a pipe's is per length (``_units``)
    "status": "0 closed, 1 open, 2 active",
}


def _units(element_type: str, field: str) -> dict[str, str]:
    if field == "headloss" and element_type == "pipe":
        return {field: Q_UNIT_HEADLOSS}
    return {field: UNITS[field]} if field in UNITS else {}


_SUMMARY_FIELDS = ("run_id", "kind", "status", "title", "created_at", "started_at", "finished_at", "error_code")
_DETAIL_FIELDS = ("parameters", "summary", "error_message", "model_version__version", "model_version__sha256",
                  "model_version__file_name", "engine", "input_sha256", "progress", "status_message", "estimate",
                  "cost")  # fmt: skip


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    return {**{k: row[k] for k in _SUMMARY_FIELDS}, "error_code": row["error_code"] or None}


def _check_field(element_type: str, field: str) -> type[AnalysisNodeSeries] | type[AnalysisLinkSeries]:
    """The series model of ``element_type``; ``field`` must be one of its fields."""
    refuse_unavailable(field)
    if element_type not in ELEMENT_MODELS:
        raise InvalidParameter(f"element_type must be one of {', '.join(ELEMENT_MODELS)}.")
    fields = NODE_FIELDS if element_type in NODE_TYPES else LINK_FIELDS
    if field not in fields:
        raise InvalidParameter(f"field of a {element_type} must be one of {', '.join(fields)}.")
    return AnalysisNodeSeries if element_type in NODE_TYPES else AnalysisLinkSeries


def require_series(run_id: str, row: dict[str, Any]) -> None:
    if row["status"] != "succeeded":
        reason = f" ({row['error_code']}: {row['error_message']})" if row["error_code"] else ""
        raise AnalysisRunWithoutSeries(
            f"Analysis run {run_id} is {row['status']}{reason}; it has no series to read.",
            details={"run_id": run_id, "run_status": row["status"], "error_code": row["error_code"] or None},
        )


def series_span(model: type[AnalysisNodeSeries] | type[AnalysisLinkSeries], element_type: str) -> dict[str, Any]:
    """Annotations on a run row: the first and last instant of its series of ``element_type`` (each an
    index probe on ``(run, element_type, time)``)."""
    of_type = model.objects.filter(run_id=OuterRef("pk"), element_type=element_type)
    return {
        "first_time": Subquery(of_type.order_by("time").values("time")[:1]),
        "last_time": Subquery(of_type.order_by("-time").values("time")[:1]),
    }


#: What a run lookup with its series' span reads (``_spanned_run``), before its own annotations.
_SPANNED_RUN = ("pk", "status", "error_code", "error_message", "first_time", "last_time")


def _spanned_run(model: Any, element_type: str, project_id: int, run_id: str, **more: Any) -> Any:
    """The run with the span of its series of ``element_type`` (``series_span``) and the annotations
    ``more``: the queryset the run lookups of the series tools read (``.values(*_SPANNED_RUN, …)``)."""
    runs = AnalysisRun.objects.filter(project_id=project_id, run_id=run_id)
    return runs.annotate(**more, **series_span(model, element_type))


@statement_factory(static=2)
def run_with_span(model: Any, element_type: str, project_id: int, run_id: str) -> Any:
    """The run (its key, status and error) with the span of its series of ``element_type``: a statement
    factory (its subqueries are compiled once per type, then bound)."""
    return _spanned_run(model, element_type, project_id, run_id).values(*_SPANNED_RUN)[:1]


def _span_gap(row: dict[str, Any], what: str, start: datetime, end: datetime) -> DataGap:
    """The requested window has no values of the run: say where the run's series are instead."""
    if row["first_time"] is None:
        covered = f"the run has no {what} series at all"
    else:
        covered = f"its {what} series cover {row['first_time']:%Y-%m-%dT%H:%MZ} to {row['last_time']:%Y-%m-%dT%H:%MZ}"
    return DataGap(
        start=start.astimezone(UTC), end=end.astimezone(UTC), reason=f"No values of the run here; {covered}."
    )


@collection()
def _runs_newest_first(project_id: int) -> Any:
    """The project's analysis runs, newest first (counted and paged as statement factories)."""
    runs = AnalysisRun.objects.filter(project_id=project_id)
    return runs.order_by("-created_at", "run_id").values(*_SUMMARY_FIELDS)


@service
def list_analysis_runs(*, scope: QueryScope, page: PageRequest) -> Plan[AnalysisRunListResult]:
    """One page of the project's analysis runs, newest first (two queries: count, page)."""
    if page.limit > MAX_RUN_PAGE:
        raise LimitExceeded(f"limit for analysis runs must be at most {MAX_RUN_PAGE}.")
    total, rows, has_more = yield from page_of(_runs_newest_first, (), (scope.project_id,), page)
    items = [AnalysisRunSummary(**_summary(r)) for r in rows]
    data = AnalysisRunPage(items=items, total=total, limit=page.limit, offset=page.offset, has_more=has_more)
    return AnalysisRunListResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/analysis-runs",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=data,
        page=data.info(),
    )


@statement_factory
def _run_detail(project_id: int, run_id: str) -> Any:
    """One run whole, with the result types it holds and whether it has series: a statement factory (its
    subqueries are compiled once, then bound)."""
    return (
        AnalysisRun.objects.filter(project_id=project_id, run_id=run_id)
        .annotate(
            has_nodes=Exists(AnalysisNodeSeries.objects.filter(run_id=OuterRef("pk"))),
            has_links=Exists(AnalysisLinkSeries.objects.filter(run_id=OuterRef("pk"))),
            types=Subquery(
                AnalysisResult.objects.filter(run_id=OuterRef("pk"))
                .order_by()
                .values("run_id")
                .annotate(t=ArrayAgg("result_type", order_by="result_type"))
                .values("t")[:1]
            ),
        )
        .values(*_SUMMARY_FIELDS, *_DETAIL_FIELDS, "has_nodes", "has_links", "types")[:1]
    )


@service
def get_analysis_run(*, scope: QueryScope, run_id: str) -> Plan[AnalysisRunResult]:
    """One run whole, with the result types it holds and whether it has series (one query)."""
    rows = yield _run_detail(scope.project_id, run_id)
    if not rows:
        raise NotFound("No analysis run with that id in this project.")
    row = rows[0]
    counts: dict[str, int] = {}
    for t in row["types"] or []:
        counts[t] = counts.get(t, 0) + 1
    return AnalysisRunResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/analysis-runs/{run_id}",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=AnalysisRunDetail(
            **_summary(row),
            parameters=row["parameters"],
            summary=row["summary"],
            error_message=row["error_message"] or None,
            result_types=[ResultTypeCount(result_type=t, count=n) for t, n in counts.items()],
            has_series=bool(row["has_nodes"] or row["has_links"]),
            model_version=None
            if row["model_version__version"] is None
            else ModelVersionRef(
                version=row["model_version__version"],
                sha256=row["model_version__sha256"],
                file_name=row["model_version__file_name"],
            ),
            engine=row["engine"] or None,
            input_sha256=row["input_sha256"] or None,
            progress=row["progress"],
            status_message=row["status_message"] or None,
            estimate=row["estimate"] or None,
            cost=row["cost"] or None,
        ),
    )


@statement_factory
def _run_with_count(project_id: int, run_id: str, *result_type: str) -> Any:
    """The run's key with the number of its results — of the ``result_type`` when one is given — a
    statement factory (the count is compiled once with and once without a type, then bound)."""
    matching = Q(results__result_type=result_type[0]) if result_type else Q()
    runs = AnalysisRun.objects.filter(project_id=project_id, run_id=run_id)
    return runs.annotate(n=Count("results", filter=matching)).values("pk", "kind", "n")[:1]


@collection()
def _results_of(run_pk: int, *result_type: str) -> Any:
    """A run's results in sequence order — of the ``result_type`` when one is given — read as statement
    factories (``queries.paging.collection``; its total comes with the run)."""
    results = AnalysisResult.objects.filter(run_id=run_pk)
    if result_type:
        results = results.filter(result_type=result_type[0])
    return results.order_by("sequence").values("sequence", "result_type", "payload", "element_refs")


@service
def list_analysis_results(
    *, scope: QueryScope, run_id: str, result_type: str | None, page: PageRequest
) -> Plan[AnalysisResultListResult]:
    """One page of a run's results in sequence order, optionally of one ``result_type`` (two queries:
    the run with the matching count, then the page)."""
    refuse_unavailable(result_type)
    typed = (result_type,) if result_type else ()
    runs = yield _run_with_count(scope.project_id, run_id, *typed)
    if not runs:
        raise NotFound("No analysis run with that id in this project.")
    run = runs[0]
    rows = yield page_rows(_results_of, (), (run["pk"], *typed), page.offset, page.limit)
    items = [
        AnalysisResultItem(
            sequence=r["sequence"],
            result_type=r["result_type"],
            payload=r["payload"],
            element_refs=[ElementRef.model_validate(e) for e in r["element_refs"]],
        )
        for r in rows
    ]
    total = int(run["n"])
    data = AnalysisResultPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        run_id=run_id,
        kind=run["kind"],
        result_type=result_type,
    )
    return AnalysisResultListResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/analysis-runs/{run_id}/results",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=data,
        page=data.info(),
    )


def _check_window(start: datetime, end: datetime, timezone: str) -> None:
    local_window(start, end, timezone=timezone)  # ≤ 24 local hours of the project's zone (R-PAGE-2)


@statement_factory(static=2)
def _run_for_series(model: Any, element_type: str, project_id: int, run_id: str, element_id: str) -> Any:
    """The run, whether the element exists in the project's network, and the span of the run's series of
    ``element_type``: a statement factory (its subqueries are compiled once per type, then bound)."""
    element = ELEMENT_MODELS[element_type].objects.filter(project_id=project_id, element_id=element_id)
    runs = _spanned_run(model, element_type, project_id, run_id, element_exists=Exists(element))
    return runs.values(*_SPANNED_RUN, "element_exists")[:1]


@statement_factory(static=2)
def _run_points(
    model: Any, field: str, run_pk: int, element_type: str, element_id: str, start: datetime, end: datetime
) -> Any:
    """One field of one element of a run in ``[start, end)``, in time order, one past ``MAX_POINTS`` at
    most: a statement factory (compiled once per series model and field, then bound)."""
    points = model.objects.filter(
        run_id=run_pk, element_type=element_type, element_id=element_id, time__gte=start, time__lt=end
    )
    return points.order_by("time").values_list("time", field)[: MAX_POINTS + 1]


@service
def query_analysis_series(
    *,
    scope: QueryScope,
    run_id: str,
    element_type: str,
    element_id: str,
    field: str,
    start: datetime,
    end: datetime,
) -> Plan[AnalysisSeriesResult]:
    """One field of one element over ``[start, end)`` as the run computed it (two queries: the run with
    the element's existence and the run's series span, then the points)."""
    model = _check_field(element_type, field)
    _check_window(start, end, scope.timezone)
    runs = yield _run_for_series(model, element_type, scope.project_id, run_id, element_id)
    if not runs:
        raise NotFound("No analysis run with that id in this project.")
    run = runs[0]
    if not run["element_exists"]:
        raise NotFound(f"No {element_type} with that id in this project.")
    require_series(run_id, run)
    rows = yield _run_points(model, field, run["pk"], element_type, element_id, start, end)
    if len(rows) > MAX_POINTS:
        raise LimitExceeded(f"More than {MAX_POINTS} points in the window; narrow start/end.")
    gaps = [] if rows else [_span_gap(run, element_type, start, end)]
    points = [SeriesPoint(time=t, value=v) for t, v in rows]
    check_series_bytes(points)  # ≤ 10000 points *or* 8 MiB (R-PAGE-2)
    return AnalysisSeriesResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/analysis-runs/{run_id}/{element_type}/{element_id}/{field}",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=AnalysisSeriesData(
            run_id=run_id,
            run_status=run["status"],
            element_type=element_type,  # type: ignore[arg-type]  # checked by _check_field
            element_id=element_id,
            field=field,
            points=points,
        ),
        window=local_window(start, end, timezone=scope.timezone),
        units=_units(element_type, field),
        data_gaps=gaps,
    )


@statement_factory(static=2)
def _run_at(model: Any, element_type: str, project_id: int, run_id: str, time: datetime) -> Any:
    """The run, with its instant of ``element_type`` at or before ``time`` and its series' span: a
    statement factory (its subqueries are compiled once per type, then bound)."""
    of_type = model.objects.filter(run_id=OuterRef("pk"), element_type=element_type, time__lte=time)
    at = Subquery(of_type.order_by("-time").values("time")[:1])
    return _spanned_run(model, element_type, project_id, run_id, at=at).values(*_SPANNED_RUN, "at")[:1]


@collection(static=3)
def _values_at(model: Any, element_type: str, field: str, run_pk: int, time: datetime) -> Any:
    """One field of a run's elements of a type at one of its instants, in element-id order."""
    at = model.objects.filter(run_id=run_pk, element_type=element_type, time=time)
    return at.order_by("element_id").values_list("element_id", field)


@service
def query_analysis_values(
    *, scope: QueryScope, run_id: str, element_type: str, field: str, time: datetime, page: PageRequest
) -> Plan[AnalysisValuesResult]:
    """One field of every element of a type at the run's reported instant at or before ``time``, one
    page ordered by element id (three queries: the run with that instant, the count, the page)."""
    model = _check_field(element_type, field)
    if time.tzinfo is None:
        raise InvalidParameter("time must carry a timezone offset (e.g. 2026-11-01T08:00:00Z).")
    runs = yield _run_at(model, element_type, scope.project_id, run_id, time)
    if not runs:
        raise NotFound("No analysis run with that id in this project.")
    run = runs[0]
    require_series(run_id, run)
    at: datetime | None = run["at"]
    if at is not None and run["last_time"] is not None and time > run["last_time"]:
        at = None  # after the run's last instant: no value, not the last one held forever
    total: int | None = 0
    rows: list[Any] = []
    has_more = False
    if at is not None:
        total, rows, has_more = yield from page_of(
            _values_at, (model, element_type, field), (run["pk"], at), page, _LEAST_VALUE_BYTES
        )
    items = fitting(rows, lambda row: ElementValue(element_id=row[0], value=row[1]))  # only what can fit
    data = AnalysisValuesPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=has_more,
        run_id=run_id,
        element_type=element_type,  # type: ignore[arg-type]  # checked by _check_field
        field=field,
        requested_time=time.astimezone(UTC),
        time=at,
    )
    return AnalysisValuesResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/analysis-runs/{run_id}/{element_type}/{field}",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=data,
        units=_units(element_type, field),
        page=data.info(),
        data_gaps=[] if at is not None else [_span_gap(run, element_type, time, time)],
    )
