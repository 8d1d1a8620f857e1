"""The application error hierarchy (STYLE "errors").

Services raise these; each edge maps them in one place: the MCP dispatch path to an ``isError`` result
with ``code`` and ``message``, the REST API to a JSON body with the same code and the HTTP status here.
Messages are written for the caller and must never contain exception text, SQL, tokens or handles.
This module sits at the bottom of the dependency graph (contexts ← queries ← evidence ← mcp_app): it holds
the base classes every layer raises and the errors of this app; each app above keeps its own errors
(``queries.errors``, ``evidence.errors``, ``mcp_app.errors``) with the same wire format.
"""

from __future__ import annotations


class ApplicationError(Exception):
    """A business failure with a stable code. ``retryable`` tells a client whether the same call may
    succeed later unchanged."""

    code: str = "APPLICATION_ERROR"
    http_status: int = 400
    retryable: bool = False
    default_message: str = "The request could not be completed."

    def __init__(
        self, message: str | None = None, *, details: dict[str, object] | None = None, retry_after_s: int | None = None
    ) -> None:
        self.message = message or self.default_message
        self.details = details or {}
        #: Seconds a retryable refusal asks the caller to wait (HTTP ``Retry-After``); ``None``: the edge's default.
        self.retry_after_s = retry_after_s
        super().__init__(self.message)

    def as_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.details:
            body["details"] = self.details
        return body


class InvalidParameter(ApplicationError):
    code = "INVALID_PARAMETER"
    default_message = "A parameter is not valid for this query."


class LimitExceeded(ApplicationError):
    code = "LIMIT_EXCEEDED"
    default_message = "The request exceeds a server limit; narrow it and try again."


class NotFound(ApplicationError):
    """Missing and not-visible-to-you are the same answer (STYLE "scoped lookups")."""

    code = "NOT_FOUND"
    http_status = 404
    default_message = "No such item in this project."


class PermissionDenied(ApplicationError):
    code = "PERMISSION_DENIED"
    http_status = 403
    default_message = "The caller lacks the permission this request needs."


class ProjectContextRequired(ApplicationError):
    code = "PROJECT_CONTEXT_REQUIRED"
    default_message = "A project must be chosen before business data can be queried."


class ContextInvalid(ApplicationError):
    """The context handle is unknown, belongs to someone else, or no longer matches its binding."""

    code = "CONTEXT_INVALID"
    http_status = 403
    default_message = "The context handle is not valid for this caller; create a new context."


class ContextExpired(ApplicationError):
    code = "CONTEXT_EXPIRED"
    http_status = 403
    default_message = "The context handle has expired; create a new context."


class ContextRevoked(ApplicationError):
    code = "CONTEXT_REVOKED"
    http_status = 403
    default_message = "The context handle was revoked; create a new context."


class ContextLimitReached(ApplicationError):
    """The principal already holds the most live contexts allowed in this project
    (``TJWATER_CONTEXT_MAX_LIVE``): a new bind is refused rather than silently revoking an older one."""

    code = "CONTEXT_LIMIT_REACHED"
    http_status = 409
    default_message = "Too many live contexts for this principal in this project; delete unused ones first."


class RunNotCurrent(ApplicationError):
    code = "RUN_NOT_CURRENT"
    http_status = 409
    default_message = "The task run is no longer current or its lease is not held by this session."


class RateLimited(ApplicationError):
    code = "RATE_LIMITED"
    http_status = 429
    retryable = True
    default_message = "Too many queries in flight for this principal and project; retry shortly."


class DataSourceUnavailable(ApplicationError):
    code = "DATA_SOURCE_UNAVAILABLE"
    http_status = 503
    retryable = True
    default_message = "The data source is temporarily unavailable; retry later."


class ToolNotInContext(PermissionDenied):
    """The tool is not in the binding's allowed tools (R-TOOL-1: the MCP layer answers it as an unknown
    tool, so a caller never learns that a tool exists outside its context)."""

    code = "TOOL_NOT_IN_CONTEXT"
    default_message = "This tool is not available in this context."


# --- investigation runs (SPEC §8) ---------------------------------------------------------------


class RunSuperseded(RunNotCurrent):
    """A newer run of the task replaced the bound run (before or while the query ran): nothing was
    saved, and the old run stays superseded (R-EVID-3)."""

    code = "RUN_SUPERSEDED"
    default_message = "The task run was superseded by a newer run; nothing was saved. Bind the current run."
