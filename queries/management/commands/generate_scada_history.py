"""``manage.py generate_scada_history --project SLUG --devices N --days D``: synthetic SCADA history at
utility scale for measurements (``queries.demo.scada_history``); never part of the demo."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.demo.scada_history import generate_scada_history
from queries.importer.scada_devices import ScadaImportError


class Command(BaseCommand):
    help = (
        "Fill a project with N generated pressure devices and D days of their readings, written by "
        "PostgreSQL (generate_series), one committed day at a time; days already present are skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="slug of an existing project with a network")
        parser.add_argument("--devices", type=int, required=True)
        parser.add_argument("--days", type=int, required=True)
        parser.add_argument("--start", default="2024-01-01T00:00:00Z", help="ISO 8601 with an offset")
        parser.add_argument("--step", type=int, default=300, help="seconds between readings")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r}")
        start = datetime.fromisoformat(options["start"])
        if start.tzinfo is None:
            raise CommandError("--start needs an offset (e.g. 2024-01-01T00:00:00Z)")
        if options["devices"] < 1 or options["days"] < 1 or options["step"] < 1:
            raise CommandError("--devices, --days and --step must be positive")

        def progress(day: int, rows: int, seconds: float) -> None:
            if options["verbosity"] >= 2 or day % 10 == 0:
                self.stderr.write(f"day {day}: {rows:,} rows in {seconds:.0f}s ({rows / max(seconds, 1e-9):,.0f}/s)")

        try:
            summary = generate_scada_history(
                project=project, devices=options["devices"], days=options["days"], start=start,
                step_s=options["step"], progress=progress,
            )  # fmt: skip
        except ScadaImportError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{project.slug}: {summary.devices} devices, {summary.days} day(s) written, {summary.rows:,} rows "
            f"in {summary.seconds:.1f}s"
        )
