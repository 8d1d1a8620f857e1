"""System checks for the MCP endpoint settings (STYLE "settings"): a misconfigured endpoint fails at
start-up, not on the first call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.security)
def check_mcp_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    if not settings.TJWATER_MCP_ENABLED:
        return errors
    resource = urlsplit(settings.TJWATER_MCP_RESOURCE_URI)
    if resource.scheme not in ("http", "https") or not resource.netloc or resource.query or resource.fragment:
        errors.append(Error("TJWATER_MCP_RESOURCE_URI must be an absolute http(s) URL of /mcp.", id="mcp_app.E001"))
    if not settings.TJWATER_OIDC_ISSUER:
        errors.append(
            Error(
                "TJWATER_OIDC_ISSUER must name the one trusted issuer when TJWATER_MCP_ENABLED is on.",
                hint="Or enable the dev issuer for a local run (TJWATER_DEV_ISSUER=1, DEBUG=1).",
                id="mcp_app.E002",
            )
        )
    if not settings.TJWATER_MCP_ALLOWED_CLIENTS:
        errors.append(Error("TJWATER_MCP_ALLOWED_CLIENTS must list at least one client (azp).", id="mcp_app.E003"))
    if settings.TJWATER_MCP_QUERY_BUDGET_S < 1:
        errors.append(Error("TJWATER_MCP_QUERY_BUDGET_S must be at least 1 second.", id="mcp_app.E004"))
    if settings.TJWATER_MCP_MAX_CONCURRENT < 1:
        errors.append(Error("TJWATER_MCP_MAX_CONCURRENT must be at least 1.", id="mcp_app.E005"))
    if settings.TJWATER_MCP_SLOT_LEASE_S <= 0:
        errors.append(Error("TJWATER_MCP_SLOT_LEASE_S must be positive.", id="mcp_app.E006"))
    from queries.registry import tools_by_name

    unknown = sorted(set(settings.TJWATER_MCP_EXPOSED_TOOLS) - set(tools_by_name()))
    if unknown:
        errors.append(Error(f"TJWATER_MCP_EXPOSED_TOOLS names unknown tools: {unknown}.", id="mcp_app.E007"))
    errors.extend(check_service_client())
    return errors


def check_service_client() -> list[CheckMessage]:
    """The cancellation probe (``mcp_app.probe``) answers tokens of ``TJWATER_OIDC_CLIENT_ID`` only."""
    client = settings.TJWATER_OIDC_CLIENT_ID
    if not client:
        return []
    if client == settings.TJWATER_MCP_HOST_CLIENT:
        return [
            Warning(
                "TJWATER_OIDC_CLIENT_ID is the host client, whose tokens are users': the cancellation probe is off.",
                hint="Give this service a client of its own (client_credentials grant only).",
                id="mcp_app.W001",
            )
        ]
    if client not in settings.TJWATER_MCP_ALLOWED_CLIENTS:
        return [
            Warning(
                "TJWATER_OIDC_CLIENT_ID is not in TJWATER_MCP_ALLOWED_CLIENTS: its tokens are refused, so "
                "mcp_catalog_check --client-credentials cannot check this server (nor its cancellation).",
                id="mcp_app.W002",
            )
        ]
    return []
