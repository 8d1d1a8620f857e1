"""Celery tasks of the queries app: the baseline simulation of a window (``queries.simulate_baseline``,
on the default queue, so a plain ``celery -A tjwater worker`` serves it) and the rolling baseline
(``queries.rolling_baseline``, beat). Each takes ids, loads rows and calls one service."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from celery import shared_task

from contexts.models import Project
from queries.importer.baseline_window import BaselineError, SimulationCancelled, simulate_baseline_window
from queries.models.jobs import Job
from queries.services.baseline_jobs import cancelled, rolling_baseline
from queries.services.jobs import job_failed, job_finished, job_running


@shared_task(bind=True, name="queries.simulate_baseline")
def simulate_baseline(self: Any, job_id: int) -> dict[str, Any]:
    """Simulate the window of baseline job ``job_id``; progress goes to the job row and the task state."""
    job = Job.objects.get(pk=job_id)
    project = Project.objects.get(pk=job.project_id)
    task_id = self.request.id or ""
    if cancelled(task_id):
        job_failed(job, "The simulation was cancelled before it started; nothing was written.", cancelled=True)
        return {"status": "cancelled"}
    job_running(job, progress=0.0)

    def progress(fraction: float) -> None:
        job_running(job, progress=fraction)
        self.update_state(state="PROGRESS", meta={"progress": fraction})

    try:
        summary = simulate_baseline_window(
            project=project,
            start=datetime.fromisoformat(job.detail["start"]),
            hours=float(job.detail["hours"]),
            step_s=int(job.detail["step_s"]),
            progress=progress,
            should_stop=lambda: cancelled(task_id),
        )
    except SimulationCancelled as exc:
        job_failed(job, str(exc), cancelled=True)
        return {"status": "cancelled"}
    except BaselineError as exc:
        job_failed(job, str(exc))
        return {"status": "failed", "message": str(exc)}
    rows = sum(summary.rows.values())
    job_finished(job, rows=rows, detail={**job.detail, "instants": summary.instants, "seconds": summary.seconds})
    return {"status": "succeeded", "rows": rows, "instants": summary.instants, "seconds": summary.seconds}


@shared_task(name="queries.rolling_baseline")
def rolling() -> dict[str, list[str]]:
    """Fill what is missing of every project's baseline window (beat)."""
    result = rolling_baseline()
    return {"simulated": result.simulated, "skipped_busy": result.skipped_busy, "failed": result.failed}
