"""What an analysis run stores, decided once for both ends (issue 42 item 8, bounded storage).

``kept_elements`` is the one rule of which elements' series a run keeps: none for a run without a window
(valve isolation computes no series), the ``elements`` asked for when given, every element of the model
for a window up to ``FULL_SERIES_HOURS``, and none beyond that (the summary and results alone). The
execution writes by it (``analyses.execute``) and the submission estimates by it (``series_rows``: the
elements kept × the report instants of the window, the run's shape), so the estimate is what the run will
write.

``check_storage`` refuses a submission whose series would take the project's stored series rows past its
cap (``ProjectCompute.max_series_rows``) with ``StorageLimit`` before anything is queued. What a project
stores is counted without scanning the series tables: a succeeded run's own count of the rows it wrote
(``cost.series_rows``, written in the transaction that wrote them), a queued or running run's estimate
(``estimate.series_rows``: two submissions cannot both take the last of the cap; the caller holds the
project's compute row locked), nothing for a failed or cancelled run (it wrote nothing), and for a run no
job wrote (the demo's seeded runs) its recorded count if it has one, else its rows counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

from analyses.errors import StorageLimit
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisRun
from queries.models.jobs import JobStatus

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from analyses.kinds.base import AnalysisKind
    from contexts.models import Project, ProjectCompute

#: Windows up to this long keep every element's series unless ``elements`` says which (issue 42 item 8).
FULL_SERIES_HOURS = 48
#: Seconds to write one series row (COPY, in the run's final transaction), for the run's time limits:
#: ``make bench-analysis`` 2026-12-08 on Net6, 703,056 rows in 5.0–6.5 s and 2,094,672 in 18.4–21.2 s
#: beside the benchmark's server (10 µs a row, the slowest of them).
WRITE_S_PER_ROW = 1.0e-5

#: Element names per element type (``junction``, ``pipe``, …).
Names = dict[str, Sequence[str]]


def kept_elements(wn: WaterNetworkModel, si: Mapping[str, Any], minutes: int) -> tuple[Names, Names] | None:
    """The nodes and links (per type) whose series a run of canonical ``si`` over a window of ``minutes``
    (``AnalysisKind.window_minutes``) on ``wn`` stores, or None when it stores none (see the module
    docstring)."""
    if minutes <= 0:
        return None  # no window, no series
    chosen = si.get("elements")
    if not chosen and minutes / 60 > FULL_SERIES_HOURS:
        return None
    nodes: Names = {
        "junction": list(wn.junction_name_list),
        "reservoir": list(wn.reservoir_name_list),
        "tank": list(wn.tank_name_list),
    }
    links: Names = {
        "pipe": list(wn.pipe_name_list),
        "pump": list(wn.pump_name_list),
        "valve": list(wn.valve_name_list),
    }
    if chosen:
        wanted = set(chosen)
        nodes = {t: [n for n in names if n in wanted] for t, names in nodes.items()}
        links = {t: [n for n in names if n in wanted] for t, names in links.items()}
    return nodes, links


def series_rows(spec: AnalysisKind, si: Mapping[str, Any], wn: WaterNetworkModel) -> int:
    """The series rows a run of ``spec`` with canonical ``si`` on ``wn`` writes: one per element kept and
    report instant of its window (the window's start and end included, as the engine reports them)."""
    keep = kept_elements(wn, si, spec.window_minutes(si))
    if keep is None:
        return 0
    elements = sum(len(names) for part in keep for names in part.values())
    return elements * spec.shape(si, wn).report_steps


_ACTIVE = [JobStatus.QUEUED.value, JobStatus.RUNNING.value]

# One pass over the project's runs (``analysisrun_recent`` index), no series scanned: see the module
# docstring for what each run counts. A run without a job that recorded its count counts by it too.
_RECORDED_SQL = f"""
SELECT COALESCE(SUM(CASE
    WHEN job_id IS NOT NULL AND status = ANY(%(active)s) THEN COALESCE((estimate ->> 'series_rows')::bigint, 0)
    WHEN status = '{JobStatus.SUCCEEDED.value}' THEN COALESCE((cost ->> 'series_rows')::bigint, 0)
    ELSE 0 END), 0)
FROM {AnalysisRun._meta.db_table}
WHERE project_id = %(project)s AND (job_id IS NOT NULL OR cost ->> 'series_rows' IS NOT NULL)
"""
# The rest — the demo's seeded runs, written without a job or a count — have their rows counted (a scan of
# the series index for those runs only: nothing to scan in a project without such runs).
_UNRECORDED_SQL = """
SELECT count(*) FROM {table}
WHERE run_id IN (
    SELECT id FROM {runs} WHERE project_id = %(project)s AND job_id IS NULL AND cost ->> 'series_rows' IS NULL
)
"""


def stored_series_rows(project: Project) -> int:
    """The series rows the project's runs hold, or will once the queued and running ones end."""
    params: dict[str, Any] = {"project": project.pk, "active": _ACTIVE}
    total = 0
    with connection.cursor() as cursor:
        cursor.execute(_RECORDED_SQL, params)
        total += int(cursor.fetchone()[0])
        for model in (AnalysisNodeSeries, AnalysisLinkSeries):
            sql = _UNRECORDED_SQL.format(table=model._meta.db_table, runs=AnalysisRun._meta.db_table)
            cursor.execute(sql, params)
            total += int(cursor.fetchone()[0])
    return total


def check_storage(
    project: Project, compute: ProjectCompute, spec: AnalysisKind, si: Mapping[str, Any], wn: WaterNetworkModel
) -> int:
    """The series rows the run would add, or ``StorageLimit`` (with those rows, the rows stored and the
    cap) when they would take the project past ``compute.max_series_rows``. The caller holds ``compute``
    locked (``select_for_update``), so concurrent submissions count each other's estimates."""
    rows = series_rows(spec, si, wn)
    if rows == 0:
        return 0
    stored = stored_series_rows(project)
    cap = int(compute.max_series_rows)
    if stored + rows > cap:
        raise StorageLimit(
            f"The run would store {rows:,} series rows and project {project.slug} holds {stored:,} of its "
            f"{cap:,}; it was not queued. Ask for fewer elements (elements) or a shorter window, or wait for "
            f"finished runs to pass the project's retention.",
            details={"series_rows": rows, "stored_series_rows": stored, "max_series_rows": cap},
        )
    return rows
