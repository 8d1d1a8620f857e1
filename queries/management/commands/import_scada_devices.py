"""``manage.py import_scada_devices FILE.csv --project SLUG [--crs EPSG:NNNN]``: a project's SCADA
devices from a CSV file (``queries.importer.scada_devices`` describes the columns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.scada_devices import ScadaImportError, import_scada_devices
from queries.services.jobs import job_failed, job_finished, job_started


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
        job = job_started(project=project, kind="scada_devices", subject=path.name, started_by="manage.py")
        try:
            summary = import_scada_devices(project=project, path=path, crs=options["crs"])
        except ScadaImportError as exc:
            lines = str(exc).splitlines()
            job_failed(job, lines[0], rejects=max(0, len(lines) - 1), reject_lines=lines[1:])
            raise CommandError(str(exc)) from exc
        job_finished(job, rows=summary.created + summary.updated, detail=summary.__dict__)
        self.stdout.write(
            f"devices of {project.slug}: {summary.created} created, {summary.updated} updated, "
            f"{summary.unchanged} unchanged"
        )
