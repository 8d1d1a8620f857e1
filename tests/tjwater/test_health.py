"""Readiness endpoint: real PostgreSQL, Redis and JWKS (the dev issuer's key, or a real issuer over HTTP),
and real failing endpoints for the 503 cases."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx2
import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings

from tests.support.servers import free_port


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
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok", "jwks": "ok"}}


def test_healthz_names_redis_when_refused(db: None) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/15"):
        response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "redis": "unavailable", "jwks": "ok"}
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
    assert checks == {"database": "unavailable", "redis": "ok", "jwks": "ok"}
    assert time.monotonic() - started < 3.0


def test_healthz_over_real_uvicorn(live_server_url: str) -> None:
    response = httpx2.get(f"{live_server_url}/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok", "jwks": "ok"}


@pytest.fixture
def fresh_validator() -> Iterator[None]:
    """The process-wide token validator rebuilt from the (overridden) settings, and forgotten after."""
    from contexts.tokens import reset_validator

    reset_validator()
    yield
    reset_validator()


def test_healthz_jwks_of_a_real_issuer_is_fetched_once_and_then_cached(db: None, fresh_validator: None) -> None:
    from tests.support.tokens import Issuer

    issuer = Issuer()
    issuer.add_key("k1")
    try:
        with override_settings(TJWATER_OIDC_ISSUER=issuer.url, TJWATER_DEV_ISSUER=False):
            first = Client().get("/healthz")
            assert first.status_code == 200
            assert first.json()["checks"]["jwks"] == "ok"
            assert issuer.jwks_fetches == 1
            # A cached, still-fresh key set is enough: the probe does not call the issuer each time, and
            # the issuer being down does not flip readiness while the cache is fresh.
            issuer.down = True
            assert Client().get("/healthz").json()["checks"]["jwks"] == "ok"
            assert issuer.jwks_fetches == 1
    finally:
        issuer.httpd.shutdown()
        issuer.httpd.server_close()
        redis_client = redis.Redis.from_url(settings.REDIS_URL)
        for key in redis_client.scan_iter("tjwater:oidc:jwks:*"):  # the shared JWKS copy it wrote
            redis_client.delete(key)
        redis_client.close()


def test_healthz_names_jwks_when_the_issuer_is_unreachable(db: None, fresh_validator: None) -> None:
    started = time.monotonic()
    with override_settings(TJWATER_OIDC_ISSUER=f"http://127.0.0.1:{free_port()}/realm", TJWATER_DEV_ISSUER=False):
        response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "redis": "ok", "jwks": "unavailable"}
    assert response.json()["failing"] == ["jwks"]
    assert time.monotonic() - started < 3.0


def test_healthz_answers_within_three_seconds_when_the_issuer_hangs(
    db: None, fresh_validator: None, silent_tcp_server: int
) -> None:
    started = time.monotonic()
    with override_settings(
        TJWATER_OIDC_ISSUER=f"http://127.0.0.1:{silent_tcp_server}/realm",
        TJWATER_DEV_ISSUER=False,
        TJWATER_OIDC_HTTP_TIMEOUT_S=30.0,  # the check's own bound applies, not the request timeout
    ):
        response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["jwks"]
    assert time.monotonic() - started < 3.0


def test_healthz_skips_the_issuer_keys_while_mcp_is_off(db: None) -> None:
    with override_settings(TJWATER_MCP_ENABLED=False, TJWATER_OIDC_ISSUER="", TJWATER_DEV_ISSUER=False):
        response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}


# --- /livez and /readyz (issue 24) ---------------------------------------------------------------------


def test_livez_and_readyz_over_real_uvicorn(live_server_url: str) -> None:
    live = httpx2.get(f"{live_server_url}/livez", timeout=10)
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    ready = httpx2.get(f"{live_server_url}/readyz", timeout=10)
    assert ready.status_code == 200
    # The MCP endpoint registered its readiness (catalog loaded, pools up) next to the dependencies.
    assert ready.json() == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "ok", "jwks": "ok", "mcp": "ok"},
    }
    assert ready.headers["cache-control"] == "no-store"


def test_livez_checks_no_dependency_readyz_does(db: None) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/15"):
        live = Client().get("/livez")
        ready = Client().get("/readyz")
    assert live.status_code == 200
    assert ready.status_code == 503
    assert ready.json()["failing"] == ["redis"]


def test_readyz_names_a_part_that_is_not_ready(db: None) -> None:
    from tjwater import health

    registered = health._READINESS.get("mcp")
    health.register_readiness("mcp", lambda: False)  # e.g. an MCP endpoint still starting
    try:
        response = Client().get("/readyz")
    finally:
        health._READINESS.pop("mcp")
        if registered is not None:
            health.register_readiness("mcp", registered)
    assert response.status_code == 503
    assert response.json()["checks"]["mcp"] == "unavailable"
    assert response.json()["failing"] == ["mcp"]
