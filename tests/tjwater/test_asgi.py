"""The ASGI composition over a real uvicorn process: lifespan, Django routes, and the /mcp gate."""

from __future__ import annotations

from collections.abc import Callable

import httpx2

from tests.conftest import ServerProcess


def test_mcp_is_503_when_disabled(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(TJWATER_MCP_ENABLED="0")
    response = httpx2.post(f"{server.url}/mcp", json={}, timeout=5)
    assert response.status_code == 503
    assert response.json()["error"] == "mcp_disabled"
    # Django still serves everything else from the same process.
    assert httpx2.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert httpx2.get(f"{server.url}/admin/login/", timeout=5).status_code == 200


def test_lifespan_completes_and_shutdown_is_clean(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(TJWATER_MCP_ENABLED="0")
    server.stop()
    log = server.log()
    assert "Application startup complete" in log
    assert "Application shutdown complete" in log
    # uvicorn re-raises the SIGTERM it handled after a graceful shutdown.
    assert server.process.returncode in (0, -15)
    assert "Traceback" not in log
