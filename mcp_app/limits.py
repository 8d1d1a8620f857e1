"""In-flight query slots per principal × project, shared by every server process (SPEC R-PAGE-7).

Redis holds one sorted set per (principal, project): members are slot leases (random ids), scores are
the lease's expiry time in milliseconds. Acquiring runs one Lua script — drop expired leases, count
the rest, add ours if there is room — so two processes can never both take the last slot. A running
call refreshes its lease every third of the lease time; a process that dies stops refreshing, and its
slot frees itself when the lease runs out (it can never leak for good). Over the limit the caller gets
``RateLimited`` immediately — there is no queue.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

from contexts.errors import DataSourceUnavailable, RateLimited

logger = logging.getLogger(__name__)

_ACQUIRE = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
return 1
"""

# Refresh only a lease that still exists (XX): an expired-and-reaped lease is not revived.
_REFRESH = """
local now = tonumber(ARGV[1])
local n = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return n
"""


def slot_key(principal_id: int, project_id: int) -> str:
    return f"tjwater:mcp:inflight:{principal_id}:{project_id}"


class ConcurrencyLimiter:
    """Acquire/release in-flight slots in Redis (one instance per process)."""

    def __init__(self, redis_url: str, *, max_concurrent: int, lease_s: float) -> None:
        self._redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._refresh = self._redis.register_script(_REFRESH)
        self.max_concurrent = max_concurrent
        self.lease_ms = int(lease_s * 1000)

    async def _now_ms(self) -> int:
        # Redis's clock, not ours: leases from several hosts are compared on one clock.
        seconds, micros = await self._redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    @asynccontextmanager
    async def slot(self, principal_id: int, project_id: int) -> AsyncIterator[None]:
        """Hold one slot for the body; raise ``RateLimited`` at once if all are taken."""
        key = slot_key(principal_id, project_id)
        lease = secrets.token_hex(12)
        try:
            acquired = await self._acquire(
                keys=[key], args=[await self._now_ms(), self.max_concurrent, self.lease_ms, lease]
            )
        except RedisError as exc:
            logger.warning("concurrency limiter unavailable error_class=%s", type(exc).__name__)
            raise DataSourceUnavailable("The query limiter is temporarily unavailable; retry shortly.") from None
        if not acquired:
            raise RateLimited(
                f"At most {self.max_concurrent} queries may run at once for this principal and project; retry "
                "when one finishes."
            )
        # The heartbeat is a plain background task, not a task group around the body: exceptions of the
        # body must reach the caller unwrapped (a task group would wrap them in an ExceptionGroup).
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(key, lease))
        try:
            yield
        finally:
            heartbeat.cancel()
            with anyio.CancelScope(shield=True):
                try:
                    await self._redis.zrem(key, lease)
                except RedisError as exc:  # the lease then expires on its own
                    logger.warning("slot release failed error_class=%s", type(exc).__name__)

    async def _heartbeat(self, key: str, lease: str) -> None:
        while True:
            await anyio.sleep(self.lease_ms / 3000)
            try:
                await self._refresh(keys=[key], args=[await self._now_ms(), self.lease_ms, lease])
            except RedisError as exc:
                logger.warning("slot heartbeat failed error_class=%s", type(exc).__name__)

    async def aclose(self) -> None:
        await self._redis.aclose()


def limiter_from_settings() -> ConcurrencyLimiter:
    return ConcurrencyLimiter(
        settings.REDIS_URL,
        max_concurrent=settings.TJWATER_MCP_MAX_CONCURRENT,
        lease_s=settings.TJWATER_MCP_SLOT_LEASE_S,
    )
