"""The single-exchange HTTP entry for MCP 2026-07-28 POSTs, lean (issue 10).

The SDK's entry (``mcp.server._streamable_http_modern.handle_modern_request`` behind
``StreamableHTTPSessionManager``) costs more per call than the whole bare tool (the profile is in
``mcp_app/README.md`` "Measuring") — an anyio task group with two tasks, a memory object stream and a cancel
scope per request for the SSE deferral, a Starlette ``Response`` per answer, the reply validated into a
``JSONRPCResponse`` and dumped again, the body buffered by a replaying middleware. This module keeps every
*decision* of that entry and takes each one from the SDK itself, in the same order:

1. transport security (Content-Type, Host, Origin) — the SDK's ``TransportSecurityMiddleware``;
2. the ``Accept`` check (JSON and SSE) — the SDK's ``check_accept_headers`` (406);
3. the body limit (413, like ``RequestBodyLimitMiddleware``), parse error, notification → 202, envelope
   → ``JSONRPCRequest`` (-32600);
4. duplicated routing headers (-32020), the inbound ladder ``classify_inbound_request`` (version,
   ``Mcp-Method``/``Mcp-Name`` against the body, ``_meta``), ``Mcp-Param-*`` against the tool's schema;
5. the request is served by the SDK's kernel — ``serve_one``'s ``ServerRunner.on_request`` (params validated
   per version, the handler, the result sieved and stamped), its connection torn down by the SDK's
   ``aclose_shielded`` when a handler registered anything to tear down (``_serve_one``) — errors mapped by
   the SDK's ``modern_error_data``;

and replaces only the machinery: the handler runs in the request's own task, in an anyio cancel scope;
one small watcher task turns a client disconnect into the cancellation of that scope (R-PROTO-6 — the
executor then cancels the statement in PostgreSQL; shielded sections finish first); a timer commits
``text/event-stream`` and pings if the handler stays silent for ``TJWATER_MCP_SSE_PING_S`` (15 s, the
SDK's window); the first notification (progress) commits SSE; a handler that answers within the window
gets ``application/json`` with the SDK's status table. The reply is serialised once.

Used for every 2026-07-28 POST that passed the gate in ``mcp_app.asgi`` (the legacy transports are
never reached: the gate refuses other versions).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import ServerRunner, aclose_shielded, modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import HEADER_MISMATCH, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCRequest
from pydantic import ValidationError
from starlette.requests import Request

from mcp_app.sdk import (  # the SDK's own answers for the cold paths
    INVALID_BODY,
    SSE_HEADERS,
    SSE_PING_INTERVAL_S,
    acknowledge_notification,
    is_notification_shaped,
    sse_event,
    write_rejection,
    write_reply,
)

logger = logging.getLogger(__name__)

_TOO_LARGE = b"Request body too large"


class _Exchange:
    """One request's dispatch context (``mcp.shared.dispatcher.DispatchContext``) and its response
    writer: notifications commit ``text/event-stream``; the reply is JSON unless SSE was committed."""

    can_send_request = False

    def __init__(
        self, send: Any, transport: TransportContext, request_id: Any, request: Request, progress_token: Any
    ) -> None:
        self._send = send
        self.transport = transport
        self.request_id = request_id
        self.message_metadata = ServerMessageMetadata(request_context=request)
        self.progress_token = progress_token
        self._cancel_requested: anyio.Event | None = None
        self.committed = False  # text/event-stream has started
        self.finished = False  # the reply is being written: no more notifications, no cancellation
        self.client_gone = False  # the watcher cancelled the handler's scope
        self._pinging: asyncio.Task[None] | None = None
        self.watcher: asyncio.Task[None] | None = None  # referenced here so it is never collected early
        self._timer: asyncio.TimerHandle | None = None

    @property
    def cancel_requested(self) -> anyio.Event:
        """Never set on this wire (cancelling is closing the response); made only if someone asks."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> dict[str, Any]:
        raise NoBackChannelError(method)  # a 2026-07-28 server cannot send requests to the client

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        if self.finished:
            return
        body = dict(params) if params is not None else None
        await self._emit(sse_event(JSONRPCNotification(jsonrpc="2.0", method=method, params=body)))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)

    async def _emit(self, chunk: bytes) -> None:
        try:
            if not self.committed:
                self.committed = True  # before the first await: a concurrent emit never sends a second start
                await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        except OSError:  # the client went away; the watcher cancels the request
            logger.debug("dropped an SSE frame: response stream closed")

    # -- the silent-handler keepalive (the SDK's deferral window) ---------------------------------

    def arm(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self._timer = loop.call_later(interval, self._on_idle, loop, interval)

    def _on_idle(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        if self.finished:
            return
        self._pinging = loop.create_task(self._emit(b": ping\r\n\r\n"))
        self.arm(loop, interval)

    async def disarm(self) -> None:
        self.finished = True
        if self._timer is not None:
            self._timer.cancel()
        if self._pinging is not None and not self._pinging.done():
            await self._pinging  # the last frame goes after it, never interleaved


class Watched(Protocol):
    """What the disconnect watcher reads and writes of a request: a ``tools/call`` exchange, or the
    cancellation probe (``mcp_app.probe``), which is watched by this same code so that it proves it."""

    finished: bool
    client_gone: bool


async def watch_disconnect(receive: Any, exchange: Watched, scope: anyio.CancelScope) -> None:
    """Cancel the request's handler when the client goes away before the reply (R-PROTO-6). After the
    reply the server's ``receive`` reports the end of the exchange as a disconnect too: then nothing.

    The handler runs in an anyio cancel scope and this cancels the *scope* — never ``Task.cancel()``,
    which would pierce the shielded sections (a statement's cancel-and-wait, giving a connection back,
    releasing a slot): anyio delivers a scope's cancellation only outside shielded scopes."""
    try:
        while (await receive()).get("type") != "http.disconnect":
            pass
    except Exception:  # noqa: BLE001 - a receive that fails means the exchange is over
        pass
    if not exchange.finished:
        exchange.client_gone = True
        scope.cancel()


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The whole body, or None when it exceeds ``limit`` (or the client left while sending it)."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body if len(body) <= limit else None
    chunks = [body]
    size = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _send_plain(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _reply_bytes(reply: dict[str, Any]) -> bytes:
    return pydantic_core.to_json(reply)


async def _serve_one(
    server: Server[Any],
    dctx: Any,
    method: str,
    params: Mapping[str, Any] | None,
    *,
    connection: Connection,
    lifespan_state: Any,
) -> dict[str, Any]:
    """The SDK's ``serve_one``: its kernel (``ServerRunner.on_request``) serves the request, then the
    per-request connection's ``exit_stack`` is unwound by the SDK's ``aclose_shielded`` — only when a
    handler put something on it. ``serve_one`` always enters a shielded, bounded cancel scope for that
    (measured: ``mcp_app/README.md`` "Measuring", thirteenth session), and no handler of this server
    registers per-connection cleanup. Where the stack's contents cannot be seen (``_exit_callbacks`` is
    CPython's ``contextlib``), it is always unwound."""
    runner = ServerRunner(server, connection, lifespan_state)
    try:
        return await runner.on_request(dctx, method, params)
    finally:
        if getattr(connection.exit_stack, "_exit_callbacks", True):
            await aclose_shielded(connection)


class SingleExchange:
    """Serves 2026-07-28 POSTs for one ``mcp.server.Server`` (one instance per process)."""

    def __init__(
        self,
        server: Server[Any],
        security: TransportSecuritySettings,
        *,
        max_body_bytes: int,
        header_param_schema: Callable[[str], Any | None],
        lifespan_state: Any,
        ping_interval_s: float = SSE_PING_INTERVAL_S,
    ) -> None:
        self.server = server
        self.ping_interval_s = ping_interval_s
        self.security = TransportSecurityMiddleware(security)
        self.max_body_bytes = max_body_bytes
        self.header_param_schema = header_param_schema
        self.lifespan_state = lifespan_state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        request = Request(scope)
        rejected = await self.security.validate_request(request, is_post=True)
        if rejected is not None:
            await rejected(scope, receive, send)
            return
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):  # SSE response mode needs both (the SDK's 406)
            await _send_plain(send, 406, b"")
            return
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await _send_plain(send, 413, _TOO_LARGE)
            return
        body = await read_body(receive, self.max_body_bytes)
        if body is None:
            await _send_plain(send, 413, _TOO_LARGE)
            return
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            rej = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error"))
            await write_reply(rej, scope, receive, send)
            return
        if is_notification_shaped(decoded):
            await acknowledge_notification(decoded, request, scope, receive, send)
            return
        try:
            req = JSONRPCRequest.model_validate(decoded)
        except ValidationError:
            await write_reply(INVALID_BODY, scope, receive, send)
            return
        headers = request.headers
        duplicated = find_duplicated_routing_header(headers.items())
        if duplicated is not None:
            rejection = InboundLadderRejection(
                code=HEADER_MISMATCH, message=f"{duplicated} header appears more than once"
            )
            await write_rejection(rejection, req.id, scope, receive, send)
            return
        verdict = classify_inbound_request(decoded, headers=dict(headers))
        if isinstance(verdict, InboundLadderRejection):
            await write_rejection(verdict, req.id, scope, receive, send)
            return
        param_rejection = self._param_rejection(req, headers)
        if param_rejection is not None:
            await write_rejection(param_rejection, req.id, scope, receive, send)
            return
        connection = Connection.from_envelope(
            verdict.protocol_version, verdict.client_info, verdict.client_capabilities
        )
        exchange = _Exchange(
            send,
            TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
            req.id,
            request,
            progress_token_from_params(req.params),
        )
        await self._serve(exchange, req, connection, receive, send)

    def _param_rejection(self, req: JSONRPCRequest, headers: Any) -> InboundLadderRejection | None:
        """``Mcp-Param-*`` headers of a ``tools/call`` against the tool's input schema: the SDK's rule
        (``validate_mcp_param_headers``), for the tools whose schema declares header parameters
        (``Catalog.header_param_schema``; for the others the SDK's check can refuse nothing)."""
        if req.method != "tools/call":
            return None
        params = req.params or {}
        name = params.get("name")
        arguments = params.get("arguments")
        if not isinstance(name, str) or (arguments is not None and not isinstance(arguments, Mapping)):
            return None
        schema = self.header_param_schema(name)
        if schema is None:
            return None
        return validate_mcp_param_headers(schema, arguments or {}, headers)

    async def _serve(
        self, exchange: _Exchange, req: JSONRPCRequest, connection: Connection, receive: Any, send: Any
    ) -> None:
        loop = asyncio.get_running_loop()
        handler_scope = anyio.CancelScope()
        exchange.watcher = loop.create_task(watch_disconnect(receive, exchange, handler_scope))
        exchange.arm(loop, self.ping_interval_s)
        try:
            reply: dict[str, Any] | None = None
            status = 200
            with handler_scope:
                try:
                    result = await _serve_one(
                        self.server,
                        exchange,
                        req.method,
                        req.params,
                        connection=connection,
                        lifespan_state=self.lifespan_state,
                    )
                except Exception as exc:  # noqa: BLE001 - the SDK's exception-to-wire ladder decides
                    error = modern_error_data(exc).model_dump(mode="json", by_alias=True, exclude_none=True)
                    reply = {"jsonrpc": "2.0", "id": req.id, "error": error}
                    status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200)
                else:
                    reply = {"jsonrpc": "2.0", "id": req.id, "result": result}
            if reply is None:  # cancelled: the client left, nobody is waiting for a reply
                return
            await exchange.disarm()
            payload = _reply_bytes(reply)
            if exchange.committed:
                frame = b"event: message\r\ndata: " + payload + b"\r\n\r\n"
                await send({"type": "http.response.body", "body": frame, "more_body": False})
            else:
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-length", str(len(payload)).encode()),
                            (b"content-type", b"application/json"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
        finally:
            # After the reply the watcher wakes (the server reports the finished exchange as a
            # disconnect), sees ``finished`` and ends; it is never awaited here.
            exchange.finished = True
