"""In-flight query slots per principal × project, shared by every server process (SPEC R-PAGE-7).

Redis holds one sorted set per (principal, project): members are slot leases (random ids), scores are
the lease's expiry time in milliseconds. Acquiring runs one Lua script — drop expired leases, count
the rest, add ours if there is room — so two processes can never both take the last slot. A running
process refreshes its calls' leases every third of the lease time; a process that dies stops
refreshing, and its slots free themselves when the leases run out (they can never leak for good).
Over the limit the caller gets ``RateLimited`` immediately — there is no queue. Leases are compared
on Redis's clock (``TIME`` inside the scripts).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass

import anyio
from django.conf import settings

from contexts.errors import DataSourceUnavailable, RateLimited
from mcp_app.redis_lite import RedisLite, RedisLiteError, ReplyError

logger = logging.getLogger(__name__)

# Redis's own clock (TIME inside the script, allowed since Redis 5's effects replication): leases from
# several hosts are compared on one clock, and acquiring costs one round trip.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"""

# Refresh only a lease that still exists (XX): an expired-and-reaped lease is not revived.
_REFRESH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return n
"""


def slot_key(principal_id: int, project_id: int) -> str:
    return f"tjwater:mcp:inflight:{principal_id}:{project_id}"


@dataclass(frozen=True, slots=True)
class Lease:
    """One held in-flight slot."""

    key: str
    lease_id: str


class _Script:
    """A Lua script run by ``EVALSHA`` (loaded on the first ``NOSCRIPT``)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def command(self, keys: list[str], args: list[object]) -> tuple[object, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    async def __call__(self, redis: RedisLite, keys: list[str], args: list[object]) -> object:
        try:
            return await redis.execute(*self.command(keys, args))
        except ReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            await redis.execute("SCRIPT", "LOAD", self.source)
            return await redis.execute(*self.command(keys, args))


class ConcurrencyLimiter:
    """Acquire/release in-flight slots in Redis (one instance per process), on the event loop.

    One round trip to acquire (the Lua script), one to release (ZREM), both on one pipelined connection
    (``mcp_app.redis_lite``). Live leases are refreshed by one task per process (``run_heartbeat``):
    every third of the lease time, all of them in one round trip — a call itself costs no task and no
    timer."""

    def __init__(self, redis_url: str, *, max_concurrent: int, lease_s: float) -> None:
        self._redis = RedisLite(redis_url, timeout_s=2.0)
        self._acquire = _Script(_ACQUIRE)
        self._refresh = _Script(_REFRESH)
        self.max_concurrent = max_concurrent
        self.lease_ms = int(lease_s * 1000)
        self.live: set[Lease] = set()
        self._heartbeat: asyncio.Task[None] | None = None

    async def acquire(self, principal_id: int, project_id: int) -> Lease:
        """Take one slot or raise ``RateLimited`` at once if all are taken (``DataSourceUnavailable``
        when Redis cannot be reached: fail closed)."""
        lease = Lease(key=slot_key(principal_id, project_id), lease_id=secrets.token_hex(12))
        try:
            acquired = await self._acquire(
                self._redis, [lease.key], [self.max_concurrent, self.lease_ms, lease.lease_id]
            )
        except RedisLiteError as exc:
            logger.warning("concurrency limiter unavailable error_class=%s", type(exc).__name__)
            raise DataSourceUnavailable("The query limiter is temporarily unavailable; retry shortly.") from None
        except asyncio.CancelledError:
            # The script may have taken the slot before the call was cancelled: give it back.
            asyncio.get_running_loop().create_task(self.release(lease))
            raise
        if not acquired:
            raise RateLimited(
                f"At most {self.max_concurrent} queries may run at once for this principal and project; retry "
                "when one finishes."
            )
        self.live.add(lease)
        self._ensure_heartbeat()
        return lease

    def release_soon(self, lease: Lease) -> bool:
        """Give the slot back without waiting for Redis's reply: the ZREM is on the wire before the call
        answers (and before any later command of this process), so the round trip is off the call's
        critical path. False when not connected (then ``await release``)."""
        reply = self._redis.send_nowait("ZREM", lease.key, lease.lease_id)
        if reply is None:
            return False
        self.live.discard(lease)
        reply.add_done_callback(_log_release_failure)
        return True

    async def release(self, lease: Lease) -> None:
        """Give the slot back (shielded: a cancelled call still releases)."""
        self.live.discard(lease)
        with anyio.CancelScope(shield=True):
            try:
                await self._redis.execute("ZREM", lease.key, lease.lease_id)
            except RedisLiteError as exc:  # the lease then expires on its own
                logger.warning("slot release failed error_class=%s", type(exc).__name__)

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self.run_heartbeat())

    async def run_heartbeat(self) -> None:
        """Refresh every live lease every third of the lease time (one pipelined round trip)."""
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            leases = list(self.live)
            if not leases:
                continue
            try:
                commands = [self._refresh.command([lease.key], [self.lease_ms, lease.lease_id]) for lease in leases]
                replies = await self._redis.pipeline(commands)
                if any(isinstance(r, ReplyError) and str(r).startswith("NOSCRIPT") for r in replies):
                    await self._redis.execute("SCRIPT", "LOAD", self._refresh.source)
                    await self._redis.pipeline(commands)
            except RedisLiteError as exc:
                logger.warning("slot heartbeat failed error_class=%s", type(exc).__name__)

    async def aclose(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        await self._redis.aclose()


def _log_release_failure(reply: asyncio.Future[object]) -> None:
    if not reply.cancelled() and reply.exception() is not None:  # the lease then expires on its own
        logger.warning("slot release failed error_class=%s", type(reply.exception()).__name__)


def limiter_from_settings() -> ConcurrencyLimiter:
    return ConcurrencyLimiter(
        settings.REDIS_URL,
        max_concurrent=settings.TJWATER_MCP_MAX_CONCURRENT,
        lease_s=settings.TJWATER_MCP_SLOT_LEASE_S,
    )
