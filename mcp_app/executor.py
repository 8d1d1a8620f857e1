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
  Statements run in autocommit, each reading its own snapshot (READ COMMITTED). Statements a plan yields
  ``Together`` (a page's count and rows) go in one pipeline with one Sync — one round trip, one implicit
  transaction, still a snapshot per statement. Accepted for the current families — the network model
  changes only by a re-import, so at worst one call's ``total`` and page straddle an import, and the
  result says when it was read (``queried_at``); a family that needs one snapshot would need a
  REPEATABLE READ transaction (a BEGIN more) — none does today;
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anyio
import psycopg
from psycopg.pq import ExecStatus

from contexts.errors import DataSourceUnavailable
from mcp_app.statement_cache import Compiled, StatementCompiler
from queries.errors import QueryTimeout
from queries.plan import Plan, Together, remaining_ms
from tjwater import metrics, telemetry


class ConnectionSource(Protocol):
    """What an ``Execution`` asks of the database it came from (``mcp_app.pool.QueryDatabase``): the
    per-call budget and a replacement for a broken connection. A protocol, so this module does not
    import the pool that builds executions (the dependency points one way: pool -> executor)."""

    budget_s: float

    async def replace_broken(self, conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]: ...


logger = logging.getLogger(__name__)

R = TypeVar("R")
NOT_STARTED: Any = object()  # ``run_plan``: the plan has not yielded yet
TUPLES_OK = ExecStatus.TUPLES_OK

# Client-side cursors per pooled connection, reused by every statement run on it: creating and closing a
# cursor per statement cost ≈ 15 µs of CPU each (mcp_app/README.md "Measuring"). A connection serves one
# call at a time, so its cursors are never shared by two calls at once; a client-side cursor holds nothing
# on the server, and a new ``execute`` replaces its previous result (the last result of an idle connection
# stays in memory until its next statement: at most one page per pooled connection). One statement uses
# the first; the statements of a pipeline one each (each keeps its result on its own cursor).
_CURSORS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], list[psycopg.AsyncCursor[Any]]] = (
    weakref.WeakKeyDictionary()
)


def _cursors(conn: psycopg.AsyncConnection[Any], n: int = 1) -> list[psycopg.AsyncCursor[Any]]:
    """At least ``n`` cursors of ``conn`` (made the first time they are needed)."""
    cursors = _CURSORS.get(conn)
    if cursors is None or cursors[0].closed:
        cursors = _CURSORS[conn] = [conn.cursor()]
    while len(cursors) < n:
        cursors.append(conn.cursor())
    return cursors


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
        self, conn: psycopg.AsyncConnection[Any], db: ConnectionSource | None = None, *, budget_s: float | None = None
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
        cursor = _cursors(self.conn)[0]
        await cursor.execute(sql, params)
        result = cursor.pgresult
        return await cursor.fetchall() if result is not None and result.status == TUPLES_OK else []

    @telemetry.traced_batch
    async def _fetch_batch(
        self, statements: Sequence[Compiled], *, rest_may_fail: bool = False
    ) -> tuple[list[Any], list[list[Any]] | Exception]:
        """All in one pipeline: one round trip, one implicit transaction (one Sync). The first's rows, and
        the others' in order. With ``rest_may_fail`` an error of a later statement (its timeout, a cancel)
        comes back instead of their rows once the first has its rows; a broken connection, or the first
        failing, raises — as does any error without it."""
        assert self.conn is not None  # set for as long as statements run
        conn = self.conn
        cursors = _cursors(conn, len(statements))
        try:
            async with conn.pipeline():
                for cursor, statement in zip(cursors, statements, strict=False):
                    await cursor.execute(statement.sql, statement.params)
        except psycopg.Error as exc:
            one = cursors[0]
            # ``execute`` resets a cursor's result, so rows on the first cursor are this pipeline's.
            answered = one.pgresult is not None and one.pgresult.status == TUPLES_OK
            if (
                not rest_may_fail
                or not answered
                or (
                    isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
                    and not isinstance(exc, psycopg.errors.QueryCanceled)
                )
            ):
                raise
            return await one.fetchall(), QueryTimeout() if isinstance(exc, psycopg.errors.QueryCanceled) else exc
        rows = []
        for cursor in cursors[: len(statements)]:
            result = cursor.pgresult
            rows.append(await cursor.fetchall() if result is not None and result.status == TUPLES_OK else [])
        return rows[0], rows[1:]

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

    def _next_timeout(self) -> float | None:
        """The next guarded statement's time limit: what is left of the call's budget (``QUERY_TIMEOUT`` when
        nothing is), or None for the first — it runs under the session's timeout, the whole budget."""
        if self.deadline is None:
            return None
        left = remaining_ms(self.deadline)
        timeout_s = left / 1000 if self.statements else None
        self.statements += 1
        return timeout_s

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
        timeout_s = self._next_timeout()
        raw = await self._retrying(lambda: self._guarded(self._fetch(compiled.sql, compiled.params), timeout_s))
        return compiled.shape.rows(raw)

    async def run_together(self, statements: Sequence[Compiled]) -> tuple[Any, ...]:
        """A plan's ``Together``: its statements in one round trip (``_fetch_batch``), guarded and under the
        call's budget as one statement (``run``); one without SQL (nothing can match) is not sent and
        gives its empty rows."""
        if self.cancelled:
            raise CallCancelled
        sent = [compiled for compiled in statements if compiled.shape is not None]
        if len(sent) < 2:  # nothing to pipeline
            return tuple([await self.run(compiled) for compiled in statements])
        timeout_s = self._next_timeout()
        first, rest = await self._retrying(lambda: self._guarded(self._fetch_batch(sent), timeout_s))
        assert not isinstance(rest, Exception)  # raised, without ``rest_may_fail``
        fetched = iter((first, *rest))
        return tuple(
            compiled.shape.rows(next(fetched)) if compiled.shape is not None else compiled.empty
            for compiled in statements
        )

    async def run_ahead(self, first: Compiled, then: Sequence[Compiled]) -> tuple[Any, list[Any] | Exception]:
        """``first`` and then each of ``then`` in one round trip (a pipeline), guarded as a call's first
        statement (under the session's budget, cancelled in PostgreSQL with the call): the context
        resolution with a tool's first statement(s) (``mcp_app.ahead``). All must have SQL. Returns the
        rows of ``first`` and those of each of ``then`` — or the error their statements met instead
        (``QueryTimeout``, …), for the caller to raise only once it has checked ``first``'s."""
        if self.cancelled:
            raise CallCancelled
        assert first.shape is not None and all(compiled.shape is not None for compiled in then)
        self.statements += 1
        raw, raw_rest = await self._retrying(
            lambda: self._guarded(self._fetch_batch((first, *then), rest_may_fail=True))
        )
        if isinstance(raw_rest, Exception):
            return first.shape.rows(raw), raw_rest
        return first.shape.rows(raw), [
            compiled.shape.rows(rows)  # type: ignore[union-attr]  # all have SQL (asserted above)
            for compiled, rows in zip(then, raw_rest, strict=True)
        ]

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
            if isinstance(statement, Together):
                rows = await execution.run_together([compiler.compile(s) for s in statement.statements])
            else:
                rows = await execution.run(compiler.compile(statement))
            statement = plan.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()
