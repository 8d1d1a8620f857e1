"""``manage.py mcp_token``: print exactly one access token on stdout (SPEC R-AUTH-6, R-OPS).

- ``--sub SUB --client CLIENT --scope "…" [--ttl SECONDS]`` mints a token with the embedded dev issuer
  (only when ``TJWATER_DEV_ISSUER`` is on, which needs ``DEBUG``).
- ``--client-credentials`` fetches a token from the configured real issuer with this service's client
  id/secret (``TJWATER_OIDC_CLIENT_ID``/``_SECRET``), the token endpoint from the issuer's discovery
  document, and ``resource=`` the MCP resource URI (RFC 8707).

Nothing but the token goes to stdout, so ``TOKEN=$(manage.py mcp_token …)`` works.
"""

from __future__ import annotations

from typing import Any

import httpx2
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts import dev_issuer


def fetch_client_credentials_token(*, scope: str) -> str:
    """One client_credentials grant at the configured issuer; returns the access token."""
    issuer = settings.TJWATER_OIDC_ISSUER
    client_id, secret = settings.TJWATER_OIDC_CLIENT_ID, settings.TJWATER_OIDC_CLIENT_SECRET
    if not issuer or not client_id or not secret:
        raise CommandError("set TJWATER_OIDC_ISSUER, TJWATER_OIDC_CLIENT_ID and TJWATER_OIDC_CLIENT_SECRET")
    timeout = settings.TJWATER_OIDC_HTTP_TIMEOUT_S
    try:
        discovery = httpx2.get(f"{issuer.rstrip('/')}/.well-known/openid-configuration", timeout=timeout)
        discovery.raise_for_status()
        token_endpoint = discovery.json()["token_endpoint"]
        data = {"grant_type": "client_credentials", "resource": settings.TJWATER_MCP_RESOURCE_URI}
        if scope:
            data["scope"] = scope
        response = httpx2.post(token_endpoint, data=data, auth=(client_id, secret), timeout=timeout)
    except (httpx2.HTTPError, KeyError, ValueError) as exc:
        raise CommandError(f"could not reach the issuer ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise CommandError(f"the issuer refused the client_credentials grant (HTTP {response.status_code})")
    token = response.json().get("access_token")
    if not isinstance(token, str) or not token:
        raise CommandError("the issuer's answer carries no access_token")
    return token


class Command(BaseCommand):
    help = "Print one MCP access token: minted by the dev issuer, or fetched with client_credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sub", help="subject (dev issuer)")
        parser.add_argument("--client", help="client id, the azp claim (dev issuer)")
        parser.add_argument("--scope", default="mcp.catalog.read mcp.query", help="space-separated scopes")
        parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (dev issuer)")
        parser.add_argument("--audience", default=None, help="aud claim (dev issuer; default: the MCP audience)")
        parser.add_argument(
            "--client-credentials", action="store_true", help="fetch a token from the configured real issuer"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["client_credentials"]:
            token = fetch_client_credentials_token(scope=options["scope"])
        else:
            if not options["sub"] or not options["client"]:
                raise CommandError("--sub and --client are required (or use --client-credentials)")
            if not 1 <= options["ttl"] <= 24 * 3600:
                raise CommandError("--ttl must be between 1 and 86400 seconds")
            try:
                token = dev_issuer.mint_token(
                    subject=options["sub"],
                    client_id=options["client"],
                    scopes=options["scope"].split(),
                    ttl_s=options["ttl"],
                    audience=options["audience"],
                )
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from None
        self.stdout.write(token)
