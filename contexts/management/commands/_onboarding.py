"""What the onboarding commands share: the operator actor and the principal's issuer default."""

from __future__ import annotations

import getpass

from django.conf import settings
from django.core.management.base import CommandParser

from contexts.services import Actor


def add_principal_arguments(parser: CommandParser) -> None:
    parser.add_argument("--project", required=True, help="the project's slug")
    parser.add_argument("--sub", required=True, help="the principal's `sub` as the OpenID provider issues it")
    parser.add_argument(
        "--issuer", default=None, help="the principal's token issuer (default: TJWATER_OIDC_ISSUER, the trusted one)"
    )


def issuer_of(options: dict[str, object]) -> str:
    return str(options["issuer"] or settings.TJWATER_OIDC_ISSUER)


def command_actor() -> Actor:
    """The shell user running the command, recorded in the audit trail."""
    return Actor(label=f"command:{getpass.getuser()}")
