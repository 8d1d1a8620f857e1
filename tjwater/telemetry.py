"""OpenTelemetry traces of the service (issue 24). Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set:
then spans are exported over OTLP/HTTP (protobuf) to ``<endpoint>/v1/traces``, batched, by a
background thread of each process (the OTLP exporter's own ``OTEL_EXPORTER_OTLP_*`` variables —
headers, timeout, certificate — apply as usual).

What is traced:
- every MCP request the SDK kernel serves: one SERVER span named ``tools/call <tool>`` (or the method),
  attributes after the OpenTelemetry MCP conventions (``mcp.method.name``, ``gen_ai.tool.name``,
  ``gen_ai.operation.name``, ``jsonrpc.request.id``, ``mcp.protocol.version``, ``error.type``,
  ``rpc.response.status_code``) — its parent is the caller's trace from ``params._meta``
  ``traceparent``/``tracestate`` (SEP-414) or else the W3C ``traceparent`` HTTP header; children:
  ``authenticate`` (the bearer layer, timed before the body is read), ``mcp.context.resolve``, every SQL
  statement (``db.system.name=postgresql``, the parameterised text, never its parameters), the Redis
  slot (``redis slot.acquire``), ``evidence.save``;
- every request Django serves (``GET <route>``, parent from the W3C headers) with its SQL statements;
- every Celery task (``celery.task <name>``), parented to the publisher's span through the message
  headers.

Never in an attribute: a token, a context handle, SQL parameters, arguments or results, exception
text (an error is its stable code in ``error.type``). Nothing of a span is ever sent back in a response.

The provider is this module's own (not the global one): nothing else in the process — the SDK's own
tracer among them — exports through it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

P = ParamSpec("P")
R = TypeVar("R")

SERVICE_NAME = "tjwater-mcp"
#: Key of the ASGI scope where the bearer layer leaves its start and end (``time.time_ns``) for the
#: ``authenticate`` child span — only while tracing is on.
AUTH_TIMES_SCOPE_KEY = "tjwater.auth_ns"
_W3C = TraceContextTextMapPropagator()

_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None


def enabled() -> bool:
    return _tracer is not None


def configure(*, endpoint: str = "", exporter: SpanExporter | None = None, batch: bool = True) -> None:
    """Turn tracing on: export to ``endpoint`` (OTLP/HTTP base URL) or to ``exporter`` (tests)."""
    global _provider, _tracer
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer("tjwater")
    from django.db import connections
    from django.db.backends.signals import connection_created

    connection_created.connect(_trace_django_statements, dispatch_uid="tjwater.telemetry")
    for connection in connections.all(initialized_only=True):  # this thread's, opened before
        _trace_django_statements(None, connection)


def _trace_django_statements(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Every Django connection (REST, evidence, Celery) spans its statements (``django_sql_wrapper``)."""
    if django_sql_wrapper not in connection.execute_wrappers:
        connection.execute_wrappers.append(django_sql_wrapper)


def configure_from_settings() -> None:
    """At process start (ASGI application, Celery worker): on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set."""
    from django.conf import settings

    if settings.OTEL_EXPORTER_OTLP_ENDPOINT and not enabled():
        configure(endpoint=settings.OTEL_EXPORTER_OTLP_ENDPOINT)


def shutdown() -> None:
    """Flush what is queued and turn tracing off (process shutdown, tests)."""
    global _provider, _tracer
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` in hex of the current span, for log lines; None outside a sampled span."""
    if _tracer is None:
        return None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def _parent(meta: Mapping[str, Any] | None, headers: Iterator[tuple[bytes, bytes]] | None) -> otel_context.Context:
    """The caller's context: ``_meta`` first (SEP-414), else the W3C HTTP headers, else a new trace."""
    if meta and isinstance(meta.get("traceparent"), str):
        carrier = {k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)}
        parent = _W3C.extract(carrier)
        if trace.get_current_span(parent).get_span_context().is_valid:
            return parent
    if headers is not None:
        carrier = {}
        for key, value in headers:
            if key in (b"traceparent", b"tracestate"):
                carrier[key.decode("latin-1")] = value.decode("latin-1")
        if carrier:
            return _W3C.extract(carrier)
    return otel_context.Context()


@contextmanager
def mcp_span(ctx: Any, method: str, tool: str) -> Iterator[trace.Span]:
    """The SERVER span of one MCP request (``mcp_app.metrics.Observe``), current while it is served.
    ``method`` and ``tool`` are the bounded labels (``_OTHER`` for anything not in the registry)."""
    assert _tracer is not None
    scope = getattr(getattr(ctx, "request", None), "scope", None) or {}
    parent = _parent(ctx.meta, scope.get("headers"))
    auth = scope.get(AUTH_TIMES_SCOPE_KEY)
    attributes: dict[str, Any] = {
        "mcp.method.name": method,
        "mcp.protocol.version": ctx.protocol_version,
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    if isinstance(ctx.request_id, str | int) and not isinstance(ctx.request_id, bool):
        attributes["jsonrpc.request.id"] = str(ctx.request_id)[:64]
    if method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool
    span = _tracer.start_span(
        f"{method} {tool}" if tool else method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        start_time=auth[0] if auth else None,
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        if auth:
            _tracer.start_span("authenticate", start_time=auth[0]).end(end_time=auth[1])
        yield span
    finally:
        otel_context.detach(token)
        span.end()


def end_mcp_span(span: trace.Span, error_type: str) -> None:
    """The outcome on the request's span: ``error.type`` (and the JSON-RPC code) when it failed."""
    if error_type:
        span.set_attribute("error.type", error_type)
        if error_type.lstrip("-").isdigit():
            span.set_attribute("rpc.response.status_code", error_type)
        span.set_status(StatusCode.ERROR)


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Any]:
    """A child span of the current one (a no-op span when tracing is off). Exceptions are recorded as
    ``error.type`` = their class name only, never their text."""
    if _tracer is None:
        yield NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
        return
    with _tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__name__)
            current.set_status(StatusCode.ERROR)
            raise


def traced(name: str, **attributes: Any) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate a coroutine function: a child span ``name`` around each call while tracing is on (off:
    one global read and the call)."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return await fn(*args, **kwargs)
            with span(name, attributes):
                return await fn(*args, **kwargs)

        return wrapper

    return decorate


def traced_sync(name: str, **attributes: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``traced`` for a plain function (e.g. one run in a worker thread: anyio copies the context)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return fn(*args, **kwargs)
            with span(name, attributes):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


POSTGRESQL = {"db.system.name": "postgresql"}


def _sql_attributes(sql: str) -> dict[str, Any]:
    # The statement's text as compiled, with %s placeholders: never its parameters.
    operation = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return {**POSTGRESQL, "db.operation.name": operation[:16], "db.query.text": sql[:8000]}


def traced_statement(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Decorate ``async def _fetch(self, sql, params, …)``: one CLIENT span per SQL statement."""

    @functools.wraps(fn)
    async def wrapper(self: Any, sql: str, params: Any, *args: Any, **kwargs: Any) -> R:
        if _tracer is None:
            return await fn(self, sql, params, *args, **kwargs)
        with span("postgresql " + _sql_attributes(sql)["db.operation.name"], _sql_attributes(sql), SpanKind.CLIENT):
            return await fn(self, sql, params, *args, **kwargs)

    return wrapper


def traced_batch(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Decorate ``async def _fetch_batch(self, statements, **kw)`` (compiled statements in one pipeline):
    one CLIENT span for the batch (``db.operation.batch.size``, the texts)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, statements: Any, **kw: Any) -> R:
        if _tracer is None:
            return await fn(self, statements, **kw)
        parts = [_sql_attributes(statement.sql) for statement in statements]
        names = {part["db.operation.name"] for part in parts}
        operation = f"BATCH {names.pop() if len(names) == 1 else ''}".strip()
        attributes = {
            **POSTGRESQL,
            "db.operation.name": operation,
            "db.operation.batch.size": len(parts),
            "db.query.text": "; ".join(part["db.query.text"] for part in parts)[:8000],
        }
        with span("postgresql " + operation, attributes, SpanKind.CLIENT):
            return await fn(self, statements, **kw)

    return wrapper


def django_sql_wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    """``connection.execute_wrapper`` for Django's statements (REST, evidence): one span each."""
    if _tracer is None:
        return execute(sql, params, many, context)
    attributes = _sql_attributes(sql)
    with span("postgresql " + attributes["db.operation.name"], attributes, SpanKind.CLIENT):
        return execute(sql, params, many, context)


@contextmanager
def http_server_span(request: Any) -> Iterator[Any]:
    """The SERVER span of one Django request: parent from the W3C headers; named ``METHOD route`` once
    the route is known (never the path: it may carry a handle)."""
    if _tracer is None:
        yield None
        return
    carrier = {k: request.headers[k] for k in ("traceparent", "tracestate") if k in request.headers}
    parent = _W3C.extract(carrier) if carrier else otel_context.Context()
    with _tracer.start_as_current_span(
        request.method or "HTTP",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method or "", "url.scheme": request.scheme or ""},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        yield current


def end_http_span(span: Any, request: Any, route: str, status: int) -> None:
    span.update_name(f"{request.method} {route}" if route else (request.method or "HTTP"))
    if route:
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(StatusCode.ERROR)


def inject(carrier: dict[str, Any]) -> None:
    """The current span's W3C context into ``carrier`` (a Celery message's headers)."""
    if _tracer is not None:
        _W3C.inject(carrier)


@contextmanager
def task_span(name: str, headers: Mapping[str, Any] | None) -> Iterator[Any]:
    """The CONSUMER span of one Celery task, parented to the publisher's span when the headers carry it."""
    if _tracer is None:
        yield None
        return
    carrier = {k: headers[k] for k in ("traceparent", "tracestate") if headers and isinstance(headers.get(k), str)}
    parent = _W3C.extract(carrier) if carrier else otel_context.Context()
    with _tracer.start_as_current_span(
        f"celery.task {name}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={"messaging.system": "celery", "messaging.operation.name": "process", "celery.task.name": name},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        yield current
