"""A worker whose database connection a time limit broke runs its next job (issue 42; ``make
bench-analysis`` saw a run's soft limit strike inside its COPY, and every later job of that worker refused
with "Cannot open a new connection in an atomic block").

The signal cannot be aimed at Django's transaction bookkeeping from a test, so the test leaves the
connection in the state the benchmark's worker had: an atomic block entered and never exited, its
connection closed inside it (real Django calls, an abandoned block). Rows are committed (no test
transaction around it: that is the fault's point) and deleted afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from contexts.models import Project
from queries.jobrunner.registry import JobKindSpec, register
from queries.jobrunner.runner import JobContext, run_job, usable_connection
from queries.models.jobs import Job

HERE = "tests.queries.jobrunner.test_connection_faults"


def kind_counts(ctx: JobContext) -> None:
    ctx.succeed(rows=Job.objects.filter(pk=ctx.job.pk).count())


register(JobKindSpec(name="test_after_fault", label="Test after a fault", run=f"{HERE}.kind_counts"))


@pytest.fixture
def project(django_db_setup: None, django_db_blocker: Any) -> Iterator[Project]:
    with django_db_blocker.unblock():
        made = Project.objects.create(slug="connection-faults", name="Connection faults")
        yield made
        usable_connection()
        Job.objects.filter(project=made).delete()
        made.delete()


def test_the_next_job_runs_on_a_new_connection(project: Project, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock():
        job = Job.objects.create(project=project, kind="test_after_fault", subject="t", status="queued")
        abandoned = transaction.atomic()
        abandoned.__enter__()
        Job.objects.filter(pk=job.pk).count()  # the block's connection in use…
        connection.close()  # …and closed inside it, the block never exited
        with pytest.raises(Exception, match="Cannot open a new connection in an atomic block"):
            Job.objects.filter(pk=job.pk).count()
        assert run_job(job.pk) == {"status": "succeeded"}
        job.refresh_from_db()
        assert (job.status, job.rows) == ("succeeded", 1)
        assert not connection.in_atomic_block


def test_a_callers_open_transaction_is_left_alone(project: Project, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock(), transaction.atomic():
        job = Job.objects.create(project=project, kind="test_after_fault", subject="t", status="queued")
        usable_connection()
        assert connection.in_atomic_block and Job.objects.filter(pk=job.pk).exists()  # same transaction
        Job.objects.filter(pk=job.pk).delete()
