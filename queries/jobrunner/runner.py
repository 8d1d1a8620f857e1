"""The job runner: one state machine, one Celery task and one cancel for every kind (``registry``).

A job is a ``queries.models.jobs.Job`` row. ``enqueue`` sends the one task (``queries.run_job``, by name,
so services never import tasks) once the row is committed (``transaction.on_commit``), to its kind's
queue with its kind's time limits. ``run_job`` moves it ``queued → running → succeeded | failed |
cancelled``: every change goes through ``transition`` (one conditional update under a row lock, with the
kind's ``on_state`` hook in the same transaction), so a job never leaves a final state and two workers
never both run it. A kind's function gets a ``JobContext``: ``progress`` (0–1 and a one-line message,
also the heartbeat the reaper reads), ``should_stop``/``stop_if_asked`` (the cancel key) and ``succeed``.
``run_now`` runs a job in the caller's process, where a command may listen to every progress report (its
terminal progress bar) and take what the kind hands over (``JobContext.hand_over``: its summary, or the
error it refused its input with) to print it as it always has.

Faults: a worker killed mid-job leaves it ``running``; its task is redelivered (acks late) and the
redelivery ends it ``failed`` with ``WORKER_LOST``, and ``reap`` (beat, every minute) ends what no
redelivery reaches: silent for ``SILENT_S`` (``WORKER_LOST``), past its hard limit (``TIME_LIMIT``), queued
for ``QUEUED_EXPIRY_S`` (``EXPIRED``). A failure is a code and a sentence, never a traceback.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import redis
from billiard.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction

from queries.jobrunner.memory import memory_allowance
from queries.jobrunner.registry import find_spec, kind_spec
from queries.models.jobs import Job, JobStatus

logger = logging.getLogger(__name__)

TASK_NAME = "queries.run_job"
CANCEL_KEY = "tjwater:job:cancel:{}"
FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
#: A running job that wrote no progress for this long has lost its worker.
SILENT_S = 15 * 60
#: A queued job no worker took within this long is not run any more.
QUEUED_EXPIRY_S = 6 * 3600
#: Grace after a job's hard time limit before the reaper ends it.
LIMIT_GRACE_S = 60
#: Progress is written at most this often (the last write of a job always lands).
PROGRESS_EVERY_S = 0.5
#: The cancel key is read at most this often by ``should_stop``.
CANCEL_POLL_S = 0.2

NOTHING_WRITTEN = "nothing was written"


class JobCancelled(Exception):
    """Raised inside a job when its cancellation was asked for (``JobContext.stop_if_asked``)."""


class JobFailed(Exception):
    """A job's own failure, worded for its users: ``code`` (``EPANET_110``, ``PERMISSION_REVOKED``, …)
    and a sentence. A kind that counted its input before refusing it (an import) also gives what the
    failed job keeps: ``rows`` read, ``rejects`` and the first ``reject_lines``."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        rows: int | None = None,
        rejects: int = 0,
        reject_lines: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.rows = rows
        self.rejects = rejects
        self.reject_lines = list(reject_lines or [])


class NotCancellable(Exception):
    """The job is not queued or running (the message says what it is)."""


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _now() -> datetime:
    return datetime.now(UTC)


def transition(job_id: int, status: str, *, only_from: frozenset[str] | None = None, **fields: Any) -> bool:
    """Move job ``job_id`` to ``status`` with ``fields``, unless it is final already (or not in
    ``only_from``). The row is locked while the kind's ``on_state`` hook runs in the same transaction.
    Returns whether the job changed."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in FINAL or (only_from is not None and job.status not in only_from):
            return False
        fields["status"] = status
        if status in FINAL:
            fields.setdefault("finished_at", _now())
            if status == JobStatus.SUCCEEDED:
                fields.setdefault("progress", 1.0)
        Job.objects.filter(pk=job_id).update(**fields)
        for name, value in fields.items():
            setattr(job, name, value)
        hook = kind_spec(job.kind).state_hook()
        if hook is not None:
            hook(job, status)
    return True


class ProgressListener(Protocol):
    """Hears every ``JobContext.progress`` call of a job run in its process (``run_now``), unthrottled:
    the fraction, the message and the figures the kind counted (``samples=…, rejects=…``)."""

    def __call__(self, fraction: float, message: str, /, **counts: int) -> None: ...


@dataclass
class JobContext:
    """What a kind's function gets: its job, progress, the cancel check and ``succeed``; in ``run_now``,
    also its caller's ``listener`` and ``receiver`` (``hand_over``)."""

    job: Job
    done: bool = False
    _written: float = 0.0
    _polled: float = 0.0
    _stop: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    listener: ProgressListener | None = None
    receiver: Callable[[object], None] | None = None

    def progress(self, fraction: float, message: str = "", **counts: int) -> None:
        """Report ``fraction`` (0–1) done with a one-line ``message``; also the job's heartbeat. Written at
        most every ``PROGRESS_EVERY_S``, except a new message (a new phase: a long solve is not shown under
        the phase before it) and the end. An in-process ``listener`` hears every call, with ``counts``
        (never written)."""
        if self.listener is not None:
            self.listener(min(max(float(fraction), 0.0), 1.0), message, **counts)
        now = time.monotonic()
        new_phase = bool(message) and message[:200] != self.job.status_message
        if now - self._written < PROGRESS_EVERY_S and fraction < 1.0 and not new_phase:
            return
        self._written = now
        fraction = min(max(float(fraction), 0.0), 1.0)
        fields: dict[str, Any] = {"progress": fraction, "heartbeat_at": _now()}
        if message:
            fields["status_message"] = message[:200]
        with transaction.atomic():
            if Job.objects.filter(pk=self.job.pk, status=JobStatus.RUNNING).update(**fields):
                self.job.progress = fraction
                self.job.status_message = fields.get("status_message", self.job.status_message)
                hook = kind_spec(self.job.kind).state_hook()
                if hook is not None:
                    hook(self.job, "progress")  # not a change of state: the kind's mirror of progress

    def should_stop(self) -> bool:
        """Whether the job's cancellation was asked for (read from Redis at most every ``CANCEL_POLL_S``)."""
        if self._stop:
            return True
        now = time.monotonic()
        if now - self._polled >= CANCEL_POLL_S:
            self._polled = now
            self._stop = cancel_requested(self.job.pk)
        return self._stop

    def stop_if_asked(self) -> None:
        if self.should_stop():
            raise JobCancelled(f"Cancelled while it ran; {NOTHING_WRITTEN}.")

    def hand_over(self, value: object) -> None:
        """Give ``value`` to the caller of ``run_now`` (a command prints an import's own summary, or the
        error it refused the file with, as it did before it ran on the runner); a no-op on a worker."""
        if self.receiver is not None:
            self.receiver(value)

    def succeed(self, *, rows: int | None = None, detail: dict[str, Any] | None = None, message: str = "") -> bool:
        """End the job ``succeeded`` (call it inside the transaction that writes the job's results)."""
        fields: dict[str, Any] = {"status_message": (message or "Done.")[:200]}
        if rows is not None:
            fields["rows"] = rows
        if detail is not None:
            fields["detail"] = detail
        self.done = transition(self.job.pk, JobStatus.SUCCEEDED, only_from=frozenset({JobStatus.RUNNING}), **fields)
        if not self.done:
            raise JobCancelled(f"The job ended while it ran; {NOTHING_WRITTEN}.")
        return self.done


def cancel_requested(job_id: int) -> bool:
    try:
        return bool(_redis().exists(CANCEL_KEY.format(job_id)))
    except redis.RedisError:
        return False  # Redis down: the job runs on; the reaper and time limits still bound it


def enqueue(job: Job, *, soft_limit_s: int | None = None, hard_limit_s: int | None = None) -> Job:
    """Send ``job`` (a queued row) to its kind's queue once the row is committed, with its time limits."""
    spec = kind_spec(job.kind)
    soft = soft_limit_s or spec.soft_limit_s
    hard = max(hard_limit_s or spec.hard_limit_s, soft)
    job.task_id = uuid.uuid4().hex
    job.time_limit_s = hard
    Job.objects.filter(pk=job.pk).update(task_id=job.task_id, time_limit_s=hard)
    task_id, job_id = job.task_id, job.pk

    def send() -> None:
        from tjwater.celery import app  # the Celery app, not a task: sent by the task's name

        app.send_task(
            TASK_NAME,
            args=(job_id,),
            task_id=task_id,
            queue=spec.queue,
            soft_time_limit=soft,
            time_limit=hard,
            expires=QUEUED_EXPIRY_S,
        )

    transaction.on_commit(send)
    return job


def usable_connection() -> None:
    """Leave this thread's database connection fit for the job's end and for the next job. A time limit is
    a signal raised wherever the worker is: inside a statement (psycopg then refuses the connection's next
    one: "another command is already in progress") or inside Django's own transaction bookkeeping, which
    it leaves "in an atomic block" with its connection closed, so that every later job of the worker is
    refused ("Cannot open a new connection in an atomic block") — both seen by ``make bench-analysis``
    when a run's limit struck inside its COPY. Such a connection and its transaction state are dropped;
    the next statement opens a new connection. A caller's own open transaction is left alone."""
    from django.db import connection

    if connection.in_atomic_block and connection.closed_in_transaction:
        connection.connection = None
        connection.atomic_blocks = []
        connection.savepoint_ids = []
        connection.in_atomic_block = False
        connection.needs_rollback = False
        connection.closed_in_transaction = False
        connection.commit_on_exit = True
    elif not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


def _time_limit_struck(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, the soft time limit (a limit that strikes inside
    psycopg comes out as the driver's error)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, SoftTimeLimitExceeded):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def run_job(
    job_id: int,
    *,
    on_progress: ProgressListener | None = None,
    on_result: Callable[[object], None] | None = None,
) -> dict[str, Any]:
    """Run job ``job_id`` by its kind (the Celery task's body, and ``run_now``'s, which passes its
    in-process ``on_progress`` listener and ``on_result`` receiver to the kind's ``JobContext``)."""
    usable_connection()
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return {"status": "missing"}
    if job.status in FINAL:
        return {"status": job.status}
    if job.status == JobStatus.RUNNING:
        beat = job.heartbeat_at or job.started_at
        if beat is not None and _now() - beat < timedelta(seconds=120):
            return {"status": "running"}  # a duplicate delivery while it runs: leave it to its worker
        transition(
            job.pk, JobStatus.FAILED, error_code="WORKER_LOST",
            message=f"The worker running this job stopped before it finished; {NOTHING_WRITTEN}. Submit it again.",
        )  # fmt: skip
        return {"status": JobStatus.FAILED, "code": "WORKER_LOST"}
    if cancel_requested(job.pk):
        transition(job.pk, JobStatus.CANCELLED, message=f"Cancelled before it started; {NOTHING_WRITTEN}.")
        return {"status": JobStatus.CANCELLED}
    now = _now()
    started = transition(
        job.pk, JobStatus.RUNNING, only_from=frozenset({JobStatus.QUEUED}),
        started_at=now, heartbeat_at=now, progress=0.0, status_message="Started.",
    )  # fmt: skip
    if not started:
        return {"status": Job.objects.get(pk=job.pk).status}
    job.refresh_from_db()
    ctx = JobContext(job, listener=on_progress, receiver=on_result)
    outcome: dict[str, Any]
    try:
        spec = kind_spec(job.kind)
        with memory_allowance(spec.memory_limit_mb):
            spec.runner()(ctx)
        if not ctx.done:
            ctx.succeed()
        outcome = {"status": JobStatus.SUCCEEDED}
    except JobCancelled as exc:
        transition(job.pk, JobStatus.CANCELLED, message=str(exc), status_message="Cancelled.")
        outcome = {"status": JobStatus.CANCELLED}
    except JobFailed as exc:
        transition(
            job.pk, JobStatus.FAILED, error_code=exc.code[:32], message=exc.message[:2000],
            rows=exc.rows, rejects=exc.rejects, reject_lines=exc.reject_lines[:20],
        )  # fmt: skip
        outcome = {"status": JobStatus.FAILED, "code": exc.code}
    except SoftTimeLimitExceeded:
        usable_connection()
        _fail(job, "TIME_LIMIT", f"The job ran past its time limit ({job.time_limit_s or '?'} s) and was stopped")
        outcome = {"status": JobStatus.FAILED, "code": "TIME_LIMIT"}
    except MemoryError:
        usable_connection()
        allowed = find_spec(job.kind)
        limit = f" ({allowed.memory_limit_mb} MiB)" if allowed is not None and allowed.memory_limit_mb else ""
        _fail(job, "MEMORY_LIMIT", f"The job ran out of the memory it may use{limit} and was stopped")
        outcome = {"status": JobStatus.FAILED, "code": "MEMORY_LIMIT"}
    except Exception as exc:
        usable_connection()
        if _time_limit_struck(exc):
            _fail(job, "TIME_LIMIT", f"The job ran past its time limit ({job.time_limit_s or '?'} s) and was stopped")
            return {"status": JobStatus.FAILED, "code": "TIME_LIMIT"}
        logger.exception("job %s (%s) stopped on an internal error", job.pk, job.kind)
        _fail(job, "INTERNAL", "The job stopped on an internal error (the worker's log has it)")
        outcome = {"status": JobStatus.FAILED, "code": "INTERNAL"}
    return outcome


def _fail(job: Job, code: str, sentence: str) -> None:
    transition(job.pk, JobStatus.FAILED, error_code=code, message=f"{sentence}; {NOTHING_WRITTEN}.")


def run_now(
    job: Job,
    *,
    on_progress: ProgressListener | None = None,
    on_result: Callable[[object], None] | None = None,
) -> Job:
    """Run ``job`` in this process, now (commands' ``--sync``, the imports): the same runner as a
    worker's. ``on_progress`` hears every progress report (a terminal's progress bar); ``on_result``
    gets what the kind hands over (``JobContext.hand_over``)."""
    run_job(job.pk, on_progress=on_progress, on_result=on_result)
    job.refresh_from_db()
    return job


def request_cancel(job: Job, *, actor: str) -> Job:
    """Cancel a queued or running job: a queued one ends ``cancelled`` at once and never starts; a running
    one stops at its next ``should_stop`` and writes nothing. ``NotCancellable`` otherwise."""
    if job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
        raise NotCancellable(f"Job {job.pk} is {job.status}; only a queued or running one can be cancelled.")
    try:
        _redis().set(CANCEL_KEY.format(job.pk), "1", ex=86400)
    except redis.RedisError:
        if job.status == JobStatus.RUNNING:
            raise NotCancellable(f"Job {job.pk} is running and Redis does not answer: try again.") from None
    who = actor[:100]
    if transition(
        job.pk, JobStatus.CANCELLED, only_from=frozenset({JobStatus.QUEUED}),
        message=f"Cancelled by {who} before it started; {NOTHING_WRITTEN}.", status_message="Cancelled.",
    ):  # fmt: skip
        if job.task_id:
            from tjwater.celery import app

            app.control.revoke(job.task_id)
    else:
        Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            status_message=f"Cancellation requested by {who}; it stops within seconds and writes nothing."[:200]
        )
    job.refresh_from_db()
    return job


def reap(now: datetime | None = None) -> list[int]:
    """End the jobs no worker will end (beat, every minute); returns their ids."""
    now = now or _now()
    ended: list[int] = []
    running = Job.objects.filter(status=JobStatus.RUNNING).only("pk", "started_at", "heartbeat_at", "time_limit_s")
    for job in running:
        beat = job.heartbeat_at or job.started_at or now
        if (
            job.time_limit_s
            and job.started_at
            and now > job.started_at + timedelta(seconds=job.time_limit_s + LIMIT_GRACE_S)
        ):
            code, why = "TIME_LIMIT", f"The job ran past its time limit ({job.time_limit_s} s) and was stopped"
        elif now - beat > timedelta(seconds=SILENT_S):
            code, why = "WORKER_LOST", f"The job's worker went silent for {SILENT_S // 60} minutes"
        else:
            continue
        if transition(job.pk, JobStatus.FAILED, only_from=frozenset({JobStatus.RUNNING}), error_code=code,
                      message=f"{why}; {NOTHING_WRITTEN}."):  # fmt: skip
            ended.append(job.pk)
    stale = Job.objects.filter(status=JobStatus.QUEUED, created_at__lt=now - timedelta(seconds=QUEUED_EXPIRY_S))
    for job_id in stale.values_list("pk", flat=True):
        if transition(
            job_id, JobStatus.FAILED, only_from=frozenset({JobStatus.QUEUED}), error_code="EXPIRED",
            message=f"No worker took the job within {QUEUED_EXPIRY_S // 3600} h; {NOTHING_WRITTEN}.",
        ):  # fmt: skip
            ended.append(job_id)
    return ended
