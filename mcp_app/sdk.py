"""The MCP SDK's private parts this project relies on — imported here and nowhere else (issue 18 §3).

Each name below is private to the SDK (an underscore name, or a name from a module whose own name starts
with one): any release may change or remove it without notice. They were read and verified against
``mcp`` ``VERIFIED_MCP_VERSION``; ``mcp_app.checks`` refuses to start with another version
(``mcp_app.E008``) and lists ``FENCED``, the names to re-read on an upgrade. The rest of the project
imports the public aliases defined here. ``tests/mcp_app/test_sdk.py`` fails if any other module
imports a private ``mcp``/``mcp_types`` name, or if a name imported here is missing from ``FENCED``.

Why private at all: ``mcp_app.transport`` re-implements the SDK's 2026-07-28 POST entry
(``handle_modern_request``) without its per-request machinery, and keeps every answer the SDK gives on
the cold paths (notifications, malformed bodies, ladder rejections, the SSE framing) by calling the SDK's
own helpers for them instead of copying them — a copy would drift silently, a renamed helper fails here at
import. ``mcp_app.catalog`` asks the SDK's own walk of ``x-mcp-header`` positions, so that it agrees with
``validate_mcp_param_headers`` on which schemas have header parameters.
"""

from __future__ import annotations

from collections.abc import Callable

from mcp.server._streamable_http_modern import (
    _INVALID_BODY,
    _SSE_HEADERS,
    _SSE_PING_INTERVAL,
    _acknowledge_notification,
    _is_notification_shaped,
    _sse_event,
    _write,
    _write_rejection,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import _annotated_positions

VERIFIED_MCP_VERSION = "2.3.0"

#: Every private SDK name imported above → why this project needs it. ``mcp_app.E008`` names these keys.
FENCED: dict[str, str] = {
    "mcp.server._streamable_http_modern._INVALID_BODY": (
        "the -32600 reply to well-formed JSON that is not one request object (a batch, a posted response)"
    ),
    "mcp.server._streamable_http_modern._SSE_HEADERS": (
        "the response headers of a text/event-stream answer (no-cache, no-transform, x-accel-buffering)"
    ),
    "mcp.server._streamable_http_modern._SSE_PING_INTERVAL": (
        "the SDK's SSE deferral/keepalive window (15 s), the default of TJWATER_MCP_SSE_PING_S"
    ),
    "mcp.server._streamable_http_modern._acknowledge_notification": (
        "answers an id-less POST: 202 for a notification at a served version, the SDK's rejection otherwise"
    ),
    "mcp.server._streamable_http_modern._is_notification_shaped": (
        "JSON-RPC 2.0 §4.1 by key presence: which bodies are notifications (before any model validation)"
    ),
    "mcp.server._streamable_http_modern._sse_event": "frames a notification as one SSE `event: message`",
    "mcp.server._streamable_http_modern._write": (
        "writes a JSON-RPC error with the SDK's HTTP status table (and `id: null` kept on the wire)"
    ),
    "mcp.server._streamable_http_modern._write_rejection": (
        "writes an inbound-ladder rejection (-32020/-32022/-32602…) as its JSON-RPC error and HTTP status"
    ),
    "mcp.shared.inbound._annotated_positions": (
        "the SDK's own list of x-mcp-header positions of an input schema: a tool without any needs no "
        "Mcp-Param-* comparison (mcp_app.catalog.declares_header_params)"
    ),
    "mcp.server.transport_security.TransportSecurityMiddleware._validate_host (behaviour)": (
        "decides with `host in settings.allowed_hosts`; dns_rebinding_settings() relies on that membership "
        "test to apply Django's ALLOWED_HOSTS rules (tests/tjwater/test_asgi.py pins it over HTTP)"
    ),
}

# The public names the rest of the project uses (see FENCED for why each exists).
INVALID_BODY = _INVALID_BODY
SSE_HEADERS = _SSE_HEADERS
SSE_PING_INTERVAL_S: float = _SSE_PING_INTERVAL
acknowledge_notification = _acknowledge_notification
is_notification_shaped = _is_notification_shaped
sse_event = _sse_event
write_reply = _write
write_rejection = _write_rejection
annotated_header_positions = _annotated_positions


def dns_rebinding_settings(
    *, host_allowed: Callable[[str], bool], allowed_origins: list[str]
) -> TransportSecuritySettings:
    """DNS-rebinding protection whose ``Host`` rule is ``host_allowed`` (the SDK's Origin rule unchanged).

    The SDK (``TransportSecurityMiddleware._validate_host``) only knows exact values and ``name:*`` for
    any port, so Django's ``.example.com`` cannot be written as its patterns. It decides with
    ``host in settings.allowed_hosts`` (then loops over the entries for ``:*`` patterns): the settings
    carry a list — empty, so the loop finds nothing — whose membership test is ``host_allowed``, built
    with ``model_construct`` (validation would turn it into a plain list)."""

    class HostRule(list[str]):
        def __contains__(self, host: object) -> bool:
            return isinstance(host, str) and host_allowed(host)

    return TransportSecuritySettings.model_construct(
        enable_dns_rebinding_protection=True, allowed_hosts=HostRule(), allowed_origins=allowed_origins
    )
