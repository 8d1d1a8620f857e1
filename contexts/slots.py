"""In-flight query slots per principal × project (SPEC R-PAGE-7) — the Redis side every edge shares.

Redis holds one sorted set per (principal, project): members are slot leases (random ids), scores are the
lease's expiry time in milliseconds on Redis's own clock. ``ACQUIRE_SCRIPT`` drops expired leases, counts
the rest and adds one if there is room, atomically; ``REFRESH_SCRIPT`` extends a lease that still exists.
The MCP edge runs them with its asyncio client and a per-process heartbeat (``mcp_app.limits``); the REST
data API runs them here, synchronously (``rest_slot``), on the same keys — so a principal has at most
``TJWATER_MCP_MAX_CONCURRENT`` queries in flight on a project whichever edge they come through.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from redis.exceptions import RedisError

from contexts.errors import DataSourceUnavailable, RateLimited
from contexts.redis_script import LazyScript

logger = logging.getLogger(__name__)

# Redis's own clock (TIME inside the script, allowed since Redis 5's effects replication): leases from
# several hosts are compared on one clock, and acquiring costs one round trip.
# ARGV[4..]: leases of this key to give back first (a process's finished calls whose release rides on its
# next acquire of the key, ``mcp_app.limits``); none from the REST edge.
ACQUIRE_SCRIPT = """
if #ARGV > 3 then
  redis.call('ZREM', KEYS[1], unpack(ARGV, 4))
end
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

# Refresh only a lease that still exists (XX): an expired-and-reaped lease is not revived. Returns 1 when
# the lease was there (refreshed), 0 when it is gone (the process then never reuses it).
REFRESH_SCRIPT = """
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1
"""

#: A REST request holds its slot without a heartbeat, so its lease covers the whole query budget plus a
#: grace: a process killed mid-request frees the slot when the lease runs out.
REST_LEASE_GRACE_S = 5


def slot_key(principal_id: int, project_id: int) -> str:
    return f"tjwater:mcp:inflight:{principal_id}:{project_id}"


_acquire = LazyScript(ACQUIRE_SCRIPT, timeout_s=2.0)


def reset() -> None:
    """Forget the process's client (tests that change ``REDIS_URL``)."""
    _acquire.reset()


@contextmanager
def rest_slot(principal_id: int, project_id: int) -> Iterator[None]:
    """Hold one of the principal's in-flight slots on the project for a REST request, or refuse at once
    with ``RateLimited`` (all taken) / ``DataSourceUnavailable`` (Redis unreachable: fail closed, as the
    MCP edge does)."""
    client, acquire = _acquire.get()
    key, lease_id = slot_key(principal_id, project_id), secrets.token_hex(12)
    lease_ms = (settings.TJWATER_MCP_QUERY_BUDGET_S + REST_LEASE_GRACE_S) * 1000
    limit = settings.TJWATER_MCP_MAX_CONCURRENT
    try:
        acquired = acquire(keys=[key], args=[limit, lease_ms, lease_id])
    except RedisError as exc:
        logger.warning("concurrency limiter unavailable error_class=%s", type(exc).__name__)
        raise DataSourceUnavailable("The query limiter is temporarily unavailable; retry shortly.") from None
    if not acquired:
        raise RateLimited(
            f"At most {limit} queries may run at once for this principal and project; retry when one finishes."
        )
    try:
        yield
    finally:
        try:
            client.zrem(key, lease_id)
        except RedisError as exc:  # the lease then expires on its own
            logger.warning("slot release failed error_class=%s", type(exc).__name__)
