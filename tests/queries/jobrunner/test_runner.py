"""The job runner (issue 42): one state machine, one task body, one cancel and one reaper for every kind,
exercised with kinds registered here against the real database and Redis (the baseline's tests run the
same runner on a real worker: tests/queries/importer/test_baseline_window.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import redis
from billiard.exceptions import SoftTimeLimitExceeded
from django.db import transaction

from contexts.models import Project
from queries.jobrunner.registry import JobKindSpec, kind_label, kind_spec, register
from queries.jobrunner.runner import (
    CANCEL_KEY,
    JobContext,
    JobFailed,
    NotCancellable,
    enqueue,
    reap,
    request_cancel,
    run_job,
    transition,
)
from queries.models.jobs import Job

pytestmark = pytest.mark.django_db
HERE = "tests.queries.jobrunner.test_runner"
CALLS: list[str] = []


def kind_ok(ctx: JobContext) -> None:
    CALLS.append("ok")
    ctx.progress(0.5, "half way")
    ctx.succeed(rows=7, detail={"answer": 42})


def kind_fails(ctx: JobContext) -> None:
    raise JobFailed("EPANET_110", "EPANET could not solve the hydraulics; try PDD.")


def kind_breaks(ctx: JobContext) -> None:
    raise RuntimeError("secret internals /etc/passwd")


def kind_cancels_itself(ctx: JobContext) -> None:
    request_cancel(ctx.job, actor="another process")
    for _ in range(100):
        ctx.stop_if_asked()
    CALLS.append("ran on")  # never reached: the cancel key stops it at once


def kind_phases(ctx: JobContext) -> None:
    """Three reports well within PROGRESS_EVERY_S of each other: what the job's row shows after each."""
    for fraction, message in ((0.1, "Reading the model."), (0.2, "Simulating."), (0.3, "Simulating.")):
        ctx.progress(fraction, message)
        row = Job.objects.get(pk=ctx.job.pk)
        CALLS.append(f"{row.progress} {row.status_message}")


def kind_limit_in_statement(ctx: JobContext) -> None:
    """The shape a soft time limit takes when its signal lands inside a statement: psycopg's error, raised
    while the limit was being handled (as ``make bench-analysis`` saw it in a COPY; the signal itself is
    Celery's prefork pool's, which a test cannot aim at a statement: the exception chain is built here)."""
    try:
        raise SoftTimeLimitExceeded()
    except SoftTimeLimitExceeded as exc:
        raise psycopg.OperationalError("sending query failed: another command is already in progress") from exc


def kind_allocates(ctx: JobContext) -> None:
    CALLS.append(bytearray(400 * 1024 * 1024))  # 400 MiB: past the kind's 64 MiB allowance


for spec in (
    JobKindSpec(name="test_memory", label="Test memory", run=f"{HERE}.kind_allocates", memory_limit_mb=64),
    JobKindSpec(name="test_ok", label="Test kind", run=f"{HERE}.kind_ok"),
    JobKindSpec(name="test_phases", label="Test phases", run=f"{HERE}.kind_phases"),
    JobKindSpec(name="test_fails", label="Test failure", run=f"{HERE}.kind_fails"),
    JobKindSpec(name="test_breaks", label="Test fault", run=f"{HERE}.kind_breaks"),
    JobKindSpec(name="test_cancels", label="Test cancel", run=f"{HERE}.kind_cancels_itself"),
    JobKindSpec(name="test_limit_sql", label="Test limit in SQL", run=f"{HERE}.kind_limit_in_statement"),
):
    register(spec)


@pytest.fixture
def job_of(project: Project):  # type: ignore[no-untyped-def]
    def make(kind: str, **fields: object) -> Job:
        return Job.objects.create(project=project, kind=kind, subject="t", **fields)

    return make


def test_a_kind_runs_to_success_with_its_progress_and_result(job_of, test_redis: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    job = job_of("test_ok")
    assert run_job(job.pk) == {"status": "succeeded"}
    job.refresh_from_db()
    assert (job.status, job.rows, job.detail, job.progress) == ("succeeded", 7, {"answer": 42}, 1.0)
    assert job.started_at and job.finished_at and job.heartbeat_at
    assert run_job(job.pk) == {"status": "succeeded"} and CALLS.count("ok") == 1  # final: never runs twice


def test_a_new_phase_is_shown_at_once_and_the_same_phase_at_most_every_half_second(job_of) -> None:  # type: ignore[no-untyped-def]
    """A phase reported right after the previous one is written (a long solve is never shown as the phase
    before it); more of the same phase within the interval is not."""
    CALLS.clear()
    job = job_of("test_phases")
    run_job(job.pk)
    assert CALLS == ["0.1 Reading the model.", "0.2 Simulating.", "0.2 Simulating."]


def test_failures_are_a_code_and_a_sentence_never_a_traceback(job_of, test_redis: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    failed, broken = job_of("test_fails"), job_of("test_breaks")
    assert run_job(failed.pk) == {"status": "failed", "code": "EPANET_110"}
    assert run_job(broken.pk) == {"status": "failed", "code": "INTERNAL"}
    failed.refresh_from_db()
    broken.refresh_from_db()
    assert failed.message == "EPANET could not solve the hydraulics; try PDD." and failed.error_code == "EPANET_110"
    assert broken.error_code == "INTERNAL" and "nothing was written" in broken.message
    assert "passwd" not in broken.message and "Traceback" not in broken.message


def test_a_cancelled_queued_job_never_starts(job_of, test_redis: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    job = job_of("test_ok", task_id="t-1")
    before = CALLS.count("ok")
    job = request_cancel(job, actor="alice")
    assert job.status == "cancelled" and job.message == "Cancelled by alice before it started; nothing was written."
    assert run_job(job.pk) == {"status": "cancelled"} and CALLS.count("ok") == before
    with pytest.raises(NotCancellable, match="is cancelled; only a queued or running one"):
        request_cancel(job, actor="alice")


def test_a_running_job_stops_at_its_next_check(job_of, test_redis: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    job = job_of("test_cancels")
    assert run_job(job.pk) == {"status": "cancelled"}
    job.refresh_from_db()
    assert job.status == "cancelled" and "nothing was written" in job.message and "ran on" not in CALLS
    assert test_redis.exists(CANCEL_KEY.format(job.pk))


def test_a_redelivered_job_of_a_dead_worker_fails_and_a_duplicate_is_left_alone(job_of) -> None:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    dead = job_of("test_ok", status="running", started_at=now - timedelta(minutes=10),
                  heartbeat_at=now - timedelta(minutes=10))  # fmt: skip
    alive = job_of("test_ok", status="running", started_at=now, heartbeat_at=now)
    assert run_job(dead.pk) == {"status": "failed", "code": "WORKER_LOST"}
    assert run_job(alive.pk) == {"status": "running"}
    alive.refresh_from_db()
    assert alive.status == "running"


def test_the_reaper_ends_what_no_worker_will(job_of) -> None:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    silent = job_of("test_ok", status="running", started_at=now - timedelta(hours=1),
                    heartbeat_at=now - timedelta(minutes=20), time_limit_s=7200)  # fmt: skip
    overdue = job_of("test_ok", status="running", started_at=now - timedelta(minutes=5), heartbeat_at=now,
                     time_limit_s=60)  # fmt: skip
    healthy = job_of("test_ok", status="running", started_at=now, heartbeat_at=now, time_limit_s=600)
    stale = job_of("test_ok")
    Job.objects.filter(pk=stale.pk).update(created_at=now - timedelta(hours=7))
    assert sorted(reap(now)) == sorted([silent.pk, overdue.pk, stale.pk])
    ids = [silent.pk, overdue.pk, stale.pk, healthy.pk]
    codes = dict(Job.objects.filter(pk__in=ids).values_list("pk", "error_code"))
    assert codes == {silent.pk: "WORKER_LOST", overdue.pk: "TIME_LIMIT", stale.pk: "EXPIRED", healthy.pk: ""}
    assert reap(now) == []


def test_a_final_job_never_changes_again(job_of) -> None:  # type: ignore[no-untyped-def]
    job = job_of("test_ok", status="succeeded")
    assert transition(job.pk, "failed", error_code="X") is False
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("succeeded", "")


def test_enqueue_sends_by_name_only_after_commit(job_of, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    from tjwater.celery import app

    sent: list[dict[str, object]] = []

    def capture(name: str, **kwargs: object) -> None:
        sent.append({"name": name, **kwargs})

    original, app.send_task = app.send_task, capture  # type: ignore[method-assign,assignment]
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks, transaction.atomic():
            job = enqueue(job_of("test_ok"), soft_limit_s=30, hard_limit_s=40)
            assert sent == []  # nothing leaves before the row is committed
        for callback in callbacks:
            callback()
    finally:
        app.send_task = original  # type: ignore[method-assign]
    assert sent == [{"name": "queries.run_job", "args": (job.pk,), "task_id": job.task_id, "queue": "celery",
                     "soft_time_limit": 30, "time_limit": 40, "expires": 6 * 3600}]  # fmt: skip
    assert Job.objects.get(pk=job.pk).time_limit_s == 40


def test_kinds_are_checked_in_python_not_by_the_database(job_of) -> None:  # type: ignore[no-untyped-def]
    assert kind_label("baseline") == "Baseline simulation" and kind_label("test_ok") == "Test kind"
    with pytest.raises(KeyError, match="unknown job kind 'nope'"):
        kind_spec("nope")
    with pytest.raises(ValueError, match="1 to 40 characters"):
        JobKindSpec(name="x" * 41, label="too long")
    with pytest.raises(ValueError, match="already registered differently"):
        register(JobKindSpec(name="test_ok", label="Another"))
    assert kind_spec("baseline").queue == "celery"
    assert job_of("leakage_identification").kind == "leakage_identification"  # 22 characters: fits now


def test_a_job_past_its_memory_allowance_ends_memory_limit_and_the_limit_is_lifted(
    job_of, test_redis: redis.Redis
) -> None:  # type: ignore[no-untyped-def]
    # A real RLIMIT_AS on this process while the job runs: the 400 MiB allocation fails inside the job.
    import resource

    before = resource.getrlimit(resource.RLIMIT_AS)
    job = job_of("test_memory")
    assert run_job(job.pk) == {"status": "failed", "code": "MEMORY_LIMIT"}
    job.refresh_from_db()
    assert job.error_code == "MEMORY_LIMIT" and "64 MiB" in job.message and "nothing was written" in job.message
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(400 * 1024 * 1024)) == 400 * 1024 * 1024  # lifted once the job ended


def test_a_time_limit_inside_a_statement_is_a_time_limit(job_of) -> None:  # type: ignore[no-untyped-def]
    job = job_of("test_limit_sql", status="queued", time_limit_s=30)
    assert run_job(job.pk) == {"status": "failed", "code": "TIME_LIMIT"}
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "TIME_LIMIT")
    assert job.message == "The job ran past its time limit (30 s) and was stopped; nothing was written."
