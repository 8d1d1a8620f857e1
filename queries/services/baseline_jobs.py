"""Baseline simulation as jobs of the job runner (``queries.jobrunner``): start one on a worker, run it,
follow and cancel it, and the rolling baseline that keeps every project covered (the writes of
``queries.importer.baseline_window``).

Cancellation is the runner's (one cancel key per job): a queued simulation never starts; a running one
stops between chunks and rolls back, writing nothing. ``baseline_job_cancel`` is what an operator calls
(``simulate_baseline --cancel JOB_ID``, the Jobs admin's "Cancel the selected jobs").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db import transaction

from contexts.models import Project
from queries.jobrunner.runner import JobCancelled, JobContext, JobFailed, NotCancellable, enqueue, request_cancel
from queries.models import NetworkSource, NodeBaseline
from queries.models.jobs import Job, JobKind, JobStatus
from queries.services.jobs import job_started

logger = logging.getLogger(__name__)

__all__ = ["NotCancellable", "baseline_enqueue", "baseline_job_cancel", "run_baseline_job"]


def window_text(start: datetime, end: datetime) -> str:
    return f"{start.astimezone(UTC):%Y-%m-%dT%H:%MZ} → {end.astimezone(UTC):%Y-%m-%dT%H:%MZ}"


def baseline_enqueue(
    *, project: Project, start: datetime, hours: float, step_s: int, started_by: str, send: bool = True
) -> Job:
    """Record a queued baseline job; the runner sends it to the default queue once the row is committed
    (``send=False``: recorded only, for ``run_now`` in this process)."""
    end = start + timedelta(hours=hours)
    with transaction.atomic():
        job = job_started(
            project=project,
            kind=JobKind.BASELINE,
            subject=window_text(start, end),
            started_by=started_by,
            window=(start, end),
            queued=True,
        )
        job.detail = {"start": start.isoformat(), "hours": hours, "step_s": step_s}
        job.save(update_fields=["detail"])
        if send:
            enqueue(job)
    return job


def run_baseline_job(ctx: JobContext) -> None:
    """The baseline kind's body: simulate the job's window; progress to the job, cancel between chunks."""
    from queries.importer.baseline_window import BaselineError, SimulationCancelled, simulate_baseline_window

    job = ctx.job
    project = Project.objects.get(pk=job.project_id)
    try:
        summary = simulate_baseline_window(
            project=project,
            start=datetime.fromisoformat(job.detail["start"]),
            hours=float(job.detail["hours"]),
            step_s=int(job.detail["step_s"]),
            progress=lambda fraction: ctx.progress(fraction, f"{fraction * 100:.0f} % of the window simulated"),
            should_stop=ctx.should_stop,
        )
    except SimulationCancelled as exc:
        raise JobCancelled(str(exc)) from exc
    except BaselineError as exc:
        raise JobFailed("BASELINE_FAILED", str(exc)) from exc
    rows = sum(summary.rows.values())
    ctx.succeed(rows=rows, detail={**job.detail, "instants": summary.instants, "seconds": summary.seconds})


def baseline_job_cancel(*, job_id: int, actor: str) -> Job:
    """An operator cancels a queued or running baseline simulation (``simulate_baseline --cancel``, the
    Jobs admin action): a queued one is marked cancelled at once and never starts; a running one stops
    within one of EPANET's time steps and rolls back, leaving the previous baseline unchanged (the runner marks the job
    cancelled then). Nothing of the window is written either way. ``NotCancellable`` otherwise."""
    job = Job.objects.filter(pk=job_id, kind=JobKind.BASELINE).first()
    if job is None:
        raise NotCancellable(f"There is no baseline simulation job {job_id}.")
    if job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
        raise NotCancellable(f"Baseline job {job_id} is {job.status}; only a queued or running one can be cancelled.")
    was_running = job.status == JobStatus.RUNNING
    job = request_cancel(job, actor=actor)
    logger.info("baseline job %s cancelled by %s", job.pk, actor)
    if was_running:  # the worker may already have stopped when the job is read back
        stopped = " It has stopped; the previous baseline is unchanged." if job.status == JobStatus.CANCELLED else ""
        requested = (
            f"Cancellation requested by {actor[:100]}; it stops within one of EPANET's time steps and writes nothing."
        )
        job.message = requested + stopped
    return job


def workers_answering(timeout: float = 2.0) -> bool:
    """Whether any Celery worker answers a ping within ``timeout`` seconds."""
    from tjwater.celery import app

    try:
        return bool(app.control.ping(timeout=timeout))
    except (OSError, redis.RedisError):
        return False


# --- the rolling baseline -----------------------------------------------------------------------------


@dataclass
class RollingResult:
    simulated: list[str] = field(default_factory=list)
    skipped_busy: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def missing_windows(project: Project, lo: datetime, hi: datetime, step_s: int) -> list[tuple[datetime, datetime]]:
    """The parts of ``[lo, hi]`` (on the ``step_s`` grid) where the project's baseline has no instant,
    judged on one reference node (every node of a run has every instant): one indexed range read."""
    ref = (
        NodeBaseline.objects.filter(project_id=project.pk)
        .order_by("element_type", "element_id")
        .values_list("element_type", "element_id")[:1]
    )
    times: list[datetime] = []
    if ref:
        etype, eid = ref[0]
        times = list(
            NodeBaseline.objects.filter(
                project_id=project.pk, element_type=etype, element_id=eid, time__gte=lo, time__lte=hi
            )
            .order_by("time")
            .values_list("time", flat=True)
        )
    step = timedelta(seconds=step_s)
    gaps: list[tuple[datetime, datetime]] = []
    cursor = lo
    for t in times:
        if t - cursor > step / 2:
            gaps.append((cursor, t))  # [cursor, t): t itself is covered
        cursor = max(cursor, t + step)
    if cursor <= hi:
        gaps.append((cursor, hi + step))
    # Simulate whole steps: from the first missing instant to the instant before the next covered one.
    return [(a, b - step) if b - step > a else (a, a + step) for a, b in gaps]


def rolling_baseline(*, now: datetime | None = None) -> RollingResult:
    """Keep every project's baseline covering ``[now − TJWATER_BASELINE_PAST_DAYS, now + 1 day]``,
    simulating only the missing parts, one project at a time; a project whose simulation is already
    running (its lock is held) is skipped this round."""
    from queries.importer.baseline_window import BaselineError, SimulationBusy, simulate_baseline_window
    from queries.services.jobs import job_failed, job_finished

    now = now or datetime.now(UTC)
    step_s: int = settings.TJWATER_BASELINE_STEP_S

    def grid(t: datetime) -> datetime:
        return datetime.fromtimestamp(int(t.timestamp()) // step_s * step_s, UTC)

    lo = grid(now - timedelta(days=settings.TJWATER_BASELINE_PAST_DAYS))
    hi = grid(now + timedelta(days=1))  # the instant holding at now + 1 day
    result = RollingResult()
    project_ids = NetworkSource.objects.order_by("project_id").values_list("project_id", flat=True).distinct()
    for project in Project.objects.filter(pk__in=list(project_ids)).order_by("pk"):
        for start, end in missing_windows(project, lo, hi, step_s):
            hours = (end - start).total_seconds() / 3600
            job = job_started(
                project=project, kind=JobKind.BASELINE, subject=window_text(start, end), started_by="rolling baseline",
                window=(start, end),
            )  # fmt: skip
            try:
                summary = simulate_baseline_window(
                    project=project, start=start, hours=hours, step_s=step_s, wait_for_lock=False
                )
            except SimulationBusy as exc:
                job_failed(job, str(exc) + " This window is left for the next round.", cancelled=True)
                result.skipped_busy.append(project.slug)
                break
            except BaselineError as exc:
                job_failed(job, str(exc))
                result.failed.append(project.slug)
                break
            job_finished(job, rows=sum(summary.rows.values()), detail={"instants": summary.instants})
            result.simulated.append(f"{project.slug} {window_text(start, end)}")
    return result
