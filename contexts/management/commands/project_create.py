"""``manage.py project_create SLUG [--name NAME]``: create an empty project (audited). Import its network with
``manage.py import_network FILE.inp --project SLUG``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import command_actor
from contexts.onboarding import project_create


class Command(BaseCommand):
    help = "Create a project (audited); then import its EPANET network with import_network."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_create(slug=options["slug"], name=options["name"], actor=command_actor())
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"project created: {project.slug}")
