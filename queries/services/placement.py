"""The sensor placement family: the project's placement runs and one run with its selected sensors.

Both need ``optimization.run`` (the seed's rule for the sensor-placement routes, not weakened to a view
permission). Everything is bounded in SQL — the legacy service read the whole array and sliced it in
Python: the run list is a LIMIT/OFFSET page, and a run's ``selected_sensors`` array is paged inside the
database (``jsonb_path_query_array`` over ``$[offset to offset+limit-1]``), its length counted there too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db.models import CharField, F, Func, IntegerField, JSONField, QuerySet
from django.db.models.expressions import RawSQL

from contexts.errors import NotFound
from contexts.scope import QueryScope
from queries.models import SensorPlacementRun
from queries.paging import collection, page_of
from queries.plan import Plan, service, statement_factory
from queries.schemas.common import PageRequest
from queries.schemas.placement import (
    SelectedSensor,
    SensorPlacementRunDetail,
    SensorPlacementRunListResult,
    SensorPlacementRunPage,
    SensorPlacementRunResult,
    SensorPlacementRunSummary,
)

SOURCE = "sensor_placement_runs"
_TABLE = SensorPlacementRun._meta.db_table
_SUMMARY_FIELDS = (
    "run_id",
    "status",
    "title",
    "objective",
    "objective_value",
    "sensor_count",
    "parameters",
    "created_at",
    "finished_at",
)


def _sensor_count() -> Func:
    return Func(F("selected_sensors"), function="jsonb_array_length", output_field=IntegerField())


def _summary(row: dict[str, Any]) -> SensorPlacementRunSummary:
    return SensorPlacementRunSummary(**{k: row[k] for k in _SUMMARY_FIELDS})


@collection()
def _runs_newest_first(project_id: int) -> QuerySet[Any]:
    """The project's placement runs, newest first, with their sensor counts (statement factories)."""
    runs = SensorPlacementRun.objects.filter(project_id=project_id).annotate(sensor_count=_sensor_count())
    return runs.order_by("-created_at", "run_id").values(*_SUMMARY_FIELDS)


@service
def list_sensor_placement_runs(*, scope: QueryScope, page: PageRequest) -> Plan[SensorPlacementRunListResult]:
    """One page of the project's sensor placement runs, newest first (two queries: count, page); the
    selected sensors are counted in SQL, not returned."""
    total, rows, has_more = yield from page_of(_runs_newest_first, (), (scope.project_id,), page)
    items = [_summary(r) for r in rows]
    data = SensorPlacementRunPage(items=items, total=total, limit=page.limit, offset=page.offset, has_more=has_more)
    return SensorPlacementRunListResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/sensor-placement-runs",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=data,
        page=data.info(),
    )


@statement_factory
def _run_with_sensors(project_id: int, run_id: str, window: str) -> QuerySet[Any]:
    """The run with one window of its selected sensors (``window``: the jsonpath variables ``first`` and
    ``last`` as JSON), its sensor count and its scores split into scalars and omitted arrays, all computed
    in the database: a statement factory (compiled once, then bound)."""
    return (
        SensorPlacementRun.objects.filter(project_id=project_id, run_id=run_id)
        .annotate(
            sensor_count=_sensor_count(),
            sensors=RawSQL(
                f'jsonb_path_query_array("{_TABLE}"."selected_sensors", %s::jsonpath, %s::jsonb)',
                ("$[$first to $last]", window),
                output_field=JSONField(),
            ),
            scalar_scores=RawSQL(
                f"(SELECT coalesce(jsonb_object_agg(s.key, s.value), '{{}}'::jsonb) "
                f'FROM jsonb_each("{_TABLE}"."scores") AS s WHERE jsonb_typeof(s.value) <> %s)',
                ("array",),
                output_field=JSONField(),
            ),
            omitted_scores=RawSQL(
                f"(SELECT coalesce(array_agg(s.key ORDER BY s.key), '{{}}') "
                f'FROM jsonb_each("{_TABLE}"."scores") AS s WHERE jsonb_typeof(s.value) = %s)',
                ("array",),
                output_field=ArrayField(CharField()),
            ),
        )
        .values(*_SUMMARY_FIELDS, "sensors", "scalar_scores", "omitted_scores")[:1]
    )


@service
def get_sensor_placement_run(*, scope: QueryScope, run_id: str, page: PageRequest) -> Plan[SensorPlacementRunResult]:
    """One run with one page of its selected sensors in rank order (one query: the page of the array,
    its length and the scalar scores are all computed in the database)."""
    window = json.dumps({"first": page.offset, "last": page.offset + page.limit - 1})
    rows = yield _run_with_sensors(scope.project_id, run_id, window)
    if not rows:
        raise NotFound("No sensor placement run with that id in this project.")
    row = rows[0]
    items = [SelectedSensor.model_validate(s) for s in row["sensors"]]
    total = int(row["sensor_count"])
    data = SensorPlacementRunDetail(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        run=_summary(row),
        scores=row["scalar_scores"],
        omitted_scores=list(row["omitted_scores"]),
    )
    return SensorPlacementRunResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/sensor-placement-runs/{run_id}",
        queried_at=datetime.now(UTC),
        origin="analysis_run",
        data=data,
        page=data.info(),
    )
