"""ASGI entry point (``tjwater.asgi:application``), served by uvicorn.

One application composes two sides:
- exactly ``/mcp`` and ``/.well-known/oauth-protected-resource/mcp`` go to ``mcp_app``;
- exactly ``/internal/cancellation-probe`` goes to ``mcp_app`` too (``mcp_app.probe``), which serves it
  to this deployment's service client only and hands every other request back to Django (an unknown
  path's 404);
- everything else goes to Django.
It also answers the ASGI ``lifespan`` protocol itself, because Django's ASGIHandler rejects lifespan
scopes (SDK_NOTES "Server") and the MCP side needs start-up and shutdown hooks.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tjwater.settings")

from tjwater.bounds import BoundedBody  # noqa: E402 - it reads settings (lazily): after the module is named

# Reads at most TJWATER_REQUEST_MAX_BYTES of a body (Django's handler would read it whole): tjwater/bounds.py.
django_application = BoundedBody(get_asgi_application())

# Import after Django is set up: mcp_app reads settings and models.
from mcp_app.asgi import MCP_PATHS, McpEndpoint  # noqa: E402
from mcp_app.probe import PROBE_PATH  # noqa: E402
from tjwater import metrics, telemetry  # noqa: E402

telemetry.configure_from_settings()  # traces only when OTEL_EXPORTER_OTLP_ENDPOINT is set

Scope = dict[str, Any]


class Application:
    """Route by exact path and own the lifespan of the MCP endpoint."""

    def __init__(self) -> None:
        self.mcp = McpEndpoint()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "http" and scope.get("path") in MCP_PATHS:
            await self.mcp(scope, receive, send)
            return
        if scope["type"] == "http" and scope.get("path") == PROBE_PATH:
            await self.mcp.probe(scope, receive, send, django_application)
            return
        await django_application(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.mcp.startup()
                except Exception as exc:  # noqa: BLE001 - McpEndpoint.startup absorbs MCP faults (REST stays up);
                    # anything reaching here is a bug of the start-up code itself: the server refuses to start.
                    await send({"type": "lifespan.startup.failed", "message": type(exc).__name__})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.mcp.shutdown()
                telemetry.shutdown()  # flush the spans still queued
                metrics.mark_process_dead()
                await send({"type": "lifespan.shutdown.complete"})
                return


application = Application()
