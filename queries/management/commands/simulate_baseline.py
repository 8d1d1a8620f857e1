"""``manage.py simulate_baseline --project SLUG --start ISO8601 --hours N [--step SECONDS] [--wait|--sync]``:
replace a window of the project's model baseline with a fresh simulation, as a job of the job runner on
the default queue (``queries.importer.baseline_window`` has the rules). ``--wait`` follows its progress;
with no worker answering it fails within 10 s and queues nothing. ``--sync`` runs the same job in this
process, with no worker. ``simulate_baseline --cancel JOB_ID`` cancels a queued or running simulation: it
writes nothing (``baseline_job_cancel``)."""

from __future__ import annotations

import getpass
import sys
import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.jobrunner.runner import run_now, transition
from queries.models.jobs import Job, JobStatus
from queries.services.baseline_jobs import NotCancellable, baseline_enqueue, baseline_job_cancel, workers_answering
from queries.timezones import local_instant, project_zone

PING_TIMEOUT_S = 5.0
PICKUP_TIMEOUT_S = 10.0


class Command(BaseCommand):
    help = "Simulate the model baseline of a window (a Celery task on the default queue); --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", help="slug of an existing project (required to simulate)")
        parser.add_argument("--start", help="ISO 8601 start; without an offset, the project's zone")
        parser.add_argument("--hours", type=float, help="length of the window in hours")
        parser.add_argument("--step", type=int, default=900, help="reporting step in seconds (default 900)")
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
        parser.add_argument("--sync", action="store_true", help="run the job in this process (no worker)")
        parser.add_argument(
            "--cancel", type=int, metavar="JOB_ID", help="cancel a queued or running simulation (it writes nothing)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["cancel"] is not None:
            try:
                job = baseline_job_cancel(job_id=options["cancel"], actor=f"manage.py ({getpass.getuser()})")
            except NotCancellable as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"baseline job {job.pk} ({job.subject}): {job.status} — {job.message}")
            return
        missing = [f"--{name}" for name in ("project", "start", "hours") if options[name] is None]
        if missing:
            raise CommandError(f"{', '.join(missing)} required (or --cancel JOB_ID)")
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        try:
            start = datetime.fromisoformat(options["start"])
        except ValueError as exc:
            raise CommandError(f"--start {options['start']!r} is not an ISO 8601 time") from exc
        if start.tzinfo is None:  # the project's wall clock: an ambiguous or skipped time is refused
            try:
                start = local_instant(start, project_zone(project))
            except ValueError as exc:
                raise CommandError(f"--start: {exc}") from exc
        start = start.astimezone(UTC)  # exact arithmetic from here on (an aware local time adds wall hours)
        if options["wait"] and not workers_answering(timeout=PING_TIMEOUT_S):
            raise CommandError(
                f"No Celery worker answered within {PING_TIMEOUT_S:.0f} s, so nothing was queued; start one with "
                "`celery -A tjwater worker` and try again."
            )
        if options["sync"]:
            job = baseline_enqueue(
                project=project, start=start, hours=options["hours"], step_s=options["step"],
                started_by="manage.py", send=False,
            )  # fmt: skip
            self.stdout.write(f"baseline job {job.pk} runs here: {job.subject}")
            job = run_now(job)
            self._ended(job)
            return
        job = baseline_enqueue(
            project=project, start=start, hours=options["hours"], step_s=options["step"], started_by="manage.py"
        )
        self.stdout.write(f"baseline job {job.pk} queued (task {job.task_id}): {job.subject}")
        if not options["wait"]:
            return
        self._follow(job)

    def _ended(self, job: Job) -> None:
        if job.status == JobStatus.SUCCEEDED:
            self.stdout.write(f"baseline of {job.subject} written: {job.rows} rows in {job.duration_s or 0:.1f}s")
            return
        raise CommandError(f"baseline job {job.pk} {job.status}: {job.message}")

    def _follow(self, job: Job) -> None:
        t0 = time.monotonic()
        shown = -1.0
        while True:
            job.refresh_from_db()
            if job.status == JobStatus.QUEUED and time.monotonic() - t0 > PICKUP_TIMEOUT_S:
                # Final now: a worker that takes the task later finds it ended and runs nothing.
                transition(
                    job.pk, JobStatus.FAILED, only_from=frozenset({JobStatus.QUEUED}), error_code="NO_WORKER",
                    message="No worker picked the simulation up within 10 s; it was cancelled.",
                )  # fmt: skip
                raise CommandError(
                    f"No Celery worker picked job {job.pk} up within {PICKUP_TIMEOUT_S:.0f} s; it was cancelled."
                )
            if job.progress is not None and job.progress != shown:
                shown = job.progress
                sys.stderr.write(f"\r  {shown * 100:5.1f} % simulated ")
                sys.stderr.flush()
            if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
                sys.stderr.write("\n")
                self._ended(job)
                return
            time.sleep(0.5)
