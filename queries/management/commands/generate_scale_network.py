"""``manage.py generate_scale_network --tiles N --project SLUG``: a tiled Net6 network for benchmarks."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.demo.scale import generate_scale_network
from queries.importer.epanet import NetworkImportError


class Command(BaseCommand):
    help = (
        "Replace a project's network with WNTR's Net6 tiled N×N side by side (10×10 ≈ 336k nodes, 389k links), "
        "with model baseline and SCADA readings for every tile. Creates the project if it does not exist."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tiles", type=int, required=True, help="tiles per side (N×N tiles)")
        parser.add_argument("--project", required=True, help="project slug (created when missing)")
        parser.add_argument("--baseline-hours", type=float, default=24.0)
        parser.add_argument("--step-minutes", type=int, default=60)

    def handle(self, *args: Any, **options: Any) -> None:
        tiles = options["tiles"]
        if not 1 <= tiles <= 40:
            raise CommandError("--tiles must be between 1 and 40")
        project, _ = Project.objects.get_or_create(
            slug=options["project"], defaults={"name": f"Scale benchmark {tiles}x{tiles}"}
        )
        try:
            summary = generate_scale_network(
                project=project,
                tiles=tiles,
                baseline_hours=options["baseline_hours"],
                step_minutes=options["step_minutes"],
            )
        except NetworkImportError as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{k}={v}" for k, v in sorted(summary.counts.items()))
        phases = ", ".join(f"{k}={v:.1f}s" for k, v in summary.phases.items())
        self.stdout.write(f"{project.slug}: {tiles}x{tiles} tiles in {summary.seconds:.1f}s ({phases}): {counts}")
