"""Error mapping of the MCP endpoint, in one place (SPEC R-PROTO-3, STYLE "errors").

- Protocol faults (unknown tool, a tool outside the caller's catalog, arguments failing the wire
  schema) are JSON-RPC errors: ``MCPError(-32602)``. A tool the caller may not use is reported exactly
  like an unknown one, so its existence never leaks.
- Business failures (``ApplicationError``) are ``isError=true`` results whose ``structuredContent`` is
  ``{code, message, retryable}`` — an actionable message, never exception text, SQL or a trace.
- Anything unexpected is a generic ``INTERNAL_ERROR`` result; the server log names its class only.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from contexts.errors import ApplicationError


def unknown_tool(name: str) -> MCPError:
    # Same answer for "no such tool" and "not yours to call" (R-TOOL-1). The name is the caller's own.
    return MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name[:100]}")


def invalid_arguments(detail: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"Invalid arguments: {detail}")


def resource_not_found(uri: str) -> MCPError:
    # SEP-2164 (2026-07-28): an unknown resource is -32602 with the requested URI in ``data``.
    return MCPError(code=INVALID_PARAMS, message="Resource not found", data={"uri": uri[:2048]})


def resource_refused(uri: str, exc: ApplicationError) -> MCPError:
    """``resources/read`` has no ``isError`` result: a context failure (no handle, unknown or foreign
    handle, expired, revoked, membership gone…) is a -32602 naming the stable business code, before
    anything about the resource is looked at — so it never tells whether the resource exists."""
    return MCPError(
        code=INVALID_PARAMS,
        message=f"{exc.code}: {exc.message}",
        data={"uri": uri[:2048], "code": exc.code, "retryable": exc.retryable},
    )


def request_key_required(exc: ApplicationError) -> MCPError:
    """A task-purpose call without its application request key: -32602 naming the ``_meta`` key (R-EVID-2)."""
    return MCPError(
        code=INVALID_PARAMS,
        message=exc.message,
        data={"code": exc.code, "meta_key": getattr(exc, "meta_key", "cn.tjwater/requestKey")},
    )


def resource_internal_error() -> MCPError:
    return MCPError(code=INTERNAL_ERROR, message="The server failed to answer this request; it has been logged.")


def error_result(code: str, message: str, *, retryable: bool) -> types.CallToolResult:
    body: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content=body,
        is_error=True,
        result_type="complete",
    )


def application_error_result(exc: ApplicationError) -> types.CallToolResult:
    # `details` may name missing permissions etc.; they are written by our own code, never raw data.
    result = error_result(exc.code, exc.message, retryable=exc.retryable)
    if exc.details:
        result.structured_content["details"] = exc.details
    return result


def internal_error_result() -> types.CallToolResult:
    return error_result("INTERNAL_ERROR", "The server failed to answer this call; it has been logged.", retryable=True)


class McpDisabled(ApplicationError):
    """An operator turned the MCP entry off (``manage.py mcp_entry off``, seed 001 rollback): no new
    bindings, no calls. Retrying will not help until an operator turns it back on."""

    code = "MCP_DISABLED"
    http_status = 503
    retryable = False
    default_message = "The MCP entry is turned off on this server; retrying will not help."
