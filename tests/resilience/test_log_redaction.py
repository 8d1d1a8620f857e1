"""Context handles never reach a log, however the server is started (issue 9 item 3, SPEC §10).

Real servers with their request logging ON — uvicorn with its access log (its default, which
``scripts/run.sh`` now keeps) and ``manage.py runserver`` — take the requests whose path carries a
handle: an owner's ``DELETE`` (204), someone else's (404, JSON), the same path with a trailing slash
(Django's URL 404, logged by ``django.request`` as "Not Found: <path>"), and a forced 500 (a database
without the schema). Then the captured server output is searched for the handle: it must be absent,
while the redacted lines are present (so the lines were logged, not skipped). Nothing here turns the
filter on by hand: it comes from the project's own ``LOGGING`` (tjwater/logging.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer
from tests.support.postgres import PrivatePostgres, PrivateRedis
from tests.support.resilience import DEV_ISSUER, HOST_CLIENT, World, private_env, run_seed
from tests.support.servers import ServerProcess, launch

pytestmark = pytest.mark.e2e

OWNER = "ops-log-owner"
OTHER = "ops-log-other"
PROJECT = "resil-alice"
REDACTED = "/api/v1/mcp-query-contexts/[redacted]"


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.stop()


def start(
    servers: list[ServerProcess], tmp_path: Path, kind: Literal["uvicorn", "runserver"], env: dict[str, str]
) -> ServerProcess:
    server = launch(env, tmp_path, kind=kind, access_log=True)
    servers.append(server)
    return server


def bearer(subject: str) -> dict[str, str]:
    with override_settings(DEBUG=True):  # the dev issuer mints only in development, like the servers
        token = dev_issuer.mint_token(
            subject=subject, client_id=HOST_CLIENT, scopes=["mcp.context.bind", "mcp.query"], ttl_s=1800
        )
    return {"Authorization": f"Bearer {token}"}


def delete(server: ServerProcess, path: str, subject: str) -> int:
    return httpx2.delete(f"{server.url}{path}", headers=bearer(subject), timeout=30).status_code


@pytest.fixture(scope="module")
def members(private_postgres: PrivatePostgres, private_redis: PrivateRedis, world: World) -> None:
    run_seed(
        private_postgres,
        private_redis,
        {"members": [{"issuer": DEV_ISSUER, "subject": who, "project": PROJECT} for who in (OWNER, OTHER)]},
    )


@pytest.fixture(scope="module")
def schemaless_database(private_postgres: PrivatePostgres) -> str:
    """A database on the private cluster without the project's tables: every query fails unexpectedly."""
    with private_postgres.connect(dbname="postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'ops_schemaless'").fetchone():
            conn.execute('CREATE DATABASE "ops_schemaless"')
    return f"postgis://postgres@127.0.0.1:{private_postgres.port}/ops_schemaless"


def new_handle(server: ServerProcess) -> str:
    response = httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        json={"project": PROJECT, "session_id": "ops-log", "purpose": "ordinary_chat"},
        headers=bearer(OWNER),
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["context_handle"])


@pytest.mark.usefixtures("members")
@pytest.mark.parametrize("log_format", ["plain", "json"])  # issue 24: the JSON lines pass the same filter
def test_uvicorn_with_its_access_log_never_logs_a_handle(
    servers: list[ServerProcess],
    tmp_path: Path,
    private_postgres: PrivatePostgres,
    private_redis: PrivateRedis,
    schemaless_database: str,
    log_format: str,
) -> None:
    env = {**private_env(private_postgres, private_redis), "TJWATER_LOG_FORMAT": log_format}
    server = start(servers, tmp_path, "uvicorn", env)
    handle = new_handle(server)
    path = f"/api/v1/mcp-query-contexts/{handle}"
    assert delete(server, path, OTHER) == 404  # not the owner: the API's 404
    assert delete(server, f"{path}/", OWNER) == 404  # trailing slash: Django's URL 404 ("Not Found: …")
    assert delete(server, f"{path}?again={handle}", OWNER) == 204
    assert delete(server, path, OWNER) == 204

    broken = start(servers, tmp_path, "uvicorn", {**env, "DATABASE_URL": schemaless_database})
    assert delete(broken, path, OWNER) == 500  # forced: the database has no tables
    assert delete(broken, f"{path}/", OWNER) == 404

    server.wait_for_line(f'"DELETE {REDACTED} HTTP/1.1" 204')
    broken.wait_for_line(f'"DELETE {REDACTED} HTTP/1.1" 404')
    for srv in servers:
        srv.stop()
    log, broken_log = server.log(), broken.log()
    for text in (log, broken_log):
        assert handle not in text
        assert handle[:16] not in text
    # The lines were written — redacted — by uvicorn's access log and by django.request.
    assert '"POST /api/v1/mcp-query-contexts HTTP/1.1" 201' in log
    assert f'"DELETE {REDACTED} HTTP/1.1" 404' in log
    assert f'"DELETE {REDACTED} HTTP/1.1" 204' in log
    assert f"Not Found: {REDACTED}" in log
    assert f'"DELETE {REDACTED} HTTP/1.1" 500' in broken_log
    assert "Traceback (most recent call last)" in broken_log  # the 500's traceback, still without the handle
    if log_format == "json":  # the project's own lines are JSON objects, the access log stays uvicorn's
        assert f'"message": "Not Found: {REDACTED}"' in log
        assert '"exception": "Traceback (most recent call last)' in broken_log


@pytest.mark.usefixtures("members")
def test_manage_py_runserver_never_logs_a_handle(
    servers: list[ServerProcess], tmp_path: Path, private_postgres: PrivatePostgres, private_redis: PrivateRedis
) -> None:
    env = private_env(private_postgres, private_redis)
    uvicorn = start(servers, tmp_path, "uvicorn", env)
    handle = new_handle(uvicorn)
    server = start(servers, tmp_path, "runserver", env)
    path = f"/api/v1/mcp-query-contexts/{handle}"
    assert delete(server, path, OTHER) == 404
    assert delete(server, f"{path}/", OWNER) == 404
    assert delete(server, path, OWNER) == 204
    server.wait_for_line(f'"DELETE {REDACTED} HTTP/1.1" 204')
    server.stop()
    log = server.log()
    assert handle not in log and handle[:16] not in log
    assert f'"DELETE {REDACTED} HTTP/1.1" 204' in log  # django.server's request line, redacted
    assert f"Not Found: {REDACTED}" in log
