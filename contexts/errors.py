"""The application error hierarchy (STYLE "errors").

Services raise these; each edge maps them in one place: the MCP dispatch path to an ``isError`` result
with ``code`` and ``message``, the REST API to a JSON body with the same code and the HTTP status here.
Messages are written for the caller and must never contain exception text, SQL, tokens or handles.
This module sits at the bottom of the dependency graph (contexts ← queries ← mcp_app) so every layer
can raise them.
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


class QueryTimeout(ApplicationError):
    code = "QUERY_TIMEOUT"
    http_status = 504
    retryable = True
    default_message = "The query exceeded its time budget; narrow it and try again."


class DataSourceUnavailable(ApplicationError):
    code = "DATA_SOURCE_UNAVAILABLE"
    http_status = 503
    retryable = True
    default_message = "The data source is temporarily unavailable; retry later."


class CapabilityGap(ApplicationError):
    """A legacy feature this server does not provide, answered explicitly rather than as empty data."""

    code = "CAPABILITY_NOT_AVAILABLE"
    default_message = "This capability is not available on this server."


class AnalysisRunWithoutSeries(ApplicationError):
    """The analysis run has no series to read (it failed, or has not finished): answered explicitly, so
    an empty result never reads as "the scenario had no effect"."""

    code = "ANALYSIS_RUN_HAS_NO_SERIES"
    http_status = 409
    default_message = "This analysis run has no series; get_analysis_run shows its status."


class ToolNotInContext(PermissionDenied):
    """The tool is not in the binding's allowed tools (R-TOOL-1: the MCP layer answers it as an unknown
    tool, so a caller never learns that a tool exists outside its context)."""

    code = "TOOL_NOT_IN_CONTEXT"
    default_message = "This tool is not available in this context."


# --- investigation evidence (SPEC §8, R-EVID) -----------------------------------------------------


class RunSuperseded(RunNotCurrent):
    """A newer run of the task replaced the bound run (before or while the query ran): nothing was
    saved, and the old run stays superseded (R-EVID-3)."""

    code = "RUN_SUPERSEDED"
    default_message = "The task run was superseded by a newer run; nothing was saved. Bind the current run."


class RequestKeyRequired(InvalidParameter):
    """A task-purpose call without ``_meta["cn.tjwater/requestKey"]`` (or with an unusable one). The MCP
    edge answers it as a JSON-RPC -32602 naming the key (a protocol-level client error, not a result)."""

    code = "REQUEST_KEY_REQUIRED"
    meta_key = "cn.tjwater/requestKey"
    default_message = 'Calls in an investigation context need _meta["cn.tjwater/requestKey"] (1-200 characters).'


class RequestKeyReused(ApplicationError):
    """The request key was already used in this session and run for a different tool or parameters
    (R-EVID-2): a retry must repeat the call exactly; a new call needs a new key."""

    code = "REQUEST_KEY_REUSED"
    http_status = 409
    default_message = "This request key was already used for a different call; use a new request key."


class RequestInProgress(ApplicationError):
    """Another call with the same request key is still running and did not finish while this one
    waited; retrying the same call later returns its saved evidence."""

    code = "REQUEST_IN_PROGRESS"
    http_status = 409
    retryable = True
    default_message = "A call with this request key is still running; retry the same call shortly."


class EvidenceNotSaved(ApplicationError):
    """Saving the evidence failed, so the call failed (R-EVID-1: never "success now, evidence later").
    The receipt is released: the same call with the same request key may be retried."""

    code = "EVIDENCE_NOT_SAVED"
    http_status = 503
    retryable = True
    default_message = "The result could not be saved as evidence, so it is not returned; retry the same call."


class McpDisabled(ApplicationError):
    """An operator turned the MCP entry off (``manage.py mcp_entry off``, seed 001 rollback): no new
    bindings, no calls. Retrying will not help until an operator turns it back on."""

    code = "MCP_DISABLED"
    http_status = 503
    retryable = False
    default_message = "The MCP entry is turned off on this server; retrying will not help."
