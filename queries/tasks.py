"""Celery tasks of the queries app: the one task that runs a job of any kind (``queries.run_job``, the
job runner's), the reaper that ends jobs no worker will end (``queries.reap_jobs``, beat), and the rolling
baseline (``queries.rolling_baseline``, beat). Each takes ids, loads rows and calls one service."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from queries.jobrunner.runner import reap, run_job
from queries.services.baseline_jobs import rolling_baseline


@shared_task(name="queries.run_job")
def run_job_task(job_id: int) -> dict[str, Any]:
    """Run job ``job_id`` by its kind (``queries.jobrunner``)."""
    return run_job(job_id)


@shared_task(name="queries.simulate_baseline")
def simulate_baseline(job_id: int) -> dict[str, Any]:
    """The baseline task's old name: messages queued before the job runner still run (as its jobs)."""
    return run_job(job_id)


@shared_task(name="queries.reap_jobs")
def reap_jobs() -> dict[str, list[int]]:
    """End the jobs left running by a dead worker, past their limit, or queued too long (beat)."""
    return {"ended": reap()}


@shared_task(name="queries.rolling_baseline")
def rolling() -> dict[str, list[str]]:
    """Fill what is missing of every project's baseline window (beat)."""
    result = rolling_baseline()
    return {"simulated": result.simulated, "skipped_busy": result.skipped_busy, "failed": result.failed}
