"""In-flight query slots per principal × project, shared by every server process (SPEC R-PAGE-7).

Redis holds one sorted set per (principal, project): members are held slots (random ids), scores are
each slot's expiry time in milliseconds. Acquiring runs one Lua script — drop expired slots, count
the rest, add ours if there is room — so two processes can never both take the last slot. A running
process refreshes its calls' slots every third of the lease time; a process that dies stops
refreshing, and its slots free themselves when their lease time runs out (they can never leak for good).
Over the limit the caller gets ``RateLimited`` immediately — there is no queue. Held slots are compared
on Redis's clock (``TIME`` inside the scripts).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import anyio
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError

from contexts.errors import DataSourceUnavailable, RateLimited
from contexts.slots import ACQUIRE_SCRIPT, REFRESH_SCRIPT, slot_key
from tjwater import metrics, telemetry

logger = logging.getLogger(__name__)

#: Per command: connect and reply timeouts (seconds) of the limiter's Redis client.
REDIS_TIMEOUT_S = 2.0

#: How long a finished call's slot may wait in the process for the next acquire of its key to take it
#: along before it is given back on its own (other processes see the slot held at most this much longer).
RELEASE_DELAY_S = 0.005

# The scripts and the key are shared with the REST edge (``contexts.slots``): one principal × project
# has one set of slots, whichever edge its calls come through.
_ACQUIRE = ACQUIRE_SCRIPT
_REFRESH = REFRESH_SCRIPT


@dataclass(frozen=True, slots=True)
class HeldSlot:
    """One held in-flight slot."""

    key: str
    slot_id: str


def redis_client(url: str) -> aioredis.Redis:
    """redis-py's asyncio client (hiredis parses the replies) for ``url``: ``redis://``, ``rediss://``
    (TLS — credentials never in clear), ``unix://`` and the database index from the path or ``?db=``,
    all as redis-py reads them. A connection that died while idle (a Redis restart, ``CLIENT KILL``, a
    dropped link) is noticed when it is taken from the pool and replaced at once; one that dies during a
    command is retried once on a new connection — never left to wait for the timeout."""
    return aioredis.Redis.from_url(
        url,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )


class ConcurrencyLimiter:
    """Acquire/release in-flight slots in Redis (one instance per process), on the event loop.

    One round trip to acquire (the Lua script, ``EVALSHA``, loaded on the first ``NOSCRIPT``). Releasing
    costs a call no round trip of its own: the finished slot waits at most ``RELEASE_DELAY_S`` in the
    process, and the next acquire of the same key takes it along (the script removes it before counting)
    — else one pipelined ``ZREM`` per key gives back everything waiting. So a slot is never counted free
    early, only up to ``RELEASE_DELAY_S`` late for other processes; at c=1 a call costs one Redis round
    trip instead of two (the profile is in ``mcp_app/README.md``). Live slots are refreshed by one task
    per process (``run_heartbeat``): every third of the lease time, all of them in one pipelined round
    trip — a call itself costs no timer. A retried acquire (the link dropped after the script ran) can
    hold one extra slot until it expires: fewer slots for a moment, never more."""

    def __init__(self, redis_url: str, *, max_concurrent: int, lease_s: float) -> None:
        self._redis = redis_client(redis_url)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._refresh = self._redis.register_script(_REFRESH)
        self.max_concurrent = max_concurrent
        self.lease_ms = int(lease_s * 1000)
        self.live: set[HeldSlot] = set()
        self._releases: set[asyncio.Task[Any]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        # Finished slots not yet given back, by key (``release_soon``), and the timer that flushes them.
        self._finished: dict[str, list[str]] = {}
        self._flush_timer: asyncio.TimerHandle | None = None

    @telemetry.traced("redis slot.acquire", **{"db.system.name": "redis"})
    async def acquire(self, principal_id: int, project_id: int) -> HeldSlot:
        """Take one slot or raise ``RateLimited`` at once if all are taken (``DataSourceUnavailable``
        when Redis cannot be reached: fail closed)."""
        slot = HeldSlot(key=slot_key(principal_id, project_id), slot_id=secrets.token_hex(12))
        finished = self._finished.pop(slot.key, ())
        try:
            acquired = await self._acquire(
                keys=[slot.key], args=[self.max_concurrent, self.lease_ms, slot.slot_id, *finished]
            )
        except RedisError as exc:
            self._give_back_later(slot.key, finished)  # the script may not have run: ZREM is idempotent
            logger.warning("concurrency limiter unavailable error_class=%s", type(exc).__name__)
            raise DataSourceUnavailable("The query limiter is temporarily unavailable; retry shortly.") from None
        except asyncio.CancelledError:
            # The script may have taken the slot before the call was cancelled: give it back.
            self._give_back_later(slot.key, [*finished, slot.slot_id])
            raise
        if not acquired:
            metrics.LIMITER_REFUSALS_TENANT.inc()
            raise RateLimited(
                f"At most {self.max_concurrent} queries may run at once for this principal and project; retry "
                "when one finishes."
            )
        self.live.add(slot)
        self._ensure_heartbeat()
        return slot

    def release_soon(self, slot: HeldSlot) -> bool:
        """Give the slot back without the call waiting for Redis: the slot rides on the next acquire of
        its key, or is flushed within ``RELEASE_DELAY_S``. Always True (the signature keeps the fallback
        to ``await release``)."""
        self.live.discard(slot)
        self._give_back_later(slot.key, (slot.slot_id,))
        return True

    def _give_back_later(self, key: str, slot_ids: Any) -> None:
        if not slot_ids:
            return
        self._finished.setdefault(key, []).extend(slot_ids)
        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(RELEASE_DELAY_S, self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_timer = None
        if not self._finished:  # the next acquires took every finished slot along: nothing to send
            return
        task = asyncio.get_running_loop().create_task(self.flush())
        self._releases.add(task)  # a strong reference until it is done
        task.add_done_callback(self._releases.discard)

    async def flush(self) -> None:
        """Give back every finished slot still waiting: one ``ZREM`` per key, pipelined."""
        finished, self._finished = self._finished, {}
        if not finished:
            return
        try:
            if len(finished) == 1:
                [(key, ids)] = finished.items()
                await self._redis.zrem(key, *ids)
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for key, ids in finished.items():
                        pipe.zrem(key, *ids)
                    await pipe.execute()
        except RedisError as exc:  # the slots then expire on their own
            logger.warning("slot release failed error_class=%s", type(exc).__name__)

    async def _zrem(self, slot: HeldSlot) -> None:
        try:
            await self._redis.zrem(slot.key, slot.slot_id)
        except RedisError as exc:  # the slot then expires on its own
            logger.warning("slot release failed error_class=%s", type(exc).__name__)

    async def release(self, slot: HeldSlot) -> None:
        """Give the slot back (shielded: a cancelled call still releases)."""
        self.live.discard(slot)
        with anyio.CancelScope(shield=True):
            await self._zrem(slot)

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self.run_heartbeat())

    async def _refresh_all(self, slots: list[HeldSlot]) -> list[Any]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for slot in slots:
                pipe.evalsha(self._refresh.sha, 1, slot.key, self.lease_ms, slot.slot_id)
            return list(await pipe.execute(raise_on_error=False))

    async def run_heartbeat(self) -> None:
        """Refresh every live slot every third of the lease time (one pipelined round trip)."""
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            slots = list(self.live)
            if not slots:
                continue
            try:
                replies = await self._refresh_all(slots)
                if any(isinstance(r, NoScriptError) for r in replies):
                    await self._redis.script_load(_REFRESH)
                    await self._refresh_all(slots)
            except RedisError as exc:
                logger.warning("slot heartbeat failed error_class=%s", type(exc).__name__)

    async def aclose(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        await self.flush()
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
        await self._redis.aclose()


def limiter_from_settings() -> ConcurrencyLimiter:
    return ConcurrencyLimiter(
        settings.REDIS_URL,
        max_concurrent=settings.TJWATER_MCP_MAX_CONCURRENT,
        lease_s=settings.TJWATER_MCP_SLOT_LEASE_S,
    )
