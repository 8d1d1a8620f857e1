"""``manage.py import_scada_devices FILE.csv --project SLUG [--crs EPSG:NNNN]``: a project's SCADA
devices from a CSV file (``queries.importer.scada_devices`` describes the columns), as a ``scada_devices``
job of the job runner run in this process (``queries.services.scada_jobs``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.scada_devices import DeviceImportSummary, ScadaImportError
from queries.jobrunner.runner import run_now
from queries.models.jobs import JobKind, JobStatus
from queries.services.scada_jobs import scada_job


class Command(BaseCommand):
    help = (
        "Create or update a project's SCADA devices from a CSV file with the columns device_id,name,quantity,"
        "unit,element_type,element_id,x,y,sample_interval_s[,accuracy] (all rows or none)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="devices CSV file")
        parser.add_argument("--project", required=True, help="slug of an existing project")
        parser.add_argument("--crs", default="EPSG:4326", help="CRS of x, y (default EPSG:4326, lon/lat)")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        path = Path(options["file"])
        job = scada_job(project=project, kind=JobKind.SCADA_DEVICES, path=path, crs=options["crs"])
        handed: list[object] = []
        job = run_now(job, on_result=handed.append)
        summary = handed[-1] if handed else None
        if isinstance(summary, ScadaImportError):
            raise CommandError(str(summary)) from summary
        if job.status != JobStatus.SUCCEEDED or not isinstance(summary, DeviceImportSummary):
            raise CommandError(f"{path.name}: {job.message}")  # cancelled, or stopped on an internal error
        self.stdout.write(
            f"devices of {project.slug}: {summary.created} created, {summary.updated} updated, "
            f"{summary.unchanged} unchanged"
        )
