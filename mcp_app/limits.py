"""In-flight query slots per principal × project, shared by every server process (SPEC R-PAGE-7).

Redis holds one sorted set per (principal, project): members are slot leases (random ids), scores are
the lease's expiry time in milliseconds. Acquiring runs one Lua script — drop expired leases, count
the rest, add ours if there is room — so two processes can never both take the last slot. A running
call refreshes its lease every third of the lease time; a process that dies stops refreshing, and its
slot frees itself when the lease runs out (it can never leak for good). Over the limit the caller gets
``RateLimited`` immediately — there is no queue. Leases are compared on Redis's clock (``TIME`` inside
the scripts).
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass

import anyio
import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

from contexts.errors import DataSourceUnavailable, RateLimited

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


class LeaseHolder:
    """The lease of one call, set and cleared by the call's worker thread and read by the heartbeat
    on the event loop. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lease: Lease | None = None

    def set(self, lease: Lease | None) -> None:
        with self._lock:
            self._lease = lease

    def get(self) -> Lease | None:
        with self._lock:
            return self._lease


class ConcurrencyLimiter:
    """Acquire/release in-flight slots in Redis (one instance per process).

    Acquire and release are blocking calls made by the call's worker thread (the one that also resolves
    the scope and runs the query, so a call crosses threads once); the lease is kept alive from the
    event loop by ``keep_alive`` while the call runs."""

    def __init__(self, redis_url: str, *, max_concurrent: int, lease_s: float) -> None:
        self._sync = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
        self._acquire = self._sync.register_script(_ACQUIRE)
        self._redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
        self._refresh = self._redis.register_script(_REFRESH)
        self.max_concurrent = max_concurrent
        self.lease_ms = int(lease_s * 1000)

    def acquire_blocking(self, principal_id: int, project_id: int) -> Lease:
        """Take one slot or raise ``RateLimited`` at once if all are taken (``DataSourceUnavailable``
        when Redis cannot be reached: fail closed)."""
        lease = Lease(key=slot_key(principal_id, project_id), lease_id=secrets.token_hex(12))
        try:
            acquired = self._acquire(keys=[lease.key], args=[self.max_concurrent, self.lease_ms, lease.lease_id])
        except RedisError as exc:
            logger.warning("concurrency limiter unavailable error_class=%s", type(exc).__name__)
            raise DataSourceUnavailable("The query limiter is temporarily unavailable; retry shortly.") from None
        if not acquired:
            raise RateLimited(
                f"At most {self.max_concurrent} queries may run at once for this principal and project; retry "
                "when one finishes."
            )
        return lease

    def release_blocking(self, lease: Lease) -> None:
        try:
            self._sync.zrem(lease.key, lease.lease_id)
        except RedisError as exc:  # the lease then expires on its own
            logger.warning("slot release failed error_class=%s", type(exc).__name__)

    async def keep_alive(self, holder: LeaseHolder) -> None:
        """Refresh the holder's lease every third of the lease time until cancelled."""
        while True:
            await anyio.sleep(self.lease_ms / 3000)
            lease = holder.get()
            if lease is None:
                continue
            try:
                await self._refresh(keys=[lease.key], args=[self.lease_ms, lease.lease_id])
            except RedisError as exc:
                logger.warning("slot heartbeat failed error_class=%s", type(exc).__name__)

    async def aclose(self) -> None:
        await self._redis.aclose()
        self._sync.close()


def limiter_from_settings() -> ConcurrencyLimiter:
    return ConcurrencyLimiter(
        settings.REDIS_URL,
        max_concurrent=settings.TJWATER_MCP_MAX_CONCURRENT,
        lease_s=settings.TJWATER_MCP_SLOT_LEASE_S,
    )
