"""The process's read-only query connections for ``/mcp`` (a psycopg ``AsyncConnectionPool`` with
session-level read-only and budget), its tool-query slots, and one call's connection (``CallConnection``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import anyio
import psycopg
from django.contrib.gis.db.models.fields import get_srid_info
from django.db import connections
from psycopg.pq import Format
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from contexts.errors import DataSourceUnavailable
from mcp_app.executor import Execution
from mcp_app.statement_cache import DB_ALIAS, Compiled, StatementCompiler
from queries.plan import Statement
from tjwater import metrics

logger = logging.getLogger(__name__)


#: How long a call may wait for a free tool-query slot of its process before it is refused (RATE_LIMITED):
#: long enough that a burst of short calls is served (a slot frees in milliseconds), short enough that
#: a process full of slow queries refuses quickly. The wait holds nothing shared (no connection, no slot).
TOOL_SLOT_WAIT_S = 0.5

# --- the pool ------------------------------------------------------------------------------------------


def _connection_kwargs(budget_ms: int, connect_timeout_s: int) -> dict[str, Any]:
    """psycopg connect arguments for MCP query connections: Django's own parameters and adapters, plus
    session settings sent in the start-up packet (no extra round trip)."""
    wrapper = connections[DB_ALIAS]
    params = dict(wrapper.get_connection_params())
    params.pop("cursor_factory", None)  # Django's client-side-binding cursor is sync; use psycopg's own
    params["prepare_threshold"] = 2
    params["autocommit"] = True
    params["connect_timeout"] = max(2, int(connect_timeout_s))
    params["application_name"] = "tjwater-mcp-query"
    params["options"] = (
        f"-c default_transaction_read_only=on -c statement_timeout={int(budget_ms)} "
        f"-c idle_in_transaction_session_timeout={int(budget_ms)} -c TimeZone={wrapper.timezone_name}"
    )
    return params


#: The PostGIS types whose values load as text (``register_postgis_types``).
POSTGIS_TYPES = ("geometry", "geography", "raster")


def register_postgis_types(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], infos: Sequence[Any]) -> None:
    """Load PostGIS values as text and dump Django's ``PostGISAdapter`` on ``conn``, as Django's own
    connections do (its converters parse the text); ``infos`` are the ``TypeInfo`` of ``POSTGIS_TYPES``
    (None for a type the database lacks). Shared with the bench's floor (``scripts/bench_floor.py``),
    which runs the same statements on a plain psycopg connection."""
    from django.contrib.gis.db.backends.postgis.adapter import PostGISAdapter

    # Django defines it; django-stubs does not declare it.
    from django.contrib.gis.db.backends.postgis.base import postgis_adapters  # type: ignore[attr-defined]
    from psycopg.types.string import TextBinaryLoader, TextLoader

    oids = []
    for info in infos:
        if info:
            info.register(conn)
            conn.adapters.register_loader(info.oid, TextLoader)
            conn.adapters.register_loader(info.oid, TextBinaryLoader)
        oids.append(info.oid if info else None)
    text_dumper, binary_dumper = postgis_adapters(*oids)
    conn.adapters.register_dumper(PostGISAdapter, text_dumper)
    conn.adapters.register_dumper(PostGISAdapter, binary_dumper)


def register_utc_timestamps(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Load ``timestamptz`` with psycopg's own (C) loader instead of Django's when both give the same value:
    the session's time zone and Django's are UTC. Django's ``BaseTzLoader`` subclasses psycopg's *Python*
    loader to set its zone on each value; psycopg's C loader already returns aware datetimes in the
    session's zone, ``datetime.timezone.utc`` for UTC — the very object Django sets — so the rows stay
    identical to ``run_sync``'s (``tests/mcp_app/test_executor.py``) at a fraction of the cost per value
    (``mcp_app/README.md`` "Measuring", tenth session). Any other zone keeps Django's loader."""
    wrapper = connections[DB_ALIAS]
    if wrapper.timezone is not UTC or conn.info.parameter_status("TimeZone") != "UTC":
        return
    oid = psycopg.adapters.types["timestamptz"].oid
    loader = psycopg.adapters.get_loader(oid, Format.TEXT)
    if loader is not None:
        conn.adapters.register_loader(oid, loader)


def register_query_loaders(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], infos: Sequence[Any]) -> None:
    """Every loader a query connection needs on top of Django's adapters (shared with the bench's floor)."""
    register_postgis_types(conn, infos)
    register_utc_timestamps(conn)


MIN_OPEN = 2
#: psycopg_pool's ``reconnect_timeout`` for the query pool (see ``QueryDatabase``).
RECONNECT_TIMEOUT_S = 1.0


class QueryDatabase:
    """The process's pool of read-only query connections for ``/mcp`` (size ``TJWATER_MCP_DB_POOL_SIZE``).

    ``tool_slots`` connections at most run tool queries at once; the rest are kept for the context
    resolution of new calls, so that a process full of slow queries still resolves (and refuses) new
    calls at once instead of queueing them. A call that finds every tool slot taken waits at most
    ``TOOL_SLOT_WAIT_S`` and is then refused (``RATE_LIMITED``, retryable)."""

    def __init__(self, *, size: int, budget_s: float, checkout_timeout_s: float, connect_timeout_s: int) -> None:
        self.size = size
        self.reserved = 1 if size < 4 else 2
        self.tool_slots = max(1, size - self.reserved)
        self.checkout_timeout_s = checkout_timeout_s
        self.budget_s = budget_s  # per call (``Execution``)
        self.compiler = StatementCompiler()
        self._tool_slots = asyncio.Semaphore(self.tool_slots)
        self._kwargs = _connection_kwargs(int(budget_s * 1000), connect_timeout_s)
        self._geo_infos: list[Any] | None = None
        self._sweep: asyncio.Future[None] | None = None
        self.pool = AsyncConnectionPool(
            kwargs=self._kwargs,
            # Two kept open, up to ``size`` on demand (kept while busy; idle ones close after 10 min): an
            # idle process does not hold ``size`` connections of PostgreSQL's max_connections.
            min_size=min(MIN_OPEN, size),
            max_size=size,
            open=False,
            timeout=checkout_timeout_s,
            configure=self._configure,
            # While PostgreSQL is down, calls fail fast (checkout timeout) and the pool retries in the
            # background: a replacement is tried at once and once more after ~1 s (the pool's back-off),
            # then given up, and the next checkout grows the pool again. So no attempt ever sleeps in a
            # back-off longer than ~1 s — with a longer give-up time the back-off doubles (1, 2, 4, 8 s)
            # and a pool whose connections all wait in it serves nothing for that long after the
            # database is back (issue 17 item 9: recovery ≤ 2 s).
            reconnect_timeout=RECONNECT_TIMEOUT_S,
            name="tjwater-mcp-query",
        )

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """PostGIS types load as text like Django's connections (its converters parse them); UTC timestamps
        with psycopg's own loader (``register_query_loaders``)."""
        from psycopg.types import TypeInfo

        if self._geo_infos is None:
            self._geo_infos = [await TypeInfo.fetch(conn, name) for name in POSTGIS_TYPES]
        register_query_loaders(conn, self._geo_infos)

    async def open(self) -> None:
        # Not waiting: the server starts even while PostgreSQL is down (calls then answer
        # DATA_SOURCE_UNAVAILABLE, and the pool connects in the background when it comes back).
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    async def take_tool_slot(self, wait_s: float = TOOL_SLOT_WAIT_S) -> bool:
        """Take one of the process's tool-query slots: at once when one is free, else after at most
        ``wait_s`` (a short, bounded wait — never a queue). False: the process is at capacity."""
        if not self._tool_slots.locked():
            await self._tool_slots.acquire()  # free: returns without suspending
            return True
        try:
            await asyncio.wait_for(self._tool_slots.acquire(), wait_s)
        except TimeoutError:
            metrics.LIMITER_REFUSALS_PROCESS.inc()
            return False
        return True

    def tool_slot_free(self) -> bool:
        return not self._tool_slots.locked()

    def give_tool_slot(self) -> None:
        self._tool_slots.release()

    async def replace_broken(self, conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
        """``conn`` was found broken: give it back (the pool discards it and connects a replacement),
        sweep the idle connections (what broke one has usually broken all: a restart), then check out
        another. The sweep (``AsyncConnectionPool.check``: one empty query per idle connection) runs once
        for all the calls that meet a broken connection meanwhile, and only then — no call pays a check
        otherwise."""
        await self.give_back(conn)
        sweep = self._sweep
        if sweep is None or sweep.done():
            sweep = self._sweep = asyncio.ensure_future(self.pool.check())
        with anyio.CancelScope(shield=True):
            try:
                await asyncio.shield(sweep)
            except Exception as exc:  # the checkout below still answers for itself
                logger.warning("query pool sweep failed error_class=%s", type(exc).__name__)
        return await self.checkout()

    async def checkout(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await self.pool.getconn(timeout=self.checkout_timeout_s)
        except PoolTimeout:
            logger.warning("query database unavailable: no connection within %.1f s", self.checkout_timeout_s)
            raise DataSourceUnavailable() from None

    async def give_back(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        if conn is None:  # an ``Execution`` that gave its broken connection back and got none
            return
        with anyio.CancelScope(shield=True):
            await self.pool.putconn(conn)

    def call_connection(self) -> CallConnection:
        """A connection for one call, checked out by its first statement (``CallConnection``)."""
        return CallConnection(self)

    async def fetch(self, statement: Statement | Compiled) -> Any:
        """Run one statement (e.g. the context resolution) on a pooled connection."""
        compiled = statement if isinstance(statement, Compiled) else self.compiler.compile(statement)
        execution = Execution(await self.checkout(), self)
        try:
            return await execution.run(compiled, guarded=False)
        finally:
            await self.give_back(execution.conn)


class CallConnection:
    """One call's pooled connection: checked out by the first statement (the context resolution), kept
    for the tool query when a tool slot is free at once (one checkout per call instead of two), and
    given back by ``release`` (idempotent). A call that must wait for a slot gives it back first, so the
    connections reserved for resolving new calls are never held by waiting ones."""

    __slots__ = ("db", "conn")

    def __init__(self, db: QueryDatabase) -> None:
        self.db = db
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def fetch(self, statement: Statement | Compiled) -> Any:
        compiled = statement if isinstance(statement, Compiled) else self.db.compiler.compile(statement)
        if self.conn is None:
            self.conn = await self.db.checkout()
        execution = Execution(self.conn, self.db)
        try:
            return await execution.run(compiled, guarded=False)
        finally:
            self.conn = execution.conn  # the replacement, if the first one was found broken

    def take(self) -> psycopg.AsyncConnection[Any] | None:
        """The held connection, now owned by the caller (who gives it back), or None."""
        conn, self.conn = self.conn, None
        return conn

    async def release(self) -> None:
        conn = self.take()
        if conn is not None:
            await self.db.give_back(conn)


def warm_django_connection() -> None:
    """Read, in a worker thread at start-up, what compiling a queryset may ask the database for
    (server and PostGIS versions), so the event loop never opens a Django connection."""
    wrapper = connections[DB_ALIAS]
    try:
        _ = wrapper.pg_version  # type: ignore[attr-defined]  # the PostgreSQL wrapper's; stubs type the base
        ops = wrapper.ops
        if hasattr(ops, "spatial_version"):
            _ = ops.spatial_version
            # GeoDjango reads an SRID's units from spatial_ref_sys the first time a geography/distance
            # lookup compiles; cache it now (4326 is the only SRID the models use).
            get_srid_info(4326, wrapper)
    finally:
        wrapper.close()
