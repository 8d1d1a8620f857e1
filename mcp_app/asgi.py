"""The ASGI side of ``/mcp`` and its protected-resource metadata (SPEC §2, §3).

Every request to ``/mcp`` passes, in order:

1. the switches: off (503 ``MCP_DISABLED``, ``retryable: false``) unless ``TJWATER_MCP_ENABLED``
   (R-TOOL-1) and the run-time entry switch is on (``manage.py mcp_entry``, ``mcp_app.entry``); then
   readiness: while the endpoint is starting or its start-up failed, 503 ``MCP_UNAVAILABLE`` with
   ``retryable: true`` and ``Retry-After`` (issue 23 item 15);
2. the protocol gate: POST only (anything else → 405 ``Allow: POST``), and an ``MCP-Protocol-Version``
   header naming 2026-07-28 — a missing or other version is HTTP 400 / -32022 listing the supported
   versions. The SDK would otherwise route such requests to its legacy transport (``initialize``,
   sessions, GET streams — SDK_NOTES "Server"), so this gate is what makes 2026-07-28 the only protocol;
   ``Mcp-Session-Id`` / ``Last-Event-ID`` never reach anything that reads them;
3. the bearer layer (``mcp_app.auth``): 401/403/503 with RFC 6750 challenges;
4. the 2026-07-28 single exchange in SSE response mode (``mcp_app.transport``: the SDK's checks and
   kernel, lean plumbing; a client disconnect cancels the handler — R-PROTO-6), which validates routing
   headers against the body (-32020), methods (-32601) and params (-32602).

The server's lifespan runs for the process lifetime: ``startup``/``shutdown`` are called from the
lifespan handling in ``tjwater.asgi``. A start-up failure never takes the process (and so REST) down: it is
logged, ``/mcp`` answers 503 retryable, and start-up is tried again every ``STARTUP_RETRY_S`` seconds
(seed 001: "MCP 服务失败时其调用返回可重试错误，现有 REST 和原生查询仍可使用").
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

import anyio
from django.conf import settings
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER, unsupported_protocol_version_rejection

from contexts.tokens import VerifiedToken
from mcp_app import auth
from mcp_app.catalog import build_catalog
from mcp_app.dispatch import Dispatcher
from mcp_app.entry import EntryWatch
from mcp_app.limits import ConcurrencyLimiter, limiter_from_settings
from mcp_app.metrics import PoolSampler
from mcp_app.pool import QueryDatabase, warm_django_connection
from mcp_app.probe import CancellationProbe, is_service_client
from mcp_app.sdk import dns_rebinding_settings
from mcp_app.server import SUPPORTED_VERSIONS, TOKEN_SCOPE_KEY, build_server
from mcp_app.tasks_extension import TASK_METHOD_SCOPES
from mcp_app.transport import SingleExchange, read_body
from tjwater import health, metrics, telemetry

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
PRM_PATH = "/.well-known/oauth-protected-resource/mcp"
MCP_PATHS = frozenset({MCP_PATH, PRM_PATH})
MAX_REQUEST_BODY_BYTES = 256 * 1024
# Token verifications that miss the per-process cache run in worker threads of their own (a JWKS fetch may
# block): business calls never use threads, and authentication never waits behind them (issue 9 item 7).
AUTH_THREADS = 4
# Host values whose DNS-rebinding answer is remembered per process.
HOST_MEMO_SIZE = 64
# After a failed start-up, the next attempt (and the Retry-After of the 503 meanwhile).
STARTUP_RETRY_S = 10
DISABLED_BODY = {
    "code": "MCP_DISABLED",
    "message": "The MCP endpoint is turned off on this server; retrying will not help.",
    "retryable": False,
}


async def send_json(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or [(b"cache-control", b"no-store")]),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def transport_security() -> TransportSecuritySettings:
    """DNS-rebinding protection from settings: a ``Host`` is accepted on ``/mcp`` exactly when Django
    would accept it — ``ALLOWED_HOSTS`` semantics on any port: exact names, ``.example.com`` for that
    domain and all its subdomains, ``*`` for any host — and ``Origin`` must be one of
    ``TJWATER_MCP_ALLOWED_ORIGINS`` (default: the resource URI's origin), ``*`` included.

    The SDK knows no Django host patterns: ``mcp_app.sdk.dns_rebinding_settings`` makes it ask Django's
    own ``validate_host``. tests/tjwater/test_asgi.py pins this over real HTTP (a subdomain passes, a
    foreign host gets 421).
    """
    from django.http.request import split_domain_port, validate_host

    patterns = [str(host) for host in settings.ALLOWED_HOSTS]

    # Every call asks with the same few Host values: the answer is kept per value (``Host`` is the
    # caller's text, so the memo is bounded and a full one is simply not added to).
    seen: dict[str, bool] = {}

    def host_allowed(host: str) -> bool:
        known = seen.get(host)
        if known is not None:
            return known
        domain, _port = split_domain_port(host)
        allowed = bool(domain) and validate_host(domain, patterns)
        if len(seen) < HOST_MEMO_SIZE:
            seen[host] = allowed
        return allowed

    origins = list(settings.TJWATER_MCP_ALLOWED_ORIGINS)
    if not origins:
        parts = urlsplit(settings.TJWATER_MCP_RESOURCE_URI)
        origins = [f"{parts.scheme}://{parts.netloc}"]
    return dns_rebinding_settings(host_allowed=host_allowed, allowed_origins=origins)


def _request_id(body: bytes | None) -> str | int | None:
    """The JSON-RPC ``id`` of a request body, so an error answer carries it (JSON-RPC 2.0 §5); None when
    the body cannot be read as one request object with a valid id (a batch, a notification, garbage)."""
    if not body:
        return None
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return request_id


def _header(scope: dict[str, Any], name: str) -> str | None:
    key = name.lower().encode()
    values = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == key]
    return values[0] if len(values) == 1 else (None if not values else "\x00duplicate")


class McpEndpoint:
    """Serves ``/mcp`` and its protected-resource metadata; owns start-up and shutdown."""

    def __init__(self) -> None:
        self._stack: AsyncExitStack | None = None
        self._exchange: SingleExchange | None = None
        self._limiter: ConcurrencyLimiter | None = None
        self._db: QueryDatabase | None = None
        self._auth_limiter: anyio.CapacityLimiter | None = None
        self._entry = EntryWatch()
        self._state = "starting"  # "starting" → "ready", or "failed" (retried) → "starting" → …
        self._retry: asyncio.Task[None] | None = None
        self._sampler: PoolSampler | None = None
        self._probe = CancellationProbe()
        # /readyz: ready once the catalog is loaded and the pools are up (or when /mcp is not served).
        health.register_readiness("mcp", lambda: not settings.TJWATER_MCP_ENABLED or self._state == "ready")

    async def startup(self) -> None:
        """Start the endpoint. Never raises: a failure is logged, the partly started pieces are closed,
        ``/mcp`` answers 503 retryable, and start-up is retried in the background (issue 23 item 15)."""
        if not settings.TJWATER_MCP_ENABLED:
            return
        await self._entry.start()
        if not await self._attempt_startup():
            self._retry = asyncio.get_running_loop().create_task(self._retry_startup())

    async def _attempt_startup(self) -> bool:
        self._state = "starting"
        try:
            await self._start()
        except Exception:  # noqa: BLE001 - any start-up fault: logged for operators, REST keeps serving
            logger.exception("MCP endpoint start-up failed; /mcp answers 503 and start-up is retried")
            await self._close()
            self._state = "failed"
            return False
        self._state = "ready"
        return True

    async def _retry_startup(self) -> None:
        while True:
            await asyncio.sleep(STARTUP_RETRY_S)
            if await self._attempt_startup():
                return

    async def _start(self) -> None:
        catalog = build_catalog()
        self._limiter = limiter_from_settings()
        self._auth_limiter = anyio.CapacityLimiter(AUTH_THREADS)
        try:
            # What compiling querysets needs from the database (server/PostGIS versions), read once in a
            # thread so the event loop never opens a Django connection. A database that is down now is
            # answered per call (DATA_SOURCE_UNAVAILABLE) — the server still starts.
            await anyio.to_thread.run_sync(warm_django_connection)
        except Exception as exc:
            logger.warning("database not reachable at start-up error_class=%s", type(exc).__name__)
        self._db = QueryDatabase(
            size=settings.TJWATER_MCP_DB_POOL_SIZE,
            budget_s=settings.TJWATER_MCP_QUERY_BUDGET_S,
            checkout_timeout_s=settings.TJWATER_DB_POOL_TIMEOUT_S,
            connect_timeout_s=settings.TJWATER_DB_CONNECT_TIMEOUT_S,
        )
        await self._db.open()
        self._sampler = PoolSampler(self._db)
        server = build_server(catalog, Dispatcher(catalog, self._limiter, self._db))
        self._stack = AsyncExitStack()
        lifespan_state = await self._stack.enter_async_context(server.lifespan(server))
        # SSE response mode (a disconnect cancels the call — R-PROTO-6), the SDK's checks, lean plumbing.
        self._exchange = SingleExchange(
            server,
            transport_security(),
            max_body_bytes=MAX_REQUEST_BODY_BYTES,
            header_param_schema=catalog.header_param_schema,
            lifespan_state=lifespan_state,
            ping_interval_s=settings.TJWATER_MCP_SSE_PING_S,
        )
        logger.info("MCP endpoint started (2026-07-28 single exchange, SSE response mode)")
        # Start-up objects live for the process: keep them out of the cyclic GC's full collections,
        # whose pauses dominate tail latency (SDK_NOTES "Performance").
        import gc

        gc.collect()
        gc.freeze()

    async def shutdown(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            try:
                await self._retry
            except asyncio.CancelledError:
                pass
            self._retry = None
        await self._entry.stop()
        await self._close()

    async def _close(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if self._stack is not None:
            logger.info("MCP endpoint stopping")
            await self._stack.aclose()
            self._stack = None
            self._exchange = None
        if self._limiter is not None:
            await self._limiter.aclose()
            self._limiter = None
        if self._db is not None:
            await self._db.close()
            self._db = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not (settings.TJWATER_MCP_ENABLED and self._entry.enabled):
            # Turned off by an operator (configuration or ``manage.py mcp_entry off``): retrying will not help.
            await send_json(send, 503, DISABLED_BODY)
            return
        if scope["path"] == PRM_PATH:
            await self._protected_resource_metadata(scope, send)
            return
        if self._state != "ready" or self._exchange is None:
            # Starting, or start-up failed and will be retried: REST is unaffected; the client may retry.
            message = (
                "The MCP endpoint is starting; retry shortly."
                if self._state == "starting"
                else "The MCP endpoint could not start and is retrying; retry later."
            )
            await send_json(
                send,
                503,
                {"code": "MCP_UNAVAILABLE", "message": message, "retryable": True},
                [(b"retry-after", str(STARTUP_RETRY_S).encode()), (b"cache-control", b"no-store")],
            )
            return
        await self._mcp(scope, receive, send)

    async def _authenticate(self, scope: dict[str, Any]) -> VerifiedToken:
        """The verified bearer token of the request, or ``auth.AuthFailure``. A cached verification (or no
        credentials at all) is answered on the event loop; a miss goes to a worker thread of the
        authentication limiter (it may fetch the issuer's JWKS)."""
        authorization = _header(scope, "authorization")
        token = auth.authenticate_if_cached(authorization)
        if token is not None:
            return token
        if not authorization:
            return auth.authenticate(authorization)  # raises the no-credentials 401, no I/O
        return await anyio.to_thread.run_sync(auth.authenticate, authorization, limiter=self._auth_limiter)

    async def probe(self, scope: dict[str, Any], receive: Any, send: Any, not_found: Any) -> None:
        """``/internal/cancellation-probe`` (``mcp_app.probe``): served to this deployment's service client
        only; any other request is handed to ``not_found`` (Django), which answers it like an unknown path."""
        token: VerifiedToken | None = None
        if settings.TJWATER_MCP_ENABLED:
            try:
                token = await self._authenticate(scope)
            except auth.AuthFailure:
                token = None
        if token is None or not is_service_client(token):
            await not_found(scope, receive, send)
            return
        if not self._entry.enabled:
            await send_json(send, 503, DISABLED_BODY)
            return
        if self._state != "ready" or self._db is None:
            body = {"code": "MCP_UNAVAILABLE", "message": "The MCP endpoint is starting.", "retryable": True}
            await send_json(send, 503, body, [(b"retry-after", str(STARTUP_RETRY_S).encode())])
            return
        await self._probe.serve(scope, receive, send, self._db)

    async def _protected_resource_metadata(self, scope: dict[str, Any], send: Any) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await send_json(send, 405, {"error": "method_not_allowed"}, [(b"allow", b"GET")])
            return
        await send_json(send, 200, auth.protected_resource_metadata(), [(b"cache-control", b"public, max-age=300")])

    async def _mcp(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # R-PROTO-1: each request is a self-contained POST.
        if scope["method"] != "POST":
            await send_json(
                send,
                405,
                {"error": "method_not_allowed", "message": "Only POST is served at /mcp (MCP 2026-07-28)."},
                [(b"allow", b"POST"), (b"cache-control", b"no-store")],
            )
            return
        requested = _header(scope, MCP_PROTOCOL_VERSION_HEADER)
        if requested not in SUPPORTED_VERSIONS:
            rejection = unsupported_protocol_version_rejection(requested or "", SUPPORTED_VERSIONS)
            assert rejection is not None  # requested is not supported
            request_id = _request_id(await read_body(receive, MAX_REQUEST_BODY_BYTES))
            await send_json(
                send,
                400,
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {
                        "code": rejection.code,
                        "message": "Unsupported protocol version: this server speaks MCP 2026-07-28 only "
                        "(no initialize handshake).",
                        "data": rejection.data,
                    },
                },
            )
            return
        auth_started = time.time_ns() if telemetry.enabled() else 0  # the `authenticate` span's start
        try:
            token = await self._authenticate(scope)
            method = _header(scope, MCP_METHOD_HEADER)
            # tasks/* is opened by what opens tools/call (R-RUN-5: authorised like it).
            auth.authorize_method(token, TASK_METHOD_SCOPES.get(method, method) if method else method)
        except auth.AuthFailure as failure:
            metrics.MCP_HTTP_REFUSALS.labels(failure.status).inc()
            await send(
                {
                    "type": "http.response.start",
                    "status": failure.status,
                    "headers": [(b"content-type", b"application/json"), *failure.headers()],
                }
            )
            await send({"type": "http.response.body", "body": failure.payload()})
            return
        assert self._exchange is not None  # checked in __call__: the endpoint is ready
        scope[TOKEN_SCOPE_KEY] = token
        if auth_started:
            scope[telemetry.AUTH_TIMES_SCOPE_KEY] = (auth_started, time.time_ns())
        await self._exchange(scope, receive, send)
