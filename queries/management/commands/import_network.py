"""``manage.py import_network FILE.inp --project SLUG``: import an EPANET network into a project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.epanet import DEFAULT_CENTER, NetworkImportError, import_network


def parse_center(value: str) -> tuple[float, float]:
    try:
        lon_s, lat_s = value.split(",")
        return float(lon_s), float(lat_s)
    except ValueError as exc:
        raise CommandError(f"--center must be LON,LAT in degrees, got {value!r}") from exc


class Command(BaseCommand):
    help = (
        "Import an EPANET .inp network into a project (replacing its network atomically), georeferenced "
        "about --center with --scale metres per drawn unit, and store the simulated model baseline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="EPANET .inp file")
        parser.add_argument("--project", required=True, help="slug of an existing project")
        parser.add_argument("--center", default=f"{DEFAULT_CENTER[0]},{DEFAULT_CENTER[1]}", help="LON,LAT (EPSG:4326)")
        parser.add_argument("--scale", type=float, default=1.0, help="metres per drawn unit (default 1)")
        parser.add_argument("--baseline-hours", type=float, default=24.0, help="simulated hours (0 = no baseline)")
        parser.add_argument("--step-minutes", type=int, default=15, help="baseline reporting step")

    def handle(self, *args: Any, **options: Any) -> None:
        center = parse_center(options["center"])
        if not Path(options["file"]).is_file():
            raise CommandError(f"network file not found: {options['file']}")
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        try:
            summary = import_network(
                project=project,
                inp_path=Path(options["file"]),
                center=center,
                scale=options["scale"],
                baseline_hours=options["baseline_hours"],
                step_minutes=options["step_minutes"],
            )
        except NetworkImportError as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{k}={v}" for k, v in summary.counts.items())
        self.stdout.write(
            f"imported {Path(options['file']).name} into {project.slug} in {summary.seconds:.1f}s: {counts}"
        )
