"""``manage.py run_analysis KIND --project P --params FILE.json [--wait | --sync]`` submits an analysis run
through the same service as MCP and REST (estimate, caps and idempotency included) and prints its job
answer; ``--wait`` follows a worker's progress on the ``analysis`` queue, ``--sync`` runs it in this process.
``--as ISSUER SUBJECT`` submits as that principal (their membership must hold ``simulation.run``); without
it the run is an operator's. ``run_analysis --cancel RUN_ID --project P`` cancels a queued or running run
(an operator's cancel: any run of the project)."""

from __future__ import annotations

import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.kinds import KIND_NAMES
from analyses.submit import Submitter, cancel, submit
from contexts.errors import ApplicationError
from contexts.models import Membership, Permission, Project
from queries.jobrunner.runner import run_now
from queries.models import AnalysisRun, JobStatus

FINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
PICKUP_TIMEOUT_S = 30.0


class Command(BaseCommand):
    help = "Submit an analysis run (burst, valve_isolation, flushing, contaminant); --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", nargs="?", choices=KIND_NAMES, help="the analysis kind")
        parser.add_argument("--project", required=True, help="slug of the project")
        parser.add_argument("--params", type=Path, help="a JSON file of the kind's inputs (project units)")
        parser.add_argument("--wait", action="store_true", help="follow the run on a worker until it ends")
        parser.add_argument("--sync", action="store_true", help="run it in this process (no worker)")
        parser.add_argument(
            "--as",
            nargs=2,
            metavar=("ISSUER", "SUBJECT"),
            dest="principal",
            help="submit as this principal (their membership needs simulation.run)",
        )
        parser.add_argument("--cancel", metavar="RUN_ID", help="cancel a queued or running run of the project")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r}")
        actor = f"manage.py ({getpass.getuser()})"
        if options["cancel"]:
            try:
                run = cancel(project=project, run_id=options["cancel"], who=Submitter(actor=actor), operator=True)
            except ApplicationError as exc:
                raise CommandError(f"{exc.code}: {exc.message}") from exc
            self.stdout.write(f"run {run.run_id}: {run.status} — {run.status_message or run.error_message}")
            return
        if options["kind"] is None or options["params"] is None:
            raise CommandError("KIND and --params FILE.json are required (or --cancel RUN_ID)")
        params = self._params(options["params"])
        who = self._submitter(project, options["principal"], actor)
        try:
            if options["sync"]:
                submission = submit(project=project, kind=options["kind"], params=params, who=who, send=False)
            else:
                submission = submit(project=project, kind=options["kind"], params=params, who=who)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(json.dumps(submission.answer(), sort_keys=True))
        run = submission.run
        if options["sync"] and submission.created:
            run_now(submission.job)
        elif options["wait"]:
            self._follow(run)
        else:
            return
        run.refresh_from_db()
        self._ended(run)

    def _params(self, path: Path) -> dict[str, Any]:
        try:
            params = json.loads(path.read_text())
        except OSError as exc:
            raise CommandError(f"--params {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise CommandError(f"--params {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
        if not isinstance(params, dict):
            raise CommandError(f"--params {path}: the inputs are a JSON object, not {type(params).__name__}")
        return params

    def _submitter(self, project: Project, principal: list[str] | None, actor: str) -> Submitter:
        if principal is None:
            return Submitter(actor=actor)
        issuer, subject = principal
        membership = Membership.objects.filter(
            project=project, principal__issuer=issuer, principal__subject=subject, revoked_at=None
        ).first()
        if membership is None or Permission.SIMULATION_RUN.value not in membership.permissions:
            raise CommandError(f"{subject} ({issuer}) holds no simulation.run permission in {project.slug}")
        return Submitter(
            actor=f"{actor} as {subject}",
            principal_id=membership.principal_id,
            permissions=frozenset(membership.permissions),
            purpose="command",
        )

    def _follow(self, run: AnalysisRun) -> None:
        t0, shown = time.monotonic(), ""
        while True:
            run.refresh_from_db()
            if run.status == JobStatus.QUEUED and time.monotonic() - t0 > PICKUP_TIMEOUT_S:
                raise CommandError(
                    f"No worker of the analysis queue took run {run.run_id} within {PICKUP_TIMEOUT_S:.0f} s; it "
                    f"stays queued (start one: celery -A tjwater worker -Q analysis, or cancel it with "
                    f"--cancel {run.run_id})."
                )
            line = f"{(run.progress or 0) * 100:5.1f} % {run.status_message}"
            if line != shown:
                shown = line
                sys.stderr.write(f"\r  {line[:100]:<100}")
                sys.stderr.flush()
            if run.status in FINAL:
                sys.stderr.write("\n")
                return
            time.sleep(0.25)

    def _ended(self, run: AnalysisRun) -> None:
        if run.status != JobStatus.SUCCEEDED:
            raise CommandError(f"run {run.run_id} {run.status}: {run.error_code} {run.error_message}")
        cost = run.cost
        self.stdout.write(
            f"run {run.run_id} succeeded: {run.results.count()} results, {cost.get('series_rows', 0)} series rows, "
            f"{cost.get('cpu_seconds', 0):.2f} CPU s (estimated {run.estimate.get('cpu_seconds', 0):.2f})"
        )
