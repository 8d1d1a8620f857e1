"""``manage.py project_create SLUG [--name NAME] [--timezone Asia/Shanghai] [--units SI|US]``: create an
empty project (audited). Import its network with ``manage.py import_network FILE.inp --project SLUG``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import command_actor
from contexts.models import UnitSystem
from contexts.onboarding import project_create


class Command(BaseCommand):
    help = "Create a project (audited); then import its EPANET network with import_network."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--timezone", default="UTC", help="the utility's IANA time zone (default UTC)")
        parser.add_argument(
            "--units", default=UnitSystem.SI, help="unit system of results: SI (default) or US (psi, gpm, ft, in)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_create(
                slug=options["slug"],
                name=options["name"],
                timezone_name=options["timezone"],
                unit_system=options["units"],
                actor=command_actor(),
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"project created: {project.slug} ({project.timezone}, {project.unit_system} units)")
