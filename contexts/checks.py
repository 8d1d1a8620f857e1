"""System checks for the context settings (STYLE "settings"): wrong values fail at start-up, not on
the first context a host tries to create."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

MAX_CONTEXT_TTL_S = 24 * 3600


@register(Tags.security)
def check_context_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    ttl = getattr(settings, "TJWATER_CONTEXT_TTL_S", None)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= MAX_CONTEXT_TTL_S:
        errors.append(
            Error(
                f"TJWATER_CONTEXT_TTL_S must be an integer between 1 and {MAX_CONTEXT_TTL_S} seconds.",
                hint="The spec's default is 600 (10 minutes).",
                id="contexts.E001",
            )
        )
    retention = getattr(settings, "TJWATER_CONTEXT_RETENTION_S", None)
    if not isinstance(retention, int) or isinstance(retention, bool) or retention < 0:
        errors.append(Error("TJWATER_CONTEXT_RETENTION_S must be a non-negative integer.", id="contexts.E002"))
    host_client = getattr(settings, "TJWATER_MCP_HOST_CLIENT", "")
    if not isinstance(host_client, str) or not host_client:
        errors.append(
            Error("TJWATER_MCP_HOST_CLIENT must name the client allowed to create task contexts.", id="contexts.E003")
        )
    elif host_client not in getattr(settings, "TJWATER_MCP_ALLOWED_CLIENTS", []):
        errors.append(
            Warning(
                "TJWATER_MCP_HOST_CLIENT is not in TJWATER_MCP_ALLOWED_CLIENTS: no token can create task contexts.",
                id="contexts.W001",
            )
        )
    return errors
