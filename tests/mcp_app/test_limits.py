"""The limiter's Redis client (``mcp_app.limits.redis_client``, redis-py's asyncio client) against real
Redis servers (issue 17 item 2): TLS with a password (``rediss://``), a unix socket, the database index
from ``?db=``, and a killed connection that must not cost the next command its timeout."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings

from mcp_app.limits import ConcurrencyLimiter, slot_key
from tests.support.servers import free_port, stop_process

PRINCIPAL, PROJECT = 917_001, 917_002  # ids no fixture uses: the tests' keys are their own


def _limiter(url: str) -> ConcurrencyLimiter:
    return ConcurrencyLimiter(url, max_concurrent=2, lease_s=10)


def _take_and_give_back(url: str) -> int:
    """Take a slot and give it back through ``url``; the number of slots held while it was taken."""

    async def run() -> int:
        limiter = _limiter(url)
        try:
            lease = await limiter.acquire(PRINCIPAL, PROJECT)
            with redis.Redis.from_url(url) as observer:
                held = int(observer.zcard(lease.key))
            await limiter.release(lease)
            return held
        finally:
            await limiter.aclose()

    return asyncio.run(run())


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A private ``redis-server``: a unix socket and a TLS port (self-signed certificate), with a password."""
    # scripts/setup.sh installs both: a missing one is a broken set-up, not a reason to skip the TLS case.
    assert shutil.which("redis-server") and shutil.which("openssl"), "redis-server and openssl are needed"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    socket_path = tmp_path / "redis.sock"
    tls_port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--save", "", "--appendonly", "no"]
        + ["--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        + ["--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--requirepass", "s3cret-pw"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield {"socket": socket_path, "tls_port": tls_port, "password": "s3cret-pw"}
    finally:
        stop_process(process)  # type: ignore[arg-type]


def test_rediss_authenticates_inside_tls(redis_server: dict[str, object]) -> None:
    # The server speaks only TLS on this port and wants the password: a client that sent AUTH in clear
    # text (or no TLS at all) gets no slot.
    url = f"rediss://:{redis_server['password']}@127.0.0.1:{redis_server['tls_port']}/0?ssl_cert_reqs=none"
    assert _take_and_give_back(url) == 1


def test_a_unix_socket_url_works(redis_server: dict[str, object]) -> None:
    url = f"unix://:{redis_server['password']}@{redis_server['socket']}?db=2"
    assert _take_and_give_back(url) == 1
    client = redis.Redis(unix_socket_path=str(redis_server["socket"]), password=str(redis_server["password"]), db=2)
    assert client.dbsize() == 0  # given back, in db 2
    client.close()


def test_the_limiter_uses_the_database_index_of_the_query_string() -> None:
    # Only the test Redis's own index is used; its number moves from the path to ``?db=``.
    parts = urlsplit(settings.REDIS_URL)
    db = int(parts.path.strip("/") or 0)
    url = f"{parts.scheme}://{parts.netloc}/?db={db}"
    key = slot_key(PRINCIPAL, PROJECT)
    own = redis.Redis.from_url(settings.REDIS_URL)
    db0 = redis.Redis.from_url(f"{parts.scheme}://{parts.netloc}/0")

    async def run() -> tuple[int, int]:
        limiter = _limiter(url)
        try:
            lease = await limiter.acquire(PRINCIPAL, PROJECT)
            try:
                return int(own.zcard(key)), int(db0.zcard(key))
            finally:
                await limiter.release(lease)
        finally:
            await limiter.aclose()

    try:
        assert asyncio.run(run()) == (1, 0)
    finally:
        db0.zrem(key, *[m for m in db0.zrange(key, 0, -1)]) if db0.zcard(key) else None
        own.close()
        db0.close()


def test_after_a_killed_connection_the_next_command_is_fast() -> None:
    admin = redis.Redis.from_url(settings.REDIS_URL)

    async def run() -> float:
        limiter = _limiter(settings.REDIS_URL)
        try:
            await limiter.release(await limiter.acquire(PRINCIPAL, PROJECT))  # the connection is open
            # The limiter's one pooled connection (sequential use: the pool holds exactly one), by its id —
            # other processes of the suite use the same Redis and database index.
            assert len(limiter._redis.connection_pool._available_connections) == 1
            own_id = await limiter._redis.client_id()
            assert admin.client_kill_filter(_id=own_id) == 1
            await asyncio.sleep(0.1)
            started = time.monotonic()
            lease = await limiter.acquire(PRINCIPAL, PROJECT)
            elapsed = time.monotonic() - started
            await limiter.release(lease)
            return elapsed
        finally:
            await limiter.aclose()

    try:
        assert asyncio.run(run()) < 0.5  # not the 2 s timeout
    finally:
        admin.close()


def test_a_finished_lease_rides_on_the_next_acquire_of_its_key() -> None:
    """Released with ``release_soon``, a lease is removed by the next acquire's script (one round trip per
    call, no ``ZREM`` of its own), and never counted free early: the set never holds more than the limit."""
    observer = redis.Redis.from_url(settings.REDIS_URL)
    key = slot_key(PRINCIPAL, PROJECT)

    async def run() -> tuple[list[int], list[str]]:
        limiter = _limiter(settings.REDIS_URL)
        sent: list[str] = []  # the commands the limiter's own client sends (a count, nothing replaced)
        execute = limiter._redis.execute_command

        async def counting(*args: object, **options: object) -> object:
            sent.append(str(args[0]).upper())
            return await execute(*args, **options)

        limiter._redis.execute_command = counting  # type: ignore[method-assign]
        held: list[int] = []
        try:
            for _ in range(20):
                lease = await limiter.acquire(PRINCIPAL, PROJECT)
                held.append(int(observer.zcard(key)))
                assert limiter.release_soon(lease)
            return held, sent
        finally:
            await limiter.aclose()

    try:
        held, sent = asyncio.run(run())
        # The previous call's lease was removed by this acquire: only this call's slot is held.
        assert held == [1] * 20
        # One round trip per call; the last lease given back by aclose's flush.
        assert sent.count("ZREM") == 1 and len([c for c in sent if c.startswith("EVAL")]) >= 20
        assert len(sent) <= 22  # + at most one SCRIPT LOAD / EVAL after the first NOSCRIPT
        assert observer.zcard(key) == 0
    finally:
        observer.delete(key)
        observer.close()


def test_a_finished_lease_is_given_back_within_the_release_delay_without_another_call() -> None:
    from mcp_app.limits import RELEASE_DELAY_S

    observer = redis.Redis.from_url(settings.REDIS_URL)
    key = slot_key(PRINCIPAL, PROJECT)

    async def run() -> tuple[int, int]:
        limiter = _limiter(settings.REDIS_URL)
        try:
            lease = await limiter.acquire(PRINCIPAL, PROJECT)
            limiter.release_soon(lease)
            right_after = int(observer.zcard(key))
            deadline = time.monotonic() + RELEASE_DELAY_S + 1.0
            while observer.zcard(key) and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            return right_after, int(observer.zcard(key))
        finally:
            await limiter.aclose()

    try:
        right_after, later = asyncio.run(run())
        assert (right_after, later) == (1, 0)  # held until the flush, then free with no other call
    finally:
        observer.delete(key)
        observer.close()
