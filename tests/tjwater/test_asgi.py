"""The ASGI composition over a real uvicorn process: lifespan, Django routes, and the /mcp gate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer
from tests.support.mcp_http import rpc_body, rpc_headers
from tests.support.servers import ServerProcess, launch, server_env, subprocess_database_url


def test_mcp_is_503_when_disabled(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(TJWATER_MCP_ENABLED="0")
    response = httpx2.post(f"{server.url}/mcp", json={}, timeout=5)
    assert response.status_code == 503
    # The body of every refusal (code, message, retryable); turned off by an operator: retrying won't help.
    assert response.json() == {
        "code": "MCP_DISABLED",
        "message": "The MCP endpoint is turned off on this server; retrying will not help.",
        "retryable": False,
    }
    assert "retry-after" not in response.headers
    # Django still serves everything else from the same process.
    assert httpx2.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert httpx2.get(f"{server.url}/admin/login/", timeout=5).status_code == 200


def test_a_failed_mcp_start_up_keeps_rest_serving(start_server: Callable[..., ServerProcess]) -> None:
    """Issue 23 item 15: /mcp failing to start never takes REST down. A real start-up fault: a query pool
    of size 0 (psycopg_pool refuses it when /mcp builds its pool). The process serves Django as usual;
    /mcp answers 503 retryable with Retry-After, in the shape of every other refusal."""
    server = start_server(TJWATER_MCP_DB_POOL_SIZE="0")
    assert httpx2.get(f"{server.url}/healthz", timeout=5).status_code == 200
    rest = httpx2.post(f"{server.url}/api/v1/mcp-query-contexts", json={}, timeout=5)
    assert (rest.status_code, rest.json()["code"]) == (401, "AUTHENTICATION_REQUIRED")
    response = httpx2.post(
        f"{server.url}/mcp", json=rpc_body("server/discover"), headers=rpc_headers("server/discover", None), timeout=5
    )
    assert response.status_code == 503
    assert response.json() == {
        "code": "MCP_UNAVAILABLE",
        "message": "The MCP endpoint could not start and is retrying; retry later.",
        "retryable": True,
    }
    assert response.headers["retry-after"] == "10"
    assert "MCP endpoint start-up failed" in server.log()


def test_lifespan_completes_and_shutdown_is_clean(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(TJWATER_MCP_ENABLED="0")
    server.stop()
    log = server.log()
    assert "Application startup complete" in log
    assert "Application shutdown complete" in log
    # uvicorn re-raises the SIGTERM it handled after a graceful shutdown.
    assert server.process.returncode in (0, -15)
    assert "Traceback" not in log


@pytest.fixture
def mcp_servers(django_db_setup: None, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """uvicorn processes with /mcp on, against the test database (tests/support/servers.py: a start-up
    deadline that tolerates a loaded machine)."""
    started: list[ServerProcess] = []

    def start(**env: str) -> ServerProcess:
        server = launch(server_env(DATABASE_URL=subprocess_database_url(), **env), tmp_path, access_log=True)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _tools_list(server: ServerProcess, **headers: str) -> httpx2.Response:
    with override_settings(DEBUG=True):  # the dev issuer mints only in development, like the server
        bearer = dev_issuer.mint_token(
            subject="asgi-host-check", client_id="tjwater-agent-mcp", scopes=["mcp.catalog.read"], ttl_s=600
        )
    headers = rpc_headers("tools/list", bearer, **headers)
    return httpx2.post(f"{server.url}/mcp", json=rpc_body("tools/list"), headers=headers, timeout=10)


def test_allowed_hosts_wildcards_reach_mcp_like_django(mcp_servers: Callable[..., ServerProcess]) -> None:
    # `.example.test` means the domain and all its subdomains (Django's ALLOWED_HOSTS), on any port.
    server = mcp_servers(ALLOWED_HOSTS=".example.test,127.0.0.1")
    for host in ("mcp.example.test", "a.b.example.test:8443", "example.test", f"127.0.0.1:{server.port}"):
        response = _tools_list(server, host=host)
        assert response.status_code == 200, (host, response.status_code, response.text)
    for host in ("evil.test", "example.test.evil.test", "notexample.test", "localhost", "[::1]"):
        assert _tools_list(server, host=host).status_code == 421, host
    # Django itself agrees on the same names.
    assert httpx2.get(f"{server.url}/healthz", headers={"host": "mcp.example.test"}, timeout=10).status_code != 400
    assert httpx2.get(f"{server.url}/healthz", headers={"host": "evil.test"}, timeout=10).status_code == 400


def test_a_star_allowed_host_keeps_the_origin_check(mcp_servers: Callable[..., ServerProcess]) -> None:
    server = mcp_servers(ALLOWED_HOSTS="*")
    assert _tools_list(server, host="anything.example").status_code == 200
    assert _tools_list(server, host="anything.example", origin="http://evil.example").status_code == 403


def test_a_context_handle_in_a_query_string_never_reaches_the_access_log(
    mcp_servers: Callable[..., ServerProcess],
) -> None:
    # Issue 17 item 10: a client that puts its handle in the URL of /mcp (the server never reads it
    # there) must not have it written by uvicorn's access log (ON here, its default).
    handle = "Zk3vQ_9x-query-handle-BBBBBBBBBBBBBBBBBBBBBBBB"
    server = mcp_servers()
    for query in (f"context_handle={handle}", f"a=1&Context%5Fhandle={handle}&b=2"):
        headers = rpc_headers("tools/list", None)
        response = httpx2.post(f"{server.url}/mcp?{query}", json=rpc_body("tools/list"), headers=headers, timeout=10)
        assert response.status_code == 401
    server.wait_for_line('"POST /mcp?a=1&Context%5Fhandle=[redacted]&b=2 HTTP/1.1" 401')
    log = server.log()
    assert '"POST /mcp?context_handle=[redacted] HTTP/1.1" 401' in log
    assert '"POST /mcp?a=1&Context%5Fhandle=[redacted]&b=2 HTTP/1.1" 401' in log
    assert handle not in log
