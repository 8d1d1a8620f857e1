"""``manage.py project_set_units SLUG --units SI|US``: change the unit system a project's results are
returned in (audited; stored values stay SI)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import command_actor
from contexts.onboarding import project_set_unit_system


class Command(BaseCommand):
    help = "Change a project's unit system (SI or US) for every result from now on (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--units", required=True, help="SI or US")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_set_unit_system(slug=options["slug"], unit_system=options["units"], actor=command_actor())
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"project {project.slug}: results in {project.unit_system} units")
