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

#: How long a finished call's slot stays held in the process, idle, for the next call of its key to reuse
#: before it is given back on its own (other processes and the REST edge see the slot held at most this much
#: longer). Under load a tenant's next call reaches the limiter several ms after its last one finished — the
#: event loop serves the other calls meanwhile — so the window is set from the curve measured at c=8
#: (mcp_app/README.md "Measuring", ninth session).
RELEASE_DELAY_S = 0.02

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
    costs a call no round trip of its own: a finished call's slot stays held, idle, for at most
    ``RELEASE_DELAY_S``; the next call of the same principal × project in this process *reuses* it (no
    Redis command at all — the slot never stopped being counted in Redis), else one pipelined ``ZREM``
    per key gives back everything idle. So a slot is never counted free early, only up to
    ``RELEASE_DELAY_S`` late for other processes, and back-to-back calls of one tenant cost no Redis round
    trip (the profile is in ``mcp_app/README.md``). Live and idle slots are refreshed by one task per
    process (``run_heartbeat``): every third of the lease time, all of them in one pipelined round trip; a
    slot Redis no longer holds (expired while a refresh failed) is never reused. A retried acquire (the
    link dropped after the script ran) can hold one extra slot until it expires: fewer slots for a
    moment, never more."""

    def __init__(
        self, redis_url: str, *, max_concurrent: int, lease_s: float, release_delay_s: float = RELEASE_DELAY_S
    ) -> None:
        self._redis = redis_client(redis_url)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._refresh = self._redis.register_script(_REFRESH)
        self.max_concurrent = max_concurrent
        self.lease_ms = int(lease_s * 1000)
        self.release_delay_s = release_delay_s
        self.live: set[HeldSlot] = set()
        self._releases: set[asyncio.Task[Any]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        # Finished calls' slots, still held in Redis, by key, with when each became idle (``release_soon``):
        # reused by the key's next call or given back by the flush timer.
        self._idle: dict[str, list[tuple[HeldSlot, float]]] = {}
        # HeldSlot ids that may or may not be held (an acquire that failed or was cancelled after sending its
        # script): never reused, removed by the key's next acquire or by the flush.
        self._finished: dict[str, list[str]] = {}
        self._flush_timer: asyncio.TimerHandle | None = None

    async def acquire(self, principal_id: int, project_id: int) -> HeldSlot:
        """Take one slot — an idle one of this process for the same principal × project if there is one
        (``reuse``), else from Redis — or raise ``RateLimited`` at once if all are taken
        (``DataSourceUnavailable`` when Redis cannot be reached: fail closed)."""
        key = slot_key(principal_id, project_id)
        slot = self._take_idle(key)
        if slot is not None:
            return slot
        return await self._acquire_in_redis(key)

    def reuse(self, principal_id: int, project_id: int) -> HeldSlot | None:
        """A slot this process holds idle for the principal × project (a finished call's, at most
        ``RELEASE_DELAY_S`` ago), now live again; None when there is none. No Redis command: the slot
        stayed in the key's set the whole time, so the count other processes see never dropped."""
        return self._take_idle(slot_key(principal_id, project_id))

    def _take_idle(self, key: str) -> HeldSlot | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        slot, _ = idle.pop()
        if not idle:
            del self._idle[key]
        self.live.add(slot)
        return slot

    @telemetry.traced("redis slot.acquire", **{"db.system.name": "redis"})
    async def _acquire_in_redis(self, key: str) -> HeldSlot:
        slot = HeldSlot(key=key, slot_id=secrets.token_hex(12))
        finished = self._finished.pop(key, ())
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
        """Give the slot back without the call waiting for Redis: it stays held, idle, for the key's next
        call in this process to reuse, and is given back (``ZREM``) once idle for ``RELEASE_DELAY_S``.
        Always True (the signature keeps the fallback to ``await release``)."""
        if slot not in self.live:
            return True  # given up already (Redis no longer held it): nothing to keep or give back
        self.live.discard(slot)
        loop = asyncio.get_running_loop()
        self._idle.setdefault(slot.key, []).append((slot, loop.time()))
        self._arm_flush(loop)
        return True

    def _give_back_later(self, key: str, slot_ids: Any) -> None:
        if not slot_ids:
            return
        self._finished.setdefault(key, []).extend(slot_ids)
        self._arm_flush(asyncio.get_running_loop())

    def _arm_flush(self, loop: asyncio.AbstractEventLoop, delay: float | None = None) -> None:
        if self._flush_timer is None:
            self._flush_timer = loop.call_later(self.release_delay_s if delay is None else delay, self._flush_soon)

    def _due(self, now: float | None) -> dict[str, list[str]]:
        """Take what is to be given back now: every id in ``_finished`` and the slots idle for
        ``RELEASE_DELAY_S`` or more (all idle ones when ``now`` is None)."""
        due, self._finished = self._finished, {}
        for key in list(self._idle):
            keep = []
            for slot, since in self._idle[key]:
                if now is None or now - since >= self.release_delay_s:
                    due.setdefault(key, []).append(slot.slot_id)
                else:
                    keep.append((slot, since))
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        return due

    def _flush_soon(self) -> None:
        self._flush_timer = None
        loop = asyncio.get_running_loop()
        # A little early is fine: the timer may fire a hair before the delay has passed on the loop's clock.
        due = self._due(loop.time() + self.release_delay_s / 10)
        if self._idle:  # slots that became idle since: their own turn
            first = min(since for idle in self._idle.values() for _, since in idle)
            self._arm_flush(loop, max(0.0, first + self.release_delay_s - loop.time()))
        if not due:  # the next calls reused every idle slot: nothing to send
            return
        task = loop.create_task(self._give_back(due))
        self._releases.add(task)  # a strong reference until it is done
        task.add_done_callback(self._releases.discard)

    async def flush(self) -> None:
        """Give back every idle slot and every id still waiting: one ``ZREM`` per key, pipelined."""
        await self._give_back(self._due(None))

    async def _give_back(self, finished: dict[str, list[str]]) -> None:
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
        """Refresh every live and idle slot every third of the lease time (one pipelined round trip). A
        slot Redis no longer holds (it expired while Redis was unreachable, and was reaped) is dropped:
        an idle one is never reused, a live one is not given back twice."""
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            slots = [*self.live, *(slot for idle in self._idle.values() for slot, _ in idle)]
            if not slots:
                continue
            try:
                replies = await self._refresh_all(slots)
                if any(isinstance(r, NoScriptError) for r in replies):
                    await self._redis.script_load(_REFRESH)
                    replies = await self._refresh_all(slots)
            except RedisError as exc:
                logger.warning("slot heartbeat failed error_class=%s", type(exc).__name__)
                continue
            lost = {slot for slot, reply in zip(slots, replies, strict=True) if reply == 0}
            if lost:
                logger.warning("held slots lost count=%d", len(lost))
                self._forget(lost)

    def _forget(self, lost: set[HeldSlot]) -> None:
        self.live -= lost
        for key in list(self._idle):
            kept = [(slot, since) for slot, since in self._idle[key] if slot not in lost]
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]

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
