"""Readiness endpoint: real PostgreSQL and Redis, and real failing endpoints for the 503 cases."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx2
import pytest
from django.test import Client, override_settings

from tests.conftest import free_port


@pytest.fixture
def silent_tcp_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: a hung dependency, for real."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_loop() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    yield int(sock.getsockname()[1])
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


def test_healthz_ok_when_database_and_redis_answer(db: None) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


def test_healthz_names_redis_when_refused(db: None) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/15"):
        response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "redis": "unavailable"}
    assert response.json()["failing"] == ["redis"]


def test_healthz_answers_within_three_seconds_when_redis_hangs(db: None, silent_tcp_server: int) -> None:
    started = time.monotonic()
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{silent_tcp_server}/15"):
        response = Client().get("/healthz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert response.json()["failing"] == ["redis"]
    assert elapsed < 3.0


# Only the health check reads this override; the test's own connection is not touched.
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_healthz_answers_within_three_seconds_when_database_hangs(db: None, silent_tcp_server: int) -> None:
    from django.conf import settings

    hung = {**settings.DATABASES["default"], "PORT": str(silent_tcp_server)}
    started = time.monotonic()
    with override_settings(DATABASES={"default": hung}):
        from tjwater.health import run_checks

        checks = run_checks()
    assert checks == {"database": "unavailable", "redis": "ok"}
    assert time.monotonic() - started < 3.0


def test_healthz_over_real_uvicorn(live_server_url: str) -> None:
    response = httpx2.get(f"{live_server_url}/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}
