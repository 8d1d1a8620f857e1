"""``manage.py project_delete SLUG [--including-evidence] [--reason TEXT]``: delete a project and all its
data (audited; its contexts are revoked first; refused while it holds evidence snapshots unless
``--including-evidence``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import command_actor
from contexts.onboarding import project_delete


class Command(BaseCommand):
    help = "Delete a project and all its data (audited; revokes its contexts first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--including-evidence", action="store_true", help="also delete its evidence snapshots")
        parser.add_argument("--reason", default="deleted with manage.py project_delete", help="kept in the audit trail")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            counts = project_delete(
                slug=options["slug"],
                actor=command_actor(),
                reason=options["reason"],
                including_evidence=options["including_evidence"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        details = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in counts.items())
        self.stdout.write(f"project deleted: {options['slug']} ({details})")
