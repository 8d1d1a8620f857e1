"""Run a query service in a worker thread so that cancelling the call cancels its SQL (R-PROTO-6).

Cancelling the awaiting coroutine alone would leave the query running in PostgreSQL (SDK_NOTES
"Server"). So the worker publishes its psycopg connection while it runs; when the awaiting task is
cancelled (the client closed the SSE response), we send PostgreSQL a server-side cancel for that
connection (``Connection.cancel_safe()``), the statement fails with ``QueryCanceled``, the transaction
rolls back, and the connection goes back to the pool clean. Each call runs in its own read-only
transaction with ``SET LOCAL statement_timeout`` = the query budget, so the database itself enforces
the budget (R-PAGE-7) even if nobody cancels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

import anyio
import psycopg
from django.db import DatabaseError, close_old_connections, connection, transaction

from contexts.errors import QueryTimeout

logger = logging.getLogger(__name__)
audit = logging.getLogger("tjwater.audit")

T = TypeVar("T")


class CallCancelled(Exception):
    """The worker found its call already cancelled before the query started."""


class BackendHandle:
    """The worker's psycopg connection, published for the canceller. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[object] | None = None
        self.cancelled = False

    def attach(self, conn: psycopg.Connection[object]) -> None:
        with self._lock:
            if self.cancelled:
                raise CallCancelled
            self._connection = conn

    def detach(self) -> None:
        with self._lock:
            self._connection = None

    def cancel(self) -> bool:
        """Cancel the running statement, if any. Returns whether a cancel was sent."""
        with self._lock:
            self.cancelled = True
            conn = self._connection
            if conn is None:
                return False
            # Under the lock: the worker cannot detach and hand the connection to another call meanwhile.
            conn.cancel_safe(timeout=2.0)
            return True


def _run_in_transaction(fn: Callable[[], T], handle: BackendHandle, budget_ms: int) -> T:
    close_old_connections()
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                # Read-only: query services never write; evidence is saved elsewhere in its own transaction.
                # One round trip; budget_ms is an int, so formatting it in is safe.
                cursor.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {int(budget_ms)}")
            handle.attach(connection.connection)
            try:
                return fn()
            finally:
                handle.detach()
    finally:
        # Return the connection to the pool (this thread is not a Django request thread).
        connection.close()


def _is_query_canceled(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.QueryCanceled) or isinstance(exc.__cause__, psycopg.errors.QueryCanceled)


async def run_query(fn: Callable[[], T], *, budget_s: float, audit_fields: Callable[[], Mapping[str, object]]) -> T:
    """Run ``fn`` (sync, using Django's connection) in a worker thread under the query budget.

    On cancellation of the awaiting task, the backend statement is cancelled before the cancellation
    propagates, and an audit line records it (``audit_fields()`` is read then: the worker may have
    learnt who the call is for only while running). A statement that exceeds the budget raises
    ``QueryTimeout``.
    """
    handle = BackendHandle()
    budget_ms = int(budget_s * 1000)
    try:
        # abandon_on_cancel: the await returns as soon as we are cancelled; the worker then ends on
        # its own once PostgreSQL has cancelled its statement.
        return await anyio.to_thread.run_sync(_run_in_transaction, fn, handle, budget_ms, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            sent = await anyio.to_thread.run_sync(handle.cancel)
        audit.info(
            "mcp call cancelled backend_cancel_sent=%s %s",
            sent,
            " ".join(f"{k}={v}" for k, v in audit_fields().items()),
        )
        raise
    except DatabaseError as exc:
        if _is_query_canceled(exc) and not handle.cancelled:
            raise QueryTimeout() from None
        raise
