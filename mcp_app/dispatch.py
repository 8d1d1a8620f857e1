"""The one dispatch path every tool call goes through (STYLE "thin edges").

authenticate (done by the HTTP layer) → find the tool in the catalog → validate the arguments against
its wire schema → then, in ONE worker thread inside the call's read-only transaction (cancellable down
to PostgreSQL, under the query budget): resolve the ``QueryScope`` from the context handle → check the
caller may use the tool → take an in-flight slot → run the service → release the slot → back on the
event loop: shape the result (envelope, inline size cap) → log one line.

One thread hop per call (not one for the scope and another for the query) and one database connection
checkout; the slot's lease is kept alive from the event loop while the worker runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from django.db import connection
from jsonschema.exceptions import ValidationError as SchemaValidationError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from referencing.exceptions import Unresolvable

from contexts.errors import ApplicationError, LimitExceeded, ToolNotInContext
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from mcp_app.cancel import run_query
from mcp_app.catalog import Catalog, CatalogEntry
from mcp_app.errors import (
    application_error_result,
    internal_error_result,
    invalid_arguments,
    resource_internal_error,
    resource_not_found,
    resource_refused,
    unknown_tool,
)
from mcp_app.limits import ConcurrencyLimiter, LeaseHolder
from mcp_app.resolver import resolve_resource_scope, resolve_scope
from queries.access import may_use
from queries.plan import run_sync

logger = logging.getLogger("tjwater.mcp")


def _schema_error_detail(error: SchemaValidationError) -> str:
    """Where and which rule failed — never the offending value (it may be sensitive)."""
    path = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    if error.validator == "additionalProperties":
        return f"{path}: unexpected property"
    if error.validator == "required":
        return f"{path}: missing required property"
    return f"{path}: fails '{error.validator}'"


def validate_arguments(entry: CatalogEntry, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    args = dict(arguments or {})
    try:
        error = next(iter(sorted(entry.validator.iter_errors(args), key=lambda e: list(e.absolute_path))), None)
    except Unresolvable:
        raise invalid_arguments("schema reference cannot be resolved") from None
    if error is not None:
        raise invalid_arguments(_schema_error_detail(error))
    return args


def caller_may_use(entry: CatalogEntry, scope: QueryScope) -> bool:
    """R-TOOL-1: catalog ∩ the principal's permissions (now) ∩ the context's tools, decided by
    ``queries.access`` (shared with every other edge). A binding with no tools allows none."""
    return may_use(entry.spec, scope)


def _json_size(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def fit_inline(structured: dict[str, Any], arguments: Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """R-PAGE-5: a result over ``max_bytes`` of JSON is not sent whole. A page is cut to the items that
    fit, marked ``truncated`` with ``continue_with`` = the arguments for the rest; anything else that
    cannot be cut is refused with ``LIMIT_EXCEEDED``."""
    if _json_size(structured) <= max_bytes:
        return structured
    data = structured.get("data")
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise LimitExceeded("The result is too large to return inline; narrow the request.")
    offset = int(data.get("offset", 0))
    all_items = items
    low, high = 0, len(all_items) - 1  # find the largest count that fits (≥ 0)
    best = 0
    while low <= high:
        mid = (low + high + 1) // 2
        data["items"] = all_items[:mid]
        if _json_size(structured) + 200 <= max_bytes:  # 200: room for the continuation fields
            best = mid
            low = mid + 1
        else:
            high = mid - 1
        if mid == 0:
            break
    if best == 0:
        raise LimitExceeded("Even one item of this page is too large to return inline.")
    data["items"] = all_items[:best]
    data["has_more"] = True
    if isinstance(structured.get("page"), dict):
        structured["page"]["has_more"] = True
    structured["truncated"] = True
    structured["continue_with"] = {
        **{k: v for k, v in arguments.items() if k != "context_handle"},
        "offset": offset + best,
        "limit": best,
    }
    return structured


def _summary(entry: CatalogEntry, result: BaseModel, structured: dict[str, Any]) -> str:
    text = entry.spec.summarize(result)
    if structured.get("truncated"):
        text += f" Truncated to fit inline: call again with {json.dumps(structured['continue_with'])} for more."
    return text


def _row_count(structured: dict[str, Any]) -> int:
    data = structured.get("data")
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return len(data["items"])
    return 1


class _NotCallable(Exception):
    """The resolved caller may not use this tool (answered as an unknown tool)."""


@dataclass
class _CallState:
    """What the worker thread learns about a call, for the event-loop side (logs, audit, heartbeat)."""

    scope: QueryScope | None = None
    lease: LeaseHolder = field(default_factory=LeaseHolder)

    def audit_fields(self) -> dict[str, object]:
        scope = self.scope
        return {
            "principal": scope.principal_id if scope else "-",
            "project": scope.project_id if scope else "-",
        }


def _resolve_resource(token: VerifiedToken, meta: Mapping[str, Any] | None) -> QueryScope:
    try:
        return resolve_resource_scope(token=token, meta=meta)
    finally:
        connection.close()


class Dispatcher:
    """Serves ``tools/call`` and ``resources/read`` for one process (catalog + limiter)."""

    def __init__(self, catalog: Catalog, limiter: ConcurrencyLimiter) -> None:
        self.catalog = catalog
        self.limiter = limiter

    def _serve(
        self,
        *,
        token: VerifiedToken,
        entry: CatalogEntry,
        args: dict[str, Any],
        state: _CallState,
        session: Any | None,
    ) -> BaseModel:
        """The worker-thread part of a call (inside ``cancel.run_query``'s transaction)."""
        scope = resolve_scope(token=token, arguments=args, tool_name=entry.spec.name)
        state.scope = scope
        if not caller_may_use(entry, scope):
            raise _NotCallable
        lease = self.limiter.acquire_blocking(scope.principal_id, scope.project_id)
        state.lease.set(lease)
        try:
            if session is not None:
                anyio.from_thread.run(session.report_progress, 0, 1, "query started")
            result = run_sync(entry.spec.invoke(scope, args))
            if session is not None:
                anyio.from_thread.run(session.report_progress, 1, 1, "query finished")
            return result
        finally:
            state.lease.set(None)
            self.limiter.release_blocking(lease)

    async def call_tool(
        self, *, token: VerifiedToken, name: str, arguments: Mapping[str, Any] | None, session: Any, progress: bool
    ) -> types.CallToolResult:
        entry = self.catalog.get(name)
        if entry is None:
            raise unknown_tool(name)
        args = validate_arguments(entry, arguments)
        started = time.monotonic()
        state = _CallState()
        outcome = "ok"
        rows = 0
        # A plain task, not a task group around the call: exceptions of the call must reach the caller
        # unwrapped (a task group would wrap them in an ExceptionGroup).
        heartbeat = asyncio.get_running_loop().create_task(self.limiter.keep_alive(state.lease))
        try:
            result = await run_query(
                lambda: self._serve(
                    token=token, entry=entry, args=args, state=state, session=session if progress else None
                ),
                budget_s=settings.TJWATER_MCP_QUERY_BUDGET_S,
                audit_fields=lambda: {**state.audit_fields(), "tool": name},
            )
            structured = fit_inline(result.model_dump(mode="json"), args, settings.TJWATER_MCP_INLINE_MAX_BYTES)
            rows = _row_count(structured)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=_summary(entry, result, structured))],
                structured_content=structured,
                is_error=False,
                result_type="complete",
            )
        except MCPError:
            raise
        except (_NotCallable, ToolNotInContext):
            outcome = "unknown_tool"
            raise unknown_tool(name) from None
        except ApplicationError as exc:
            outcome = exc.code
            return application_error_result(exc)
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"
            raise
        except Exception as exc:
            outcome = "internal_error"
            logger.error("mcp tool failed tool=%s error_class=%s", name, type(exc).__name__)
            return internal_error_result()
        finally:
            heartbeat.cancel()
            scope = state.scope
            logger.info(
                "mcp call principal=%s project=%s tool=%s duration_ms=%.1f rows=%d outcome=%s",
                scope.principal_id if scope else "-",
                scope.project_slug if scope else "-",
                name,
                (time.monotonic() - started) * 1000,
                rows,
                outcome,
            )

    async def read_resource(
        self, *, token: VerifiedToken, uri: str, meta: Mapping[str, Any] | None
    ) -> types.ReadResourceResult:
        """``resources/read`` (R-EVID-4, R-CTX-6): the context handle from
        ``_meta["cn.tjwater/contextHandle"]`` is resolved first (no tool); without a valid one the
        caller learns nothing about the resource. No evidence resources exist yet, so an authorized
        read of any URI is "not found" (-32602, SEP-2164)."""
        started = time.monotonic()
        scope: QueryScope | None = None
        outcome = "not_found"
        try:
            scope = await anyio.to_thread.run_sync(_resolve_resource, token, meta)
            raise resource_not_found(uri)
        except MCPError:
            raise
        except ApplicationError as exc:
            outcome = exc.code
            raise resource_refused(uri, exc) from None
        except Exception as exc:
            outcome = "internal_error"
            logger.error("mcp resource read failed error_class=%s", type(exc).__name__)
            raise resource_internal_error() from None
        finally:
            logger.info(
                "mcp resource read principal=%s project=%s duration_ms=%.1f outcome=%s",
                scope.principal_id if scope else "-",
                scope.project_slug if scope else "-",
                (time.monotonic() - started) * 1000,
                outcome,
            )
