"""The one dispatch path every tool call goes through (STYLE "thin edges").

authenticate (done by the HTTP layer) → find the tool in the catalog → validate the arguments against
its wire schema → resolve the ``QueryScope`` → check the caller may use the tool → take an in-flight
slot → run the service in a worker thread under the query budget, cancellable down to PostgreSQL →
shape the result (envelope, inline size cap) → log one line.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
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
    unknown_tool,
)
from mcp_app.limits import ConcurrencyLimiter
from mcp_app.resolver import resolve_scope

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
    """R-TOOL-1: catalog ∩ the principal's permissions ∩ the context's tools."""
    if not all(scope.has(p) for p in entry.spec.permissions):
        return False
    return not scope.allowed_tools or entry.spec.name in scope.allowed_tools


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


def _resolve(token: VerifiedToken, args: dict[str, Any], entry: CatalogEntry) -> QueryScope:
    """Resolve the scope in a worker thread, handing its database connection back to the pool after."""
    try:
        return resolve_scope(token=token, arguments=args, tool=entry.spec)
    finally:
        connection.close()


class Dispatcher:
    """Serves ``tools/call`` for one process (catalog + limiter)."""

    def __init__(self, catalog: Catalog, limiter: ConcurrencyLimiter) -> None:
        self.catalog = catalog
        self.limiter = limiter

    async def call_tool(
        self, *, token: VerifiedToken, name: str, arguments: Mapping[str, Any] | None, session: Any, progress: bool
    ) -> types.CallToolResult:
        entry = self.catalog.get(name)
        if entry is None:
            raise unknown_tool(name)
        args = validate_arguments(entry, arguments)
        started = time.monotonic()
        scope: QueryScope | None = None
        outcome = "ok"
        rows = 0
        try:
            scope = await anyio.to_thread.run_sync(_resolve, token, args, entry)
            if not caller_may_use(entry, scope):
                outcome = "unknown_tool"
                raise unknown_tool(name)
            async with self.limiter.slot(scope.principal_id, scope.project_id):
                if progress:
                    await session.report_progress(0, 1, "query started")
                bound_scope = scope
                result = await run_query(
                    lambda: entry.spec.invoke(bound_scope, args),
                    budget_s=settings.TJWATER_MCP_QUERY_BUDGET_S,
                    audit_fields={
                        "principal": scope.principal_id,
                        "project": scope.project_id,
                        "tool": name,
                    },
                )
                if progress:
                    await session.report_progress(1, 1, "query finished")
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
        except ToolNotInContext:
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
            logger.info(
                "mcp call principal=%s project=%s tool=%s duration_ms=%.1f rows=%d outcome=%s",
                scope.principal_id if scope else "-",
                scope.project_slug if scope else "-",
                name,
                (time.monotonic() - started) * 1000,
                rows,
                outcome,
            )
