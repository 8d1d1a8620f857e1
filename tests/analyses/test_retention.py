"""Retention of analysis runs (issue 42 item 8): finished runs older than their project's retention are
purged with their series, results and job, in bounded batches, unless evidence refers to them; runs
without a job (the demo's) stay. Against real PostgreSQL, Redis and EPANET."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from analyses.retention import purge_expired_runs
from analyses.submit import Submitter, submit
from analyses.tasks import purge_expired_runs_task
from contexts.models import Project, ProjectCompute
from evidence.models import EvidenceSnapshot
from queries.jobrunner.runner import run_now
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun, Job
from tests.analyses.test_submit import PARAMS
from tests.contexts.factories import leased_run

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC)


def finished_run(project: Project, who: Submitter, hour: int, *, age_days: float) -> AnalysisRun:
    """A succeeded 1-hour burst run (its own start hour: its own question), created ``age_days`` ago."""
    params = {**PARAMS["burst"], "start": f"2026-04-01T{hour:02d}:00:00Z", "duration_minutes": 60}
    done = submit(project=project, kind="burst", params=params, who=who, send=False)
    run_now(done.job)
    AnalysisRun.objects.filter(pk=done.run.pk).update(created_at=NOW - timedelta(days=age_days))
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded" and run.cost["series_rows"] > 0
    return run


def rows_of(run: AnalysisRun) -> int:
    return (
        AnalysisNodeSeries.objects.filter(run_id=run.pk).count()
        + AnalysisLinkSeries.objects.filter(run_id=run.pk).count()
        + AnalysisResult.objects.filter(run_id=run.pk).count()
    )


def exists(run: AnalysisRun) -> bool:
    return AnalysisRun.objects.filter(pk=run.pk).exists()


def evidence_of(run: AnalysisRun) -> EvidenceSnapshot:
    """A snapshot of a read of ``run`` in an investigation of its project, as the save links it."""
    investigation = leased_run(Project.objects.get(pk=run.project_id))
    data = {"data": {"run_id": run.run_id}}
    return EvidenceSnapshot.objects.create(
        project_id=run.project_id, task=investigation.task, run=investigation.run, tool="get_analysis_run",
        source="analysis_runs", params={"run_id": run.run_id}, data=data, byte_size=1,
        sha256=hashlib.sha256(b"x").hexdigest(), analysis_run=run, model_version_id=run.model_version_id,
        input_sha256=run.input_sha256,
    )  # fmt: skip


def test_old_runs_go_whole_recent_and_referenced_ones_stay(net3: Project, alice: Submitter) -> None:
    old = finished_run(net3, alice, 1, age_days=31)
    recent = finished_run(net3, alice, 2, age_days=29)
    referenced = finished_run(net3, alice, 3, age_days=40)
    evidence_of(referenced)
    queued = submit(project=net3, kind="burst", params={**PARAMS["burst"], "duration_minutes": 60}, who=alice,
                    send=False).run  # fmt: skip
    AnalysisRun.objects.filter(pk=queued.pk).update(created_at=NOW - timedelta(days=60))
    old_rows, old_job = rows_of(old), old.job_id

    purged = purge_expired_runs(now=NOW)
    assert purged.run_ids == [old.run_id] and purged.jobs == 1 and purged.batches == 1
    assert purged.series_rows + purged.results == old_rows == old.cost["series_rows"] + purged.results
    assert not exists(old) and rows_of(old) == 0 and not Job.objects.filter(pk=old_job).exists()
    assert exists(recent) and exists(referenced) and exists(queued)  # not finished: never purged
    assert rows_of(referenced) > 0 and Job.objects.filter(pk=referenced.job_id).exists()
    assert purge_expired_runs(now=NOW).run_ids == []  # idempotent


def test_the_projects_retention_decides(net3: Project, alice: Submitter) -> None:
    run = finished_run(net3, alice, 1, age_days=8)
    assert purge_expired_runs(now=NOW).run_ids == []
    ProjectCompute.objects.filter(project=net3).update(retention_days=7)
    assert purge_expired_runs(now=NOW).run_ids == [run.run_id]


def test_runs_without_a_job_stay(net3: Project, alice: Submitter) -> None:
    """The demo's seeded runs have no job and are dated in its past: never purged from under the demo."""
    run = finished_run(net3, alice, 1, age_days=90)
    AnalysisRun.objects.filter(pk=run.pk).update(job=None)
    assert purge_expired_runs(now=NOW).run_ids == [] and exists(run)


def test_batches_are_bounded_oldest_first(net3: Project, alice: Submitter) -> None:
    runs = [finished_run(net3, alice, hour, age_days=40 - hour) for hour in (1, 2, 3)]
    first = purge_expired_runs(now=NOW, batch_size=1, max_batches=2)
    assert first.run_ids == [runs[0].run_id, runs[1].run_id] and first.batches == 2
    assert exists(runs[2])
    # A batch holds as many series rows as ``batch_rows`` allows, but always one run.
    more = [finished_run(net3, alice, hour, age_days=35) for hour in (4, 5)]
    by_rows = purge_expired_runs(now=NOW, batch_rows=1, max_batches=1)
    assert by_rows.run_ids == [runs[2].run_id] and by_rows.batches == 1
    assert all(exists(r) for r in more)
    assert purge_expired_runs(now=NOW, batch_rows=1).batches == 2


def test_a_dry_run_counts_and_deletes_nothing(net3: Project, alice: Submitter) -> None:
    run = finished_run(net3, alice, 1, age_days=31)
    before = rows_of(run)
    out = StringIO()
    call_command("analysis_retention", "--dry-run", stdout=out)
    assert out.getvalue().startswith(f"would purge 1 analysis run(s): {run.cost['series_rows']} series rows")
    assert exists(run) and rows_of(run) == before
    out = StringIO()
    call_command("analysis_retention", stdout=out)
    assert out.getvalue().startswith("purged 1 analysis run(s)") and not exists(run)


def test_the_database_refuses_deleting_a_run_evidence_names(net3: Project, alice: Submitter) -> None:
    run = finished_run(net3, alice, 1, age_days=1)
    evidence_of(run)
    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the check a commit makes, made now
        AnalysisRun.objects.filter(pk=run.pk).delete()


def test_the_beat_runs_the_same_purge_hourly(net3: Project, alice: Submitter) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["analyses-purge-expired-runs"]
    assert entry["task"] == purge_expired_runs_task.name == "analyses.purge_expired_runs"
    run = finished_run(net3, alice, 1, age_days=31)
    assert purge_expired_runs_task() == {"dry_run": False, "runs": 1, "series_rows": run.cost["series_rows"],
                                         "results": 3, "jobs": 1, "batches": 1}  # fmt: skip


def test_a_deletion_that_takes_the_evidence_with_it_commits(net3: Project, alice: Submitter) -> None:
    """As the demo's rebuild does: its runs first, then its tasks and with them their evidence, in one
    transaction — the deferred foreign key is checked once both are gone."""
    run = finished_run(net3, alice, 1, age_days=1)
    snapshot = evidence_of(run)
    with transaction.atomic():
        AnalysisRun.objects.filter(pk=run.pk).delete()
        snapshot.task.delete()
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the commit's check, made now: nothing is left
    assert not exists(run) and not EvidenceSnapshot.objects.filter(pk=snapshot.pk).exists()
