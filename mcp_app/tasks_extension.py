"""The MCP Tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``, schema 2026-07-28): the second face
of a job-backed tool's job (R-RUN-5), built on the SDK's extension contract (``mcp.server.extension``).

``TasksExtension`` contributes three request methods (``MethodBinding``: ``tasks/get``, ``tasks/update``,
``tasks/cancel``) and is advertised under ``capabilities.extensions`` with no settings (the extension
defines none); ``install`` applies it to the low-level server the way ``MCPServer`` applies an extension
(additive methods only, never a spec method, once). It does not override ``intercept_tool_call``: the
task is decided on the action path (``mcp_app.actions``), so a read call pays nothing for it.

Every ``tasks/*`` request is authorised like ``tools/call`` (R-RUN-5): the HTTP layer authenticates the
token and asks ``mcp.query`` of it (``TASK_METHOD_SCOPES``, used by ``mcp_app.asgi``); the ``Mcp-Name``
header must equal ``params.taskId`` (the extension's routing rule, -32020 otherwise); the client must
declare the extension on the request (-32021); the context handle in ``_meta["cn.tjwater/contextHandle"]``
is resolved like a call's (a failure is -32602 naming the business code, before any task is looked at)
and must be an ordinary chat's; the task must belong to that context's principal and project and be
unexpired — anything else, including someone else's task id, is the one -32602 "Task not found".

The task's state is its job's, read through the tool's ``follow.read`` tool with the full ``tools/call``
dispatch (the context checked again, slots, the plan, the inline cut): the answer's ``data`` carries the
job vocabulary (``status`` queued/running/succeeded/failed/cancelled, ``progress``, ``status_message``).
queued/running is ``working`` (``statusMessage`` is the progress); succeeded is ``completed`` with that
tool's ``CallToolResult`` inlined; a job that failed is ``completed`` with the same result marked
``isError`` (the extension keeps ``failed`` for JSON-RPC errors, which is what a refused read is:
``failed`` with its ``error``); cancelled is ``cancelled``. ``tasks/cancel`` calls ``follow.cancel`` the
same way (the cancel service of the tool agents use) and acknowledges; ``tasks/update`` acknowledges (no
job here asks the client for input).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone
from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, RequestHandler
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.extension import validate_extension_identifier
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import HEADER_MISMATCH, METHOD_NOT_FOUND, RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, Field

from contexts.errors import ApplicationError, ContextInvalid
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from mcp_app.catalog import CatalogEntry
from mcp_app.dispatch import Dispatcher
from mcp_app.resolver import RESOURCE_HANDLE_META_KEY, resolve_scope_async
from mcp_app.task_records import (
    TASK_ID_MAX_LENGTH,
    TASKS_EXTENSION,
    JobTool,
    iso,
    may_be_task,
    task_statement,
    ttl_ms,
)
from queries.arguments import bad_text_path
from queries.models.jobs import JobStatus

logger = logging.getLogger("tjwater.mcp")

PROTOCOL_VERSIONS = frozenset({"2026-07-28"})
#: The scope check of the HTTP layer (``auth.authorize_method``): a ``tasks/*`` request is opened by what
#: opens ``tools/call`` (``contexts.access.METHOD_SCOPES``).
TASK_METHOD_SCOPES: dict[str, str] = {m: "tools/call" for m in ("tasks/get", "tasks/update", "tasks/cancel")}
HANDLE_MISSING = (
    f'tasks/* requests need the context handle in _meta["{RESOURCE_HANDLE_META_KEY}"]: a live context of the '
    "task's project."
)
WORKING = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})


class TaskParams(RequestParams):
    """``params`` of ``tasks/get`` and ``tasks/cancel``."""

    task_id: str = Field(min_length=1)


class UpdateTaskParams(TaskParams):
    """``params`` of ``tasks/update`` (responses to input requests, which no job here makes)."""

    input_responses: dict[str, Any] = Field(default_factory=dict)


TokenOf = Callable[[ServerRequestContext[Any, Any]], VerifiedToken]


def task_not_found() -> MCPError:
    # The extension's "Invalid or nonexistent taskId": one answer for unknown, expired and not yours.
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


def _refused(exc: ApplicationError) -> MCPError:
    """The context did not resolve: -32602 naming the business code (like ``resources/read``), before
    anything about the task is looked at."""
    return MCPError(
        code=INVALID_PARAMS, message=f"{exc.code}: {exc.message}", data={"code": exc.code, "retryable": exc.retryable}
    )


def _wire(answer: Any) -> dict[str, Any]:
    if isinstance(answer, BaseModel):
        return answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dict(answer)


def _moment(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return iso(datetime.fromisoformat(value))
    except ValueError:
        return None


class TasksExtension(Extension):
    """``tasks/get``, ``tasks/update`` and ``tasks/cancel`` over the job-backed tools of one dispatcher."""

    identifier = TASKS_EXTENSION

    def __init__(self, dispatcher: Dispatcher, *, token_of: TokenOf) -> None:
        self.dispatcher = dispatcher
        self.token_of = token_of

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self.get, PROTOCOL_VERSIONS),
            MethodBinding("tasks/update", UpdateTaskParams, self.update, PROTOCOL_VERSIONS),
            MethodBinding("tasks/cancel", TaskParams, self.cancel, PROTOCOL_VERSIONS),
        )

    # -- the methods ------------------------------------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        async with _Logged("tasks/get") as log:
            token, handle, row, job = await self._task(ctx, params, log)
            answer, error = await self._call(ctx, token, job.read, handle, row["arguments"])
            task = self._state(answer, error)
            log.outcome = task["status"]
            updated = task.pop("lastUpdatedAt", None) or iso(row["created_at"])
            return {
                "resultType": "complete",
                "taskId": params.task_id,
                "createdAt": iso(row["created_at"]),
                "lastUpdatedAt": updated,
                "ttlMs": ttl_ms(row["created_at"], row["expires_at"]),
                "pollIntervalMs": row["poll_interval_ms"],
                **task,
            }

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        async with _Logged("tasks/cancel") as log:
            token, handle, row, job = await self._task(ctx, params, log)
            _answer, error = await self._call(ctx, token, job.cancel, handle, row["arguments"])
            if error is not None:  # e.g. the token lacks the run scope: the cancel tool is not this caller's
                raise MCPError(code=error["code"], message=error["message"], data=error.get("data"))
            # A business refusal (the run already ended) is acknowledged too: cancelling is cooperative,
            # and the task may end in another terminal state (SEP-2663 "Task Cancellation").
            return {"resultType": "complete"}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        async with _Logged("tasks/update") as log:
            await self._task(ctx, params, log)
            return {"resultType": "complete"}  # no outstanding input request: responses are ignored

    # -- shared steps -----------------------------------------------------------------------------

    async def _task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams, log: _Logged
    ) -> tuple[VerifiedToken, str, dict[str, Any], JobTool]:
        """Every check of a ``tasks/*`` request (module docstring), in order; the token, the context
        handle, the task's row and its job tool."""
        headers = ctx.request.headers if ctx.request is not None else {}
        if decode_header_value(headers.get(MCP_NAME_HEADER)) != params.task_id:
            raise MCPError(
                code=HEADER_MISMATCH, message=f"{MCP_NAME_HEADER} header does not match the request body's 'taskId'"
            )
        require_client_extension(ctx, TASKS_EXTENSION)
        token = self.token_of(ctx)
        scope = await self._scope(token, params.meta)
        log.scope = scope
        if not may_be_task(scope) or len(params.task_id) > TASK_ID_MAX_LENGTH:
            raise task_not_found()
        try:
            rows = await self.dispatcher.db.fetch(task_statement(params.task_id, scope, timezone.now()))
        except ApplicationError as exc:  # the database did not answer
            raise MCPError(code=INTERNAL_ERROR, message=exc.message, data={"code": exc.code}) from None
        job = self.dispatcher.jobs.by_tool.get(rows[0]["tool"]) if rows else None
        if job is None:
            raise task_not_found()
        log.tool = rows[0]["tool"]
        return token, _handle(params.meta), rows[0], job

    async def _scope(self, token: VerifiedToken, meta: Mapping[str, Any] | None) -> QueryScope:
        handle = (meta or {}).get(RESOURCE_HANDLE_META_KEY)
        try:
            if isinstance(handle, str) and bad_text_path(handle) is not None:
                raise ContextInvalid()
            return await resolve_scope_async(
                token=token, handle=handle, fetch=self.dispatcher.db.fetch, missing=HANDLE_MISSING
            )
        except ApplicationError as exc:
            raise _refused(exc) from None

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        token: VerifiedToken,
        entry: CatalogEntry,
        handle: str,
        arguments: Mapping[str, Any],
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """``tools/call`` of a follow tool for the task's job, through the one dispatch path: its wire
        result, or the JSON-RPC error it was refused with."""
        try:
            answer = await self.dispatcher.call_tool(
                token=token,
                name=entry.spec.name,
                arguments={**arguments, "context_handle": handle},
                session=ctx.session,
                progress=False,
                meta={},
            )
        except MCPError as exc:
            return None, exc.error.model_dump(mode="json", by_alias=True, exclude_none=True)
        return _wire(answer), None

    @staticmethod
    def _state(answer: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
        """The task's status fields from its read tool's answer (module docstring)."""
        if answer is None:
            assert error is not None
            return {"status": "failed", "statusMessage": str(error.get("message", "")), "error": error}
        summary = " ".join(c.get("text", "") for c in answer.get("content", []) if isinstance(c, dict)).strip()
        if answer.get("isError"):
            return {"status": "completed", "statusMessage": summary, "result": answer}
        structured = answer.get("structuredContent")
        data = structured.get("data") if isinstance(structured, dict) else None
        data = data if isinstance(data, dict) else {}
        status = data.get("status")
        updated = _moment(data.get("finished_at")) or _moment(data.get("started_at")) or _moment(data.get("created_at"))
        fields: dict[str, Any] = {"lastUpdatedAt": updated} if updated else {}
        if status == JobStatus.SUCCEEDED:
            return {**fields, "status": "completed", "statusMessage": summary, "result": answer}
        if status == JobStatus.FAILED:
            return {**fields, "status": "completed", "statusMessage": summary, "result": {**answer, "isError": True}}
        if status == JobStatus.CANCELLED:
            return {**fields, "status": "cancelled", "statusMessage": str(data.get("status_message") or "Cancelled.")}
        progress = data.get("progress")
        message = str(status or "working")
        if isinstance(progress, int | float) and status == JobStatus.RUNNING:
            message += f", {progress:.0%}"
        if data.get("status_message"):
            message += f": {data['status_message']}"
        return {**fields, "status": "working", "statusMessage": message}


def _handle(meta: Mapping[str, Any] | None) -> str:
    handle = (meta or {}).get(RESOURCE_HANDLE_META_KEY)
    assert isinstance(handle, str)  # it resolved
    return handle


class _Logged:
    """One log line per ``tasks/*`` request (principal, project, tool, duration, outcome), like a call's."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.scope: QueryScope | None = None
        self.tool = "-"
        self.outcome = "ok"
        self.started = 0.0

    async def __aenter__(self) -> _Logged:
        self.started = time.monotonic()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if isinstance(exc, MCPError):
            self.outcome = str(exc.error.code)
        elif exc is not None:
            self.outcome = type(exc).__name__
        logger.info(
            "mcp task method=%s principal=%s project=%s tool=%s duration_ms=%.1f outcome=%s",
            self.method,
            self.scope.principal_id if self.scope else "-",
            self.scope.project_slug if self.scope else "-",
            self.tool,
            (time.monotonic() - self.started) * 1000,
            self.outcome,
        )


def _version_gated(binding: MethodBinding) -> RequestHandler:
    """``MethodBinding.protocol_versions`` honoured (the SDK's ``MCPServer`` wraps the same way): a
    request at another version is "Method not found"."""
    versions = binding.protocol_versions

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        if versions is not None and ctx.protocol_version not in versions:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=binding.method)
        return await binding.handler(ctx, params)

    return gated


def install(server: Server[Any], extension: Extension) -> list[str]:
    """Apply ``extension`` to the low-level ``server`` as ``MCPServer`` applies one (its methods added,
    its settings advertised at ``capabilities.extensions[identifier]``); returns the methods added. An
    extension here contributes methods only (this server's tools come from the registry)."""
    validate_extension_identifier(extension.identifier, owner=type(extension).__name__)
    if extension.identifier in server.extensions:
        raise ValueError(f"Extension {extension.identifier!r} is already installed")
    if extension.tools() or extension.resources():
        raise ValueError(f"Extension {extension.identifier!r}: only methods can be added to this server")
    added = []
    for binding in extension.methods():
        if server.get_request_handler(binding.method) is not None:
            raise ValueError(f"Extension {extension.identifier!r} binds {binding.method!r}, which is registered")
        server.add_request_handler(binding.method, binding.params_type, _version_gated(binding))
        added.append(binding.method)
    server.extensions[extension.identifier] = extension.settings()
    return added
