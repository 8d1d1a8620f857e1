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

from contexts.errors import RateLimited
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
            slot = await limiter.acquire(PRINCIPAL, PROJECT)
            with redis.Redis.from_url(url) as observer:
                held = int(observer.zcard(slot.key))
            await limiter.release(slot)
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
            slot = await limiter.acquire(PRINCIPAL, PROJECT)
            try:
                return int(own.zcard(key)), int(db0.zcard(key))
            finally:
                await limiter.release(slot)
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
            slot = await limiter.acquire(PRINCIPAL, PROJECT)
            elapsed = time.monotonic() - started
            await limiter.release(slot)
            return elapsed
        finally:
            await limiter.aclose()

    try:
        assert asyncio.run(run()) < 0.5  # not the 2 s timeout
    finally:
        admin.close()


def _counting(limiter: ConcurrencyLimiter) -> list[str]:
    """The commands ``limiter``'s own client sends, recorded (a count, nothing replaced)."""
    sent: list[str] = []
    execute = limiter._redis.execute_command

    async def counting(*args: object, **options: object) -> object:
        sent.append(str(args[0]).upper())
        return await execute(*args, **options)

    limiter._redis.execute_command = counting  # type: ignore[method-assign]
    return sent


def test_back_to_back_calls_of_one_tenant_reuse_the_idle_slot_without_redis() -> None:
    """Released with ``release_soon``, a slot stays held, idle, and the key's next call reuses it: 20
    back-to-back calls cost one acquire script, the set never holds more than the one slot (never counted
    free early), and the slot is given back (one ``ZREM``) when the limiter closes."""
    observer = redis.Redis.from_url(settings.REDIS_URL)
    key = slot_key(PRINCIPAL, PROJECT)

    async def run() -> tuple[list[int], list[str], set[str]]:
        limiter = _limiter(settings.REDIS_URL)
        sent = _counting(limiter)
        held: list[int] = []
        ids: set[str] = set()
        try:
            for _ in range(20):
                slot = await limiter.acquire(PRINCIPAL, PROJECT)
                ids.add(slot.slot_id)
                held.append(int(observer.zcard(key)))
                assert limiter.release_soon(slot)
            return held, sent, ids
        finally:
            await limiter.aclose()

    try:
        held, sent, ids = asyncio.run(run())
        assert held == [1] * 20 and len(ids) == 1  # one slot, held throughout, reused
        assert len([c for c in sent if c.startswith("EVAL")]) in (1, 2)  # + one EVAL after a first NOSCRIPT
        assert sent.count("ZREM") == 1 and len(sent) <= 3
        assert observer.zcard(key) == 0
    finally:
        observer.delete(key)
        observer.close()


def test_an_idle_slot_is_reused_only_by_its_own_tenant_and_still_counts_for_other_processes() -> None:
    """An idle slot is the tenant's: another principal's call acquires from Redis; and while it is idle,
    another process (a second limiter) sees it held — with the limit of 2 and one call live, the other
    process gets one slot, not two."""
    observer = redis.Redis.from_url(settings.REDIS_URL)
    key, other_key = slot_key(PRINCIPAL, PROJECT), slot_key(PRINCIPAL + 1, PROJECT)

    async def run() -> tuple[bool, int, list[bool]]:
        # The idle slot would be given back after 5 ms: a longer delay keeps the test independent of timing.
        mine = ConcurrencyLimiter(settings.REDIS_URL, max_concurrent=2, lease_s=10, release_delay_s=30)
        theirs = _limiter(settings.REDIS_URL)
        try:
            first = await mine.acquire(PRINCIPAL, PROJECT)
            second = await mine.acquire(PRINCIPAL, PROJECT)
            mine.release_soon(second)  # idle, still held
            other = await mine.acquire(PRINCIPAL + 1, PROJECT)
            crossed = other.slot_id in (first.slot_id, second.slot_id)
            held = int(observer.zcard(key))
            outcomes = []
            for _ in range(2):
                try:
                    await theirs.acquire(PRINCIPAL, PROJECT)
                    outcomes.append(True)
                except RateLimited:
                    outcomes.append(False)
            return crossed, held, outcomes
        finally:
            await mine.aclose()
            await theirs.aclose()

    try:
        crossed, held, outcomes = asyncio.run(run())
        assert not crossed
        assert held == 2  # the live call's slot and the idle one
        assert outcomes == [False, False]  # both of the limit's slots are held by the first process
    finally:
        observer.delete(key, other_key)
        observer.close()


def test_a_slot_redis_lost_is_never_reused() -> None:
    """A slot that is gone from Redis (expired and reaped while a refresh failed — here deleted by hand)
    is dropped by the next heartbeat: the tenant's next call acquires a new slot from Redis."""
    observer = redis.Redis.from_url(settings.REDIS_URL)
    key = slot_key(PRINCIPAL, PROJECT)

    async def run() -> tuple[str, str, int]:
        limiter = ConcurrencyLimiter(settings.REDIS_URL, max_concurrent=2, lease_s=0.3)  # heartbeat every 0.1 s
        try:
            slot = await limiter.acquire(PRINCIPAL, PROJECT)
            observer.zrem(key, slot.slot_id)  # Redis no longer holds it
            await asyncio.sleep(0.25)  # a heartbeat ran and found it gone
            limiter.release_soon(slot)
            again = await limiter.acquire(PRINCIPAL, PROJECT)
            return slot.slot_id, again.slot_id, int(observer.zcard(key))
        finally:
            await limiter.aclose()

    try:
        lost, again, held = asyncio.run(run())
        assert again != lost and held == 1  # a fresh slot from Redis, the lost one not counted
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
            slot = await limiter.acquire(PRINCIPAL, PROJECT)
            limiter.release_soon(slot)
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
