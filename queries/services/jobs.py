"""State changes of the jobs that do not run on the job runner (``queries.jobrunner``): the network and
GIS imports and the rolling baseline record theirs here, one function each (a queued job for the runner
is recorded with ``job_started(queued=True)``). They write through their own autocommit statements, so
a job whose work rolled back is still recorded as failed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contexts.models import Project
from queries.models.jobs import Job, JobStatus


def job_started(
    *,
    project: Project,
    kind: str,
    subject: str,
    started_by: str,
    window: tuple[datetime, datetime] | None = None,
    task_id: str = "",
    queued: bool = False,
    dry_run: bool = False,
) -> Job:
    """Record a job that starts now (or, ``queued``, waits for a worker); ``dry_run`` marks a check that
    writes nothing, so the admin's Jobs tell it from an import."""
    return Job.objects.create(
        project=project,
        kind=kind,
        subject=subject[:300],
        window_start=window[0] if window else None,
        window_end=window[1] if window else None,
        status=JobStatus.QUEUED if queued else JobStatus.RUNNING,
        started_at=None if queued else datetime.now(UTC),
        started_by=started_by[:200],
        task_id=task_id,
        dry_run=dry_run,
    )


def job_finished(
    job: Job,
    *,
    rows: int,
    rejects: int = 0,
    reject_lines: list[str] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED,
        rows=rows,
        rejects=rejects,
        reject_lines=(reject_lines or [])[:20],
        detail=detail or {},
        progress=1.0,
        finished_at=datetime.now(UTC),
    )


def job_failed(
    job: Job,
    message: str,
    *,
    rows: int | None = None,
    rejects: int = 0,
    reject_lines: list[str] | None = None,
    cancelled: bool = False,
) -> None:
    """The job ended without writing anything; ``message`` says why in a sentence."""
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.CANCELLED if cancelled else JobStatus.FAILED,
        message=message[:2000],
        rows=rows,
        rejects=rejects,
        reject_lines=(reject_lines or [])[:20],
        finished_at=datetime.now(UTC),
    )
