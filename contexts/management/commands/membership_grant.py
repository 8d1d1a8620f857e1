"""``manage.py membership_grant --project SLUG --sub SUB --permissions "webgis.view scada.view"``: grant or change
a principal's permission codes on a project (audited; registers the principal if it never signed in)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import add_principal_arguments, command_actor, issuer_of
from contexts.onboarding import membership_grant


class Command(BaseCommand):
    help = "Grant (or change) a principal's permission codes on a project."

    def add_arguments(self, parser: CommandParser) -> None:
        add_principal_arguments(parser)
        parser.add_argument("--permissions", required=True, help="space-separated permission codes")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--service", action="store_true", help="the principal is a service identity")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            membership = membership_grant(
                project_slug=options["project"],
                issuer=issuer_of(options),
                subject=options["sub"],
                permissions=options["permissions"].split(),
                display_name=options["display_name"],
                is_service=options["service"],
                actor=command_actor(),
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"membership granted: {options['sub']} @ {options['project']} = {' '.join(membership.permissions)}"
        )
