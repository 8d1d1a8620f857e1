"""Celery tasks of the analyses app: the retention of analysis runs (``analyses.purge_expired_runs``,
beat). The runs themselves are jobs of the job runner (``queries.run_job``)."""

from __future__ import annotations

from celery import shared_task

from analyses.retention import purge_expired_runs


@shared_task(name="analyses.purge_expired_runs")
def purge_expired_runs_task() -> dict[str, object]:
    """Purge the finished runs older than their project's retention that no evidence refers to (beat)."""
    return purge_expired_runs().as_dict()
