"""System checks for the MCP endpoint settings (STYLE "settings"): a misconfigured endpoint fails at
start-up, not on the first call. Also the versions of ``mcp`` and Django whose private parts
``mcp_app.sdk`` and ``mcp_app.django_internals`` were verified against."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

import django
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


@register(Tags.compatibility)
def check_verified_versions(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The installed ``mcp`` and Django are the releases whose private parts this code was verified
    against (issue 18 §3): ``mcp_app/sdk.py`` and ``mcp_app/django_internals.py`` fence them, and an
    upgrade means re-reading each fenced name in the new release before its verified version is moved on.
    Either module failing to import (a fenced name is gone) is reported here too, with the exception."""
    errors: list[CheckMessage] = []
    try:
        from mcp_app import sdk
    except ImportError as exc:
        errors.append(
            Error(
                f"mcp_app/sdk.py cannot import from the installed mcp {installed_version('mcp')}: {exc}",
                hint="Re-verify every name fenced in mcp_app/sdk.py against this release, or install the "
                "pinned mcp (requirements.lock).",
                id="mcp_app.E008",
            )
        )
    else:
        mcp_version = installed_version("mcp")
        if mcp_version != sdk.VERIFIED_MCP_VERSION:
            errors.append(
                Error(
                    f"mcp {mcp_version} is installed; mcp_app/sdk.py was verified against mcp "
                    f"{sdk.VERIFIED_MCP_VERSION}.",
                    hint="Re-verify these in the new release, then move VERIFIED_MCP_VERSION: " + "; ".join(sdk.FENCED),
                    id="mcp_app.E008",
                )
            )
    try:
        from mcp_app import django_internals
    except ImportError as exc:
        errors.append(
            Error(
                f"mcp_app/django_internals.py cannot import from the installed Django {django.get_version()}: {exc}",
                hint="Re-verify every name fenced in mcp_app/django_internals.py against this release.",
                id="mcp_app.E009",
            )
        )
    else:
        if tuple(django.VERSION[:2]) != django_internals.VERIFIED_DJANGO:
            verified = ".".join(map(str, django_internals.VERIFIED_DJANGO))
            errors.append(
                Error(
                    f"Django {django.get_version()} is installed; mcp_app/django_internals.py was verified "
                    f"against Django {verified}.x.",
                    hint="Re-verify these in the new release, then move VERIFIED_DJANGO: "
                    + "; ".join(django_internals.FENCED),
                    id="mcp_app.E009",
                )
            )
    return errors


def installed_version(distribution: str) -> str:
    """The installed version of a distribution (from its metadata, not a ``__version__``)."""
    return metadata.version(distribution)
