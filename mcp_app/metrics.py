"""What ``/mcp`` reports to operators (issue 24): one SDK server middleware (``Observe``) times every
request the SDK kernel serves and labels it after the OpenTelemetry MCP conventions —
``mcp.method.name``, ``gen_ai.tool.name``, ``error.type`` — and, when tracing is on
(``tjwater.telemetry``), opens the request's span there too. The instruments live in
``tjwater.metrics``; this module only decides the labels.

``error.type`` per the conventions: empty on success; a ``tools/call`` answered with ``isError`` carries
the result's stable business code (``CONTEXT_EXPIRED``, ``RATE_LIMITED``, … — only codes of
``contexts.errors``, anything else ``_OTHER``); a JSON-RPC error its code (``-32602``); a call cancelled
because the client left ``cancelled``; anything else the exception's class name is *not* used (unbounded
in principle): ``_OTHER``.

Cost (issue 10's per-call budget): the label children of every (method, tool, outcome) seen are bound
once and kept (``_children``), so a call costs two clock reads, one tuple, one dict lookup and one
``observe`` — plus two gauge updates for ``tools/call``. Measured in ``mcp_app/README.md`` "Measuring".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from contexts.errors import ApplicationError
from tjwater import metrics, telemetry

logger = logging.getLogger(__name__)

TOOLS_CALL = "tools/call"
CANCELLED = "cancelled"
INVALID_PARAMS = "-32602"


def _codes(cls: type[ApplicationError]) -> set[str]:
    found = {cls.code} if isinstance(getattr(cls, "code", None), str) else set()
    for sub in cls.__subclasses__():
        found |= _codes(sub)
    return found


class Observe:
    """SDK server middleware (``Server.middleware``, outermost): duration histogram, in-flight gauge and
    — with tracing on — the request's span, for every request the kernel serves.

    ``methods``: the methods the server registers (anything else is labelled ``_OTHER``); ``tools``: the
    registry's tool names (a client-chosen unknown name is ``_OTHER``, never a label of its own)."""

    def __init__(self, *, methods: Iterable[str], tools: Iterable[str]) -> None:
        self.methods = frozenset(methods)
        self.tools = frozenset(tools)
        self.codes = frozenset(_codes(ApplicationError) | {"INTERNAL_ERROR"})
        self._children: dict[tuple[str, str, str], Any] = {}
        # The success series of every tool is bound now: the common path never binds a child.
        for tool in self.tools:
            self._child(TOOLS_CALL, tool, "")

    def _child(self, method: str, tool: str, error_type: str) -> Any:
        key = (method, tool, error_type)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metrics.MCP_OPERATION_DURATION.labels(method, tool, error_type)
        return child

    def _labels(self, ctx: ServerRequestContext[Any, Any]) -> tuple[str, str]:
        method = ctx.method if ctx.method in self.methods else metrics.OTHER
        if method != TOOLS_CALL:
            return method, ""
        name = ctx.params.get("name") if ctx.params else None
        return method, name if name in self.tools else metrics.OTHER

    def _tool_error(self, result: Any) -> str:
        """The business code of an ``isError`` tools/call result (the wire dict the kernel produced)."""
        if not isinstance(result, dict) or result.get("isError") is not True:
            return ""
        structured = result.get("structuredContent")
        code = structured.get("code") if isinstance(structured, dict) else None
        return code if code in self.codes else metrics.OTHER

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method, tool = self._labels(ctx)
        if telemetry.enabled():
            return await self._traced(ctx, call_next, method, tool)
        started = time.perf_counter()
        error_type = metrics.OTHER
        inflight = method == TOOLS_CALL
        if inflight:
            metrics.MCP_INFLIGHT.inc()
        try:
            result = await call_next(ctx)
            error_type = self._tool_error(result) if inflight else ""
            return result
        except MCPError as exc:
            error_type = str(exc.error.code)
            raise
        except ValidationError:
            error_type = INVALID_PARAMS  # the kernel's answer to malformed params
            raise
        except asyncio.CancelledError:
            error_type = CANCELLED
            raise
        finally:
            if inflight:
                metrics.MCP_INFLIGHT.dec()
            self._child(method, tool, error_type).observe(time.perf_counter() - started)

    async def _traced(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, method: str, tool: str
    ) -> HandlerResult:
        """The same, inside the request's span (``tjwater.telemetry.mcp_span``)."""
        started = time.perf_counter()
        error_type = metrics.OTHER
        inflight = method == TOOLS_CALL
        if inflight:
            metrics.MCP_INFLIGHT.inc()
        with telemetry.mcp_span(ctx, method, tool) as span:
            try:
                result = await call_next(ctx)
                error_type = self._tool_error(result) if inflight else ""
                return result
            except MCPError as exc:
                error_type = str(exc.error.code)
                raise
            except ValidationError:
                error_type = INVALID_PARAMS
                raise
            except asyncio.CancelledError:
                error_type = CANCELLED
                raise
            finally:
                if inflight:
                    metrics.MCP_INFLIGHT.dec()
                telemetry.end_mcp_span(span, error_type)
                self._child(method, tool, error_type).observe(time.perf_counter() - started)


#: How often ``PoolSampler`` reads the query pool and the issuer keys (seconds).
SAMPLE_S = 5.0


class PoolSampler:
    """Samples what has no per-call hook into the gauges every ``SAMPLE_S`` (and once at once): the query
    pool's connections (open, in use), waiting requests, the time spent waiting and the checkouts
    (``psycopg_pool``'s ``get_stats``, cumulative: added as deltas), and the age of the issuer keys.
    Sampling costs a call nothing; in multiprocess mode each process's values are its own files."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._wait_ms = 0
        self._checkouts = 0
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def sample(self) -> None:
        from contexts.tokens import keys_age_s

        stats = self.db.pool.get_stats()
        size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
        metrics.DB_POOL_OPEN.set(size)
        metrics.DB_POOL_IN_USE.set(max(0, size - available))
        metrics.DB_POOL_WAITING.set(stats.get("requests_waiting", 0))
        wait_ms, checkouts = stats.get("requests_wait_ms", 0), stats.get("requests_num", 0)
        if wait_ms > self._wait_ms:
            metrics.DB_POOL_WAIT.inc((wait_ms - self._wait_ms) / 1000)
        if checkouts > self._checkouts:
            metrics.DB_POOL_CHECKOUTS.inc(checkouts - self._checkouts)
        self._wait_ms, self._checkouts = wait_ms, checkouts
        age = keys_age_s()
        metrics.JWKS_AGE.set(-1 if age is None else age)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a failed sample keeps the last values; calls are unaffected
                logger.warning("metrics sample failed error_class=%s", type(exc).__name__)

    def stop(self) -> None:
        self._task.cancel()
