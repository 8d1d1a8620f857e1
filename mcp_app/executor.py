"""The async driver of query plans on the MCP hot path (STYLE "reads", issue 10).

A query service is a plan (``queries.plan``): it yields ORM statements and never does I/O. REST views,
Celery and tests run plans with ``run_sync`` through Django's connection; ``/mcp`` runs the very same
plans here, on the event loop, on a psycopg ``AsyncConnectionPool`` of its own:

- **no worker thread and no Django connection handling per call** — the statement is compiled to SQL
  (``query.get_compiler("default").as_sql()``) and executed with ``await``;
- **compiled once per statement shape** — the ORM compile of a queryset costs hundreds of µs; a shape
  (model, selected columns, joins, ordering, and the *structure* of the WHERE tree with its values taken
  out) is compiled the first time it is seen, then only its values are re-bound (see ``_Shape``).
  A shape is cached only after a second compile with unique sentinel values proved that every
  parameter of the SQL is one of the filter values (so nothing the key does not describe can vary);
  anything the walker does not understand (expressions, subqueries, GIS lookups, annotations…) is
  compiled on every call, which is always correct. LIMIT/OFFSET, which Django inlines as literals, are
  bound as parameters instead, so every page of a collection shares one shape and one prepared plan;
- **rows identical to ``run_sync``** — the connections use Django's own adapter template (jsonb loaded
  as text, timestamptz as aware UTC datetimes, PostGIS types as text) and the compiler's row converters
  are applied (geometries, JSON, …); ``tests/mcp_app/test_executor.py`` compares both drivers for every
  registry tool;
- **session-level read-only and budget** — ``default_transaction_read_only=on`` and
  ``statement_timeout`` are set in the connection's start-up packet: no BEGIN/SET/COMMIT round trips.
  The budget is the whole call's, not each statement's (issue 23 item 12): a plan's first statement
  runs under the session's timeout (the whole budget), each later one under what is left of it — the
  driver stops it in PostgreSQL (a cancel request) when that runs out, so the session's timeout is never
  changed and no ``set_config``/``RESET`` round trip is spent per statement (``Execution``);
  Statements run in autocommit: a plan that yields several statements (a count and a page) reads one
  snapshot per statement. Accepted for the current families — the network model changes only by a
  re-import, so at worst one call's ``total`` and page straddle an import, and the result says when it
  was read (``queried_at``); a family that needs one snapshot must say so (``Plan`` in one READ ONLY
  transaction is then one BEGIN more, see ``run_plan(..., snapshot=True)``);
- **server-side prepared statements** — psycopg prepares a statement after ``prepare_threshold``
  executions on a connection, so the resolve query and the tool queries are planned once per connection;
- **cancellation down to PostgreSQL** (R-PROTO-6) — each statement runs in a task of its own, shielded
  from the call's cancel scope; when the call is cancelled (the client went away) the driver sends
  PostgreSQL a cancel for that backend, waits (shielded) until the statement has really stopped, and
  only then lets the cancellation go on. After a cancel no further statement of the plan starts, and
  nothing is ever committed (read-only autocommit).

Its parts: ``mcp_app.statement_cache`` compiles statements (one SQL per shape, ``mcp_app.shape_keys`` its
keys), this module runs a plan's statements (budget, cancellation, broken connections), and
``mcp_app.pool`` keeps the process's query connections and tool slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import psycopg
from psycopg.pq import ExecStatus

from contexts.errors import DataSourceUnavailable
from mcp_app.statement_cache import Compiled, StatementCompiler
from queries.errors import QueryTimeout
from queries.plan import Plan, remaining_ms
from tjwater import metrics, telemetry

if TYPE_CHECKING:
    from mcp_app.pool import QueryDatabase

logger = logging.getLogger(__name__)

R = TypeVar("R")
NOT_STARTED: Any = object()  # ``run_plan``: the plan has not yielded yet
TUPLES_OK = ExecStatus.TUPLES_OK

# One client-side cursor per pooled connection, reused by every statement run on it: creating and closing
# a cursor per statement cost ≈ 15 µs of CPU each (mcp_app/README.md "Measuring"). A connection serves
# one call at a time, so its cursor is never shared by two statements at once; a client-side cursor holds
# nothing on the server, and a new ``execute`` replaces its previous result (the last result of an idle
# connection stays in memory until its next statement: at most one page per pooled connection).
_CURSORS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]] = (
    weakref.WeakKeyDictionary()
)


# The second cursor of a connection, for the second statement of a pipelined pair (``Execution.run_pair``):
# each statement of a pipeline keeps its result on its own cursor.
_SECOND_CURSORS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]] = (
    weakref.WeakKeyDictionary()
)


def _cursor(
    conn: psycopg.AsyncConnection[Any],
    cursors: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]] = _CURSORS,
) -> psycopg.AsyncCursor[Any]:
    cursor = cursors.get(conn)
    if cursor is None or cursor.closed:
        cursor = cursors[conn] = conn.cursor()
    return cursor


# --- running statements -----------------------------------------------------------------------------


class CallCancelled(Exception):
    """A statement was about to start for a call that has been cancelled."""


class Execution:
    """The running statements of one call on one pooled connection (cancellation bookkeeping).

    With its ``db``, a statement that finds the connection broken — a PostgreSQL restart or a terminated
    backend leaves dead connections idle in the pool, each noticed only when used — is run once more on
    a fresh connection after the pool's idle connections were swept (``QueryDatabase.replace_broken``):
    every statement is read-only and autocommit, so running it again is safe (issue 17 item 9). The
    connection the call must give back is ``conn`` (the replacement, once replaced).

    The query budget (``budget_s``; by default the ``db``'s) is the call's, counted from here: the first
    guarded statement runs under the session's ``statement_timeout`` (the whole budget), each later one
    until what is left runs out — then it is cancelled in PostgreSQL and the call gets ``QUERY_TIMEOUT``
    (``_guarded``; the session's timeout stays the backstop if the cancel cannot be sent) — and none
    starts once nothing is left (``QUERY_TIMEOUT``). The session's timeout is never changed: a
    ``set_config`` before each later statement and a ``RESET`` after the plan cost two round trips
    (``mcp_app/README.md`` "Measuring")."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], db: QueryDatabase | None = None, *, budget_s: float | None = None
    ) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = conn  # None: given back, no replacement to be had
        self.db = db
        self.cancelled = False
        self.cancel_sent = False
        self.replaced = False
        budget = budget_s if budget_s is not None else (db.budget_s if db is not None else None)
        self.deadline = time.monotonic() + budget if budget is not None else None
        self.statements = 0  # guarded statements started

    @telemetry.traced_statement
    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        assert self.conn is not None  # set for as long as statements run
        cursor = _cursor(self.conn)
        await cursor.execute(sql, params)
        result = cursor.pgresult
        return await cursor.fetchall() if result is not None and result.status == TUPLES_OK else []

    @telemetry.traced_pair
    async def _fetch_pair(self, first: Compiled, second: Compiled) -> tuple[list[Any], list[Any] | Exception]:
        """Both statements in one pipeline (one round trip, one snapshot). ``second``'s own error (its
        timeout, a cancel) comes back as the second item once ``first`` has its rows; a broken connection,
        or ``first`` failing, raises."""
        assert self.conn is not None  # set for as long as statements run
        conn = self.conn
        one, two = _cursor(conn), _cursor(conn, _SECOND_CURSORS)
        try:
            async with conn.pipeline():
                await one.execute(first.sql, first.params)
                await two.execute(second.sql, second.params)
        except psycopg.Error as exc:
            # ``execute`` resets a cursor's result, so rows on ``one`` are this pipeline's.
            answered = one.pgresult is not None and one.pgresult.status == TUPLES_OK
            if not answered or (
                isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
                and not isinstance(exc, psycopg.errors.QueryCanceled)
            ):
                raise
            return await one.fetchall(), QueryTimeout() if isinstance(exc, psycopg.errors.QueryCanceled) else exc
        result = two.pgresult
        return await one.fetchall(), await two.fetchall() if result is not None and result.status == TUPLES_OK else []

    async def _guarded(self, work: Awaitable[R], timeout_s: float | None = None) -> R:
        """The statement(s) in a task of their own; with ``timeout_s`` (what is left of the call's budget)
        stopped in PostgreSQL when that runs out, as its own ``statement_timeout`` would have stopped it,
        and the call gets ``QUERY_TIMEOUT``."""
        task = asyncio.ensure_future(work)
        try:
            if timeout_s is None:
                return await asyncio.shield(task)
            await asyncio.wait((task,), timeout=timeout_s)  # never cancels the task itself
        except asyncio.CancelledError:
            self.cancelled = True
            await self._stop(task, metrics.STATEMENT_CANCELLATIONS)
            raise
        if not task.done():  # no later statement starts either: the deadline has passed (remaining_ms)
            await self._stop(task, metrics.STATEMENT_DEADLINE_STOPS)
            if task.cancelled() or task.exception() is not None:
                raise QueryTimeout()
        return task.result()

    async def _stop(self, task: asyncio.Future[Any], counter: Any) -> None:
        """Cancel the running statement in PostgreSQL and wait (shielded) until it has stopped: the slot
        and the connection are given back only then."""
        with anyio.CancelScope(shield=True):
            if not task.done() and self.conn is not None:
                try:
                    await self.conn.cancel_safe(timeout=2.0)
                    self.cancel_sent = True
                    counter.inc()
                except Exception as exc:  # the session's statement timeout still bounds it
                    logger.warning("statement cancel failed error_class=%s", type(exc).__name__)
            try:
                await task
            except BaseException:  # noqa: BLE001 - QueryCanceled is what we expect
                pass

    async def run(self, compiled: Compiled, *, guarded: bool = True) -> Any:
        """Run one compiled statement. ``guarded`` (tool queries): in a task of its own, so that a
        cancelled call cancels it in PostgreSQL and waits until it has stopped. Unguarded (the
        sub-millisecond context resolution, before any slot is held): awaited directly — a cancel then
        makes psycopg drop the connection, and the pool replaces it."""
        if self.cancelled:
            raise CallCancelled
        if compiled.shape is None:  # nothing can match: no SQL to run
            return compiled.empty
        if not guarded:
            return compiled.shape.rows(await self._retrying(lambda: self._fetch(compiled.sql, compiled.params)))
        timeout_s = None
        if self.deadline is not None:
            left = remaining_ms(self.deadline)  # QUERY_TIMEOUT when nothing is left
            timeout_s = left / 1000 if self.statements else None  # the first runs under the session's budget
            self.statements += 1
        raw = await self._retrying(lambda: self._guarded(self._fetch(compiled.sql, compiled.params), timeout_s))
        return compiled.shape.rows(raw)

    async def run_pair(self, first: Compiled, second: Compiled) -> tuple[Any, Any]:
        """``first`` and then ``second`` in one round trip (a pipeline), guarded as a call's first
        statement (under the session's budget, cancelled in PostgreSQL with the call): the context
        resolution with a tool's first statement (``mcp_app.ahead``). Both must have SQL. Returns the
        rows of each; ``second``'s are the error its statement met instead (``QueryTimeout``, …), for the
        caller to raise only once it has checked ``first``'s."""
        if self.cancelled:
            raise CallCancelled
        assert first.shape is not None and second.shape is not None
        self.statements += 1
        raw, raw_second = await self._retrying(lambda: self._guarded(self._fetch_pair(first, second)))
        rows_second = raw_second if isinstance(raw_second, Exception) else second.shape.rows(raw_second)
        return first.shape.rows(raw), rows_second

    async def _retrying(self, attempt: Callable[[], Awaitable[R]]) -> R:
        """``attempt()``, once more on a fresh connection when this one was found broken (see the class)."""
        while True:
            try:
                return await attempt()
            except psycopg.errors.QueryCanceled:
                raise QueryTimeout() from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                broken = self.conn
                if self.db is None or self.replaced or broken is None or not broken.closed or self.cancelled:
                    logger.warning("query database unavailable error_class=%s", type(exc).__name__)
                    raise DataSourceUnavailable() from None
                logger.warning("query connection found broken, replaced error_class=%s", type(exc).__name__)
                self.replaced, self.conn = True, None
                self.conn = await self.db.replace_broken(broken)  # DataSourceUnavailable when none comes


async def run_plan(
    plan: Plan[R], execution: Execution, compiler: StatementCompiler, *, first_rows: Any = NOT_STARTED
) -> R:
    """Drive a plan to completion on one connection; return the service's result. With ``first_rows``
    the plan has yielded its first statement already and those are its rows (``mcp_app.ahead``)."""
    try:
        statement = next(plan) if first_rows is NOT_STARTED else plan.send(first_rows)
        while True:
            rows = await execution.run(compiler.compile(statement))
            statement = plan.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()
