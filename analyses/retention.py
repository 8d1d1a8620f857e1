"""Retention of analysis runs (issue 42 item 8): a finished run older than its project's retention
(``ProjectCompute.retention_days``, 30 days without a row) is purged — its series, its results, the run
and its job — unless evidence refers to it (``EvidenceSnapshot.analysis_run``: a read of its results in
an investigation). The beat runs it (``analyses.purge_expired_runs``), ``manage.py analysis_retention``
too; both call ``purge_expired_runs``.

Only runs with a job are purged. The demo's seeded runs have none and are dated in the demo's past
(its window starts 2026-11-01), so on any machine after the retention they would be purged from under the
demo: they stay as ``seed_demo`` wrote them (a rebuild replaces them).

Bounded batches: each batch is one transaction over at most ``batch_size`` runs, oldest first, and no
more series rows than ``batch_rows`` (by the count each run recorded; at least one run, so one large run
is never skipped), and a call does at most ``max_batches``. A run is never seen half-purged: its rows go in
the transaction that deletes it. The runs are locked (``FOR UPDATE SKIP LOCKED``: a second purge takes
other runs) before the evidence check is made again, so a snapshot saved meanwhile keeps its run — and
the database's foreign key refuses any transaction that would still delete a run a snapshot names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from contexts.models import ProjectCompute
from evidence.models import EvidenceSnapshot
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun, Job
from queries.models.jobs import JobStatus

logger = logging.getLogger(__name__)

FINISHED = [JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value]
#: The retention of a project without a compute row (the field's default).
DEFAULT_RETENTION_DAYS = int(ProjectCompute._meta.get_field("retention_days").get_default())

# The expired runs, oldest first: finished, with a job, older than their project's retention, and named by
# no evidence snapshot (the NOT EXISTS probes the index of the snapshot's foreign key).
_EXPIRED_SQL = f"""
SELECT r.id, r.run_id, r.job_id, COALESCE((r.cost ->> 'series_rows')::bigint, 0)
FROM {AnalysisRun._meta.db_table} r
LEFT JOIN {ProjectCompute._meta.db_table} c ON c.project_id = r.project_id
WHERE r.job_id IS NOT NULL AND r.status = ANY(%(finished)s)
  AND r.created_at < %(now)s - make_interval(days => COALESCE(c.retention_days, %(default_days)s))
  AND NOT EXISTS (SELECT 1 FROM {EvidenceSnapshot._meta.db_table} e WHERE e.analysis_run_id = r.id)
ORDER BY r.created_at, r.id
LIMIT %(limit)s
"""


@dataclass
class Purged:
    """What a purge removed (or, ``dry_run``, would remove): the run ids and the rows by table."""

    dry_run: bool = False
    run_ids: list[str] = field(default_factory=list)
    series_rows: int = 0
    results: int = 0
    jobs: int = 0
    batches: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"dry_run": self.dry_run, "runs": len(self.run_ids), "series_rows": self.series_rows,
                "results": self.results, "jobs": self.jobs, "batches": self.batches}  # fmt: skip


def _expired(now: datetime, limit: int, *, lock: bool) -> list[tuple[int, str, int, int]]:
    sql = _EXPIRED_SQL + ("FOR UPDATE OF r SKIP LOCKED" if lock else "")
    params: dict[str, Any] = {"finished": FINISHED, "now": now, "default_days": DEFAULT_RETENTION_DAYS, "limit": limit}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(int(a), str(b), int(c), int(d)) for a, b, c, d in cursor.fetchall()]


def _within(rows: list[tuple[int, str, int, int]], batch_rows: int) -> list[tuple[int, str, int, int]]:
    """The oldest of ``rows`` whose series rows stay within ``batch_rows`` (at least the first)."""
    taken: list[tuple[int, str, int, int]] = []
    total = 0
    for row in rows:
        if taken and total + row[3] > batch_rows:
            break
        taken.append(row)
        total += row[3]
    return taken


def _purge_batch(now: datetime, batch_size: int, batch_rows: int, purged: Purged) -> int:
    """One batch in one transaction; returns how many runs it purged (0: nothing left to purge)."""
    with transaction.atomic():
        locked = _expired(now, batch_size, lock=True)
        if not locked:
            return 0
        # Read again now that the runs are locked: a snapshot saved since the first read keeps its run
        # (a snapshot saved from here on waits for this commit and then finds its run gone).
        named = set(
            EvidenceSnapshot.objects.filter(analysis_run_id__in=[r[0] for r in locked]).values_list(
                "analysis_run_id", flat=True
            )
        )
        rows = _within([r for r in locked if r[0] not in named], batch_rows)
        if not rows:
            return 0
        ids = [r[0] for r in rows]
        series = AnalysisNodeSeries.objects.filter(run_id__in=ids).delete()[0]
        series += AnalysisLinkSeries.objects.filter(run_id__in=ids).delete()[0]
        results = AnalysisResult.objects.filter(run_id__in=ids).delete()[0]
        AnalysisRun.objects.filter(pk__in=ids).delete()
        jobs = Job.objects.filter(pk__in=[r[2] for r in rows]).delete()[0]
    purged.run_ids += [r[1] for r in rows]
    purged.series_rows += series
    purged.results += results
    purged.jobs += jobs
    purged.batches += 1
    return len(rows)


def purge_expired_runs(
    *,
    now: datetime | None = None,
    batch_size: int = 20,
    batch_rows: int = 500_000,
    max_batches: int = 50,
    dry_run: bool = False,
) -> Purged:
    """Purge the expired analysis runs (see the module docstring), at most ``max_batches`` batches of at
    most ``batch_size`` runs and ``batch_rows`` series rows each; ``dry_run`` counts what would go (the
    first ``batch_size × max_batches`` runs) and deletes nothing. Idempotent; safe on several workers."""
    if batch_size < 1 or batch_rows < 1 or max_batches < 1:
        raise ValueError("batch_size, batch_rows and max_batches must be at least 1")
    at = now or datetime.now(UTC)
    purged = Purged(dry_run=dry_run)
    if dry_run:
        rows = _expired(at, batch_size * max_batches, lock=False)
        ids = [r[0] for r in rows]
        purged.run_ids = [r[1] for r in rows]
        purged.series_rows = sum(r[3] for r in rows)
        purged.results = AnalysisResult.objects.filter(run_id__in=ids).count()
        purged.jobs = len(rows)
        return purged
    for _ in range(max_batches):
        if _purge_batch(at, batch_size, batch_rows, purged) == 0:
            break
    if purged.run_ids:
        logger.info(
            "analysis runs purged runs=%d series_rows=%d results=%d batches=%d",
            len(purged.run_ids),
            purged.series_rows,
            purged.results,
            purged.batches,
        )
    return purged
