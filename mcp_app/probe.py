"""The cancellation probe: ``POST /internal/cancellation-probe`` (issue 24 "Readiness", R-PROTO-6, R-OPS).

Seed 001's start-up check must prove that a disconnected call's statement is gone from PostgreSQL. The
product catalog has no slow tool on purpose — ``tools/list`` is the same for every caller (R-TOOL-1) and a
sleep tool would be a denial-of-service aid — so the proof runs through this endpoint, which is not an
MCP method and not a tool. It answers only this deployment's own service client: a token verified like
every ``/mcp`` token (the one issuer, audience, client allowlist) whose ``azp`` is
``TJWATER_OIDC_CLIENT_ID`` — the client ``mcp_catalog_check --client-credentials`` signs in as. Every
other request (no token, another client's token, an invalid one; any request while that setting is
empty, names the host client ``TJWATER_MCP_HOST_CLIENT`` whose tokens are users', or ``/mcp`` is off) is
handed to Django and gets the very answer of an unknown path (404), so the endpoint does not reveal
that it exists (the Sentry IDOR rule of STYLE "scoped lookups").

For the service client it runs one statement the way a ``tools/call`` does: a tool slot of the process
(``QueryDatabase.take_tool_slot``), a connection of the MCP query pool, ``run_plan`` over an
``Execution`` (the statement in a shielded task of its own; on cancellation a PostgreSQL cancel, and
the connection goes back only once the statement has stopped), and the transport's own disconnect
watcher (``mcp_app.transport.watch_disconnect``) cancelling the handler's scope when the client goes
away. The answer is ``200 application/x-ndjson``: first ``{"status": "holding", "backend_pid": …,
"hold_s": …}`` as the statement starts, then — only if the caller stays — ``{"status": "completed"}``.
The caller (``mcp_app.readiness``) disconnects once it sees that backend run the statement in
``pg_stat_activity`` and measures how long the statement takes to leave.

Safe to leave on: one probe at a time per process (single flight; a second is answered 429 at once),
the hold is a constant (``PROBE_HOLD_S``, never the caller's), a process at query capacity answers 429
rather than queue it (it takes a tool slot like any call), and the statement is read-only and bounded by
the query budget's ``statement_timeout`` as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from django.conf import settings

from contexts.errors import ApplicationError, DataSourceUnavailable
from contexts.tokens import VerifiedToken
from mcp_app.executor import Execution, run_plan
from mcp_app.pool import QueryDatabase
from mcp_app.transport import watch_disconnect
from queries.plan import Plan, Raw

logger = logging.getLogger(__name__)

PROBE_PATH = "/internal/cancellation-probe"
#: How long the probe's statement sleeps when nobody disconnects: long enough to be seen and abandoned,
#: short enough that a leaked probe costs one connection for seconds (a hard cap, not a parameter).
PROBE_HOLD_S = 5.0
#: Marks the statement in ``pg_stat_activity.query`` (a constant comment; the hold is a bound parameter).
PROBE_MARK = "tjwater-cancellation-probe"
PROBE_SQL = f"SELECT pg_sleep(%s) /* {PROBE_MARK} */"

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def is_service_client(token: VerifiedToken) -> bool:
    """The token is this deployment's own service client (``TJWATER_OIDC_CLIENT_ID``). Never the host
    client: its tokens are users' (``mcp_app.checks`` warns about that configuration)."""
    client = settings.TJWATER_OIDC_CLIENT_ID
    return bool(client) and token.client_id == client and client != settings.TJWATER_MCP_HOST_CLIENT


def hold_plan(seconds: float) -> Plan[None]:
    """The probe's one statement, as a plan: driven by ``run_plan`` like a tool's."""
    yield Raw(PROBE_SQL, [seconds])


class _Watch:
    """The probe's side of ``watch_disconnect``: whether its answer is finished, whether the client left."""

    __slots__ = ("finished", "client_gone")

    def __init__(self) -> None:
        self.finished = False
        self.client_gone = False


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode() + b"\n"


class CancellationProbe:
    """Serves the probe for the authenticated service client (one instance per process)."""

    def __init__(self) -> None:
        self._running = False  # single flight; read and set on the event loop only

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any, db: QueryDatabase) -> None:
        retry = [(b"retry-after", str(math.ceil(PROBE_HOLD_S)).encode())]
        if scope["method"] != "POST":
            await _send_json(send, 405, {"error": "method_not_allowed"}, [(b"allow", b"POST")])
            return
        if self._running:
            body = {"code": "RATE_LIMITED", "message": "A cancellation probe is running; retry.", "retryable": True}
            await _send_json(send, 429, body, retry)
            return
        self._running = True
        try:
            if not await db.take_tool_slot():
                body = {"code": "RATE_LIMITED", "message": "The server is at its query capacity.", "retryable": True}
                await _send_json(send, 429, body, retry)
                return
            try:
                try:
                    conn = await db.checkout()
                except DataSourceUnavailable as exc:
                    await _send_json(send, 503, exc.as_dict(), retry)
                    return
                execution = Execution(conn, db)
                try:
                    await self._hold(execution, db, receive, send)
                finally:
                    await db.give_back(execution.conn)
            finally:
                db.give_tool_slot()
        finally:
            self._running = False

    async def _hold(self, execution: Execution, db: QueryDatabase, receive: Any, send: Any) -> None:
        # Under the query budget's statement_timeout whatever it is set to (at least 1 s, mcp_app.E004).
        hold_s = min(PROBE_HOLD_S, db.budget_s / 2)
        assert execution.conn is not None
        pid = execution.conn.info.backend_pid
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-ndjson"), (b"cache-control", b"no-store")],
            }
        )
        holding = {"status": "holding", "backend_pid": pid, "hold_s": hold_s}
        await send({"type": "http.response.body", "body": _line(holding), "more_body": True})
        watch = _Watch()
        handler_scope = anyio.CancelScope()
        watcher = asyncio.get_running_loop().create_task(watch_disconnect(receive, watch, handler_scope))
        started = time.monotonic()
        outcome: dict[str, Any] | None = None
        try:
            with handler_scope:
                try:
                    await run_plan(hold_plan(hold_s), execution, db.compiler)
                    outcome = {"status": "completed", "held_ms": round((time.monotonic() - started) * 1000)}
                except ApplicationError as exc:  # QUERY_TIMEOUT, DATA_SOURCE_UNAVAILABLE
                    outcome = {"status": "failed", "code": exc.code}
        finally:
            watch.finished = True
        if outcome is None:  # the client went away: the statement was cancelled and has stopped
            logger.info("cancellation probe abandoned by its caller cancel_sent=%s", execution.cancel_sent)
            watcher.cancel()
            return
        await send({"type": "http.response.body", "body": _line(outcome), "more_body": False})
        watcher.cancel()  # the answer is complete: nothing is left to watch
