"""The ASGI side of ``/mcp``.

Until the endpoint is enabled (``TJWATER_MCP_ENABLED``) every request to it is answered 503 with a JSON
body saying so: the seed ships the endpoint disabled by default (SPEC R-TOOL-1).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

MCP_PATH = "/mcp"
PRM_PATH = "/.well-known/oauth-protected-resource/mcp"
MCP_PATHS = frozenset({MCP_PATH, PRM_PATH})


async def send_json(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class McpEndpoint:
    """Serves ``/mcp`` and its protected-resource metadata; owns start-up and shutdown."""

    async def startup(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not settings.TJWATER_MCP_ENABLED:
            await send_json(
                send,
                503,
                {"error": "mcp_disabled", "message": "The MCP endpoint is not enabled on this server."},
            )
            return
        await send_json(send, 503, {"error": "mcp_unavailable", "message": "The MCP endpoint is not available yet."})
