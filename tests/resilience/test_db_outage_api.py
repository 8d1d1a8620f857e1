"""The context REST API while PostgreSQL is unavailable (issue 9 item 1, REST half).

``POST /api/v1/mcp-query-contexts`` and ``DELETE …/{handle}`` must answer a JSON 503
``DATA_SOURCE_UNAVAILABLE`` (retryable, ``Retry-After``) within about 2-3 s — not hang for the old 10 s
pool timeout and not Django's HTML 500 — and recover by themselves when the database is back. An
unexpected failure is a JSON 500 ``INTERNAL_ERROR`` (never HTML, never a trace), its traceback in the
server log. All real: a private PostgreSQL cluster (tests/resilience/conftest.py) stopped and started
during the test, a port nothing listens on, a socket that accepts and never answers, and a database
without the schema for the unexpected error. The shared PostgreSQL is never touched.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer
from tests.support.postgres import PrivatePostgres, PrivateRedis
from tests.support.resilience import DEV_ISSUER, HOST_CLIENT, Figures, Processes, World, run_seed
from tests.support.servers import free_port, launch, server_env

pytestmark = pytest.mark.e2e

CALLER = "ops-outage-caller"
PROJECT = "resil-alice"
# Stated bound of one answer while the database is down: the pool checkout (TJWATER_DB_POOL_TIMEOUT_S,
# 2 s) plus request overhead on a loaded 2-core machine. The figures print the measured times.
ANSWER_BOUND_S = 5.0
RECOVERY_BOUND_S = 15.0
UNAVAILABLE = {
    "code": "DATA_SOURCE_UNAVAILABLE",
    "message": "The data source is temporarily unavailable; retry later.",
    "retryable": True,
}


def bearer(subject: str = CALLER) -> dict[str, str]:
    with override_settings(DEBUG=True):  # the dev issuer mints only in development, like the servers
        token = dev_issuer.mint_token(
            subject=subject, client_id=HOST_CLIENT, scopes=["mcp.context.bind", "mcp.query"], ttl_s=1800
        )
    return {"Authorization": f"Bearer {token}"}


def create(url: str, headers: dict[str, str]) -> tuple[httpx2.Response, float]:
    started = time.monotonic()
    response = httpx2.post(
        f"{url}/api/v1/mcp-query-contexts",
        json={"project": PROJECT, "session_id": "ops-outage", "purpose": "ordinary_chat"},
        headers=headers,
        timeout=30,
    )
    return response, time.monotonic() - started


def delete(url: str, headers: dict[str, str], handle: str) -> tuple[httpx2.Response, float]:
    started = time.monotonic()
    response = httpx2.delete(f"{url}/api/v1/mcp-query-contexts/{handle}", headers=headers, timeout=30)
    return response, time.monotonic() - started


def assert_unavailable(response: httpx2.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    assert response.json() == UNAVAILABLE
    assert response.headers["retry-after"] == "5"
    assert elapsed < ANSWER_BOUND_S, f"answered only after {elapsed:.2f} s"


@pytest.fixture(scope="module")
def caller(private_postgres: PrivatePostgres, private_redis: PrivateRedis, world: World) -> str:
    """A member of the resilience world's first project, in the private database."""
    run_seed(
        private_postgres, private_redis, {"members": [{"issuer": DEV_ISSUER, "subject": CALLER, "project": PROJECT}]}
    )
    return CALLER


def test_a_stopped_database_is_a_quick_json_503_and_the_api_recovers(
    processes: Processes, caller: str, figures: Figures
) -> None:
    server = processes.server()
    headers = bearer()
    created, _ = create(server.url, headers)
    assert created.status_code == 201, created.text
    handle = created.json()["context_handle"]

    processes.postgres.stop()  # fast shutdown: the pooled connections are dropped too
    try:
        answers = [create(server.url, headers) for _ in range(3)]
        answers.append(delete(server.url, headers, handle))
        for response, elapsed in answers:
            assert_unavailable(response, elapsed)
    finally:
        processes.postgres.start()
    restored = time.monotonic()
    while True:
        response, elapsed = create(server.url, headers)
        if response.status_code == 201:
            break
        assert_unavailable(response, elapsed)
        assert time.monotonic() - restored < RECOVERY_BOUND_S, "the API did not recover by itself"
        time.sleep(0.2)
    recovery_s = time.monotonic() - restored
    assert delete(server.url, headers, handle)[0].status_code == 204

    log = server.log()
    assert "context api: database unavailable" in log
    assert handle not in log
    figures.record(
        "rest_api_postgres_stopped",
        {
            "answer_s": [round(elapsed, 2) for _, elapsed in answers],
            "recovery_s": round(recovery_s, 2),
            "codes": sorted({r.json()["code"] for r, _ in answers}),
        },
    )


@pytest.fixture
def silent_socket() -> Iterator[int]:
    """A port whose socket accepts connections (the kernel completes the handshake) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield int(listener.getsockname()[1])
    listener.close()


@pytest.mark.parametrize("fault", ["refused", "hang"])
def test_a_database_that_refuses_or_never_answers_is_a_quick_json_503(
    silent_socket: int, fault: str, figures: Figures, tmp_path: Path
) -> None:
    # Started by hand rather than with ``start_server``: that fixture waits for /healthz with a 2 s
    # timeout, and a hanging database makes the health check itself take its full 2 s budget.
    db_port = free_port() if fault == "refused" else silent_socket
    server = launch(
        server_env(DATABASE_URL=f"postgis://postgres@127.0.0.1:{db_port}/tjwater"), tmp_path, access_log=True
    )
    try:
        headers = bearer("anyone")
        answers = [create(server.url, headers) for _ in range(2)] + [delete(server.url, headers, "h" * 43)]
    finally:
        server.stop()
    for response, elapsed in answers:
        assert_unavailable(response, elapsed)
    assert "Traceback" not in server.log()
    figures.record(f"rest_api_database_{fault}", {"answer_s": [round(elapsed, 2) for _, elapsed in answers]})


@pytest.fixture(scope="module")
def schemaless_database(private_postgres: PrivatePostgres) -> str:
    """A database on the private cluster without the project's tables: every query fails unexpectedly."""
    with private_postgres.connect(dbname="postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'ops_schemaless'").fetchone():
            conn.execute('CREATE DATABASE "ops_schemaless"')
    return f"postgis://postgres@127.0.0.1:{private_postgres.port}/ops_schemaless"


def test_an_unexpected_failure_is_a_json_500_and_its_traceback_goes_to_the_server_log(
    processes: Processes, schemaless_database: str
) -> None:
    server = processes.server(DATABASE_URL=schemaless_database)
    headers = bearer("anyone")
    for response, _ in (create(server.url, headers), delete(server.url, headers, "h" * 43)):
        assert response.status_code == 500
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {
            "code": "INTERNAL_ERROR",
            "message": "The server failed to complete the request.",
            "retryable": False,
        }
        assert "Traceback" not in response.text and "relation" not in response.text
    log = server.log()
    assert "context api internal error method=POST exception=ProgrammingError" in log
    assert "Traceback (most recent call last)" in log
    assert 'relation "contexts_' in log  # the cause is there for the operator
