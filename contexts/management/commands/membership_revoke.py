"""``manage.py membership_revoke --project SLUG --sub SUB --reason "…"``: revoke a principal's membership
(audited); its contexts stop on their next call."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import add_principal_arguments, command_actor, issuer_of
from contexts.onboarding import membership_revoke


class Command(BaseCommand):
    help = "Revoke a principal's membership of a project (its contexts stop on their next call)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_principal_arguments(parser)
        parser.add_argument("--reason", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            membership_revoke(
                project_slug=options["project"],
                issuer=issuer_of(options),
                subject=options["sub"],
                reason=options["reason"],
                actor=command_actor(),
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"membership revoked: {options['sub']} @ {options['project']}")
