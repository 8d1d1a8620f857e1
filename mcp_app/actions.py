"""``tools/call`` of an action tool (``ToolSpec.effect`` submit or cancel: start or stop a job).

The scope is resolved like any call's (one statement on the MCP pool, never cached); then the caller must
be allowed the tool (its binding and permissions now, ``contexts.access``) *and* hold the run scope in
the token presented now — otherwise the tool is answered as unknown. The action runs off the event loop
in a worker thread, in one write transaction, with that thread's Django connection returned afterwards.
It saves no evidence: a run is audited (with the task run and execution request of an investigation);
reading its results saves evidence under the usual rules.

A job-backed submit (``mcp_app.task_records``) of a client that declared the MCP Tasks extension on this
request, in an ordinary chat's context, is answered as a task: its ``McpTask`` row is written in the
submit's transaction and the reply is a ``CreateTaskResult``. Anyone else gets the job answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import anyio
from django.db import connection, transaction
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from contexts import access
from contexts.errors import ApplicationError, ToolNotInContext
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from mcp_app.catalog import CatalogEntry
from mcp_app.errors import application_error_result, internal_error_result, unknown_tool
from mcp_app.pool import QueryDatabase
from mcp_app.resolver import handle_key, resolve_scope_async
from mcp_app.task_records import JobTool, create_task_result, may_be_task, record_task

logger = logging.getLogger("tjwater.mcp")


def _act_in_transaction(
    entry: CatalogEntry, scope: QueryScope, args: Mapping[str, Any], job: JobTool | None
) -> tuple[BaseModel, dict[str, Any] | None]:
    """The action's result and, for a call answered as an MCP task, its ``CreateTaskResult`` (the task
    written in the same transaction: it exists once the reply is sent)."""
    act = entry.spec.act
    assert act is not None  # an action tool always has one (ToolSpec checks it)
    try:
        with transaction.atomic():
            result = act(scope, args)
            recorded = None if job is None else record_task(job=job, scope=scope, tool=entry.spec.name, result=result)
        if recorded is None:
            return result, None
        task_id, row = recorded
        return result, create_task_result(task_id, row, entry.spec.summarize(result))
    finally:
        connection.close()  # a worker thread, not a request thread: its connection goes back now


async def call_action(
    db: QueryDatabase,
    *,
    token: VerifiedToken,
    entry: CatalogEntry,
    name: str,
    args: dict[str, Any],
    job: JobTool | None = None,
) -> dict[str, Any] | Any:
    """The reply to ``tools/call`` of action tool ``entry`` (wire form), or an MCP error for a tool the
    caller may not use. ``job``: the call may be answered as an MCP task (``JobTools.offer``)."""
    started = time.monotonic()
    outcome, scope = "ok", None
    call_conn = db.call_connection()
    try:
        handle = args.get("context_handle")
        scope = await resolve_scope_async(token=token, handle=handle, fetch=call_conn.fetch, key=handle_key(handle))
        await call_conn.release()
        spec = entry.spec
        if not access.may_call(scope, tool=spec.name, permissions=spec.permissions) or not access.may_act(token.scopes):
            raise ToolNotInContext()
        if job is not None and not may_be_task(scope):
            job = None  # an investigation's run is never an MCP task (R-RUN-5): it gets the job answer
        result, task = await anyio.to_thread.run_sync(_act_in_transaction, entry, scope, args, job)
        if task is not None:
            outcome = "task"
            return task
        structured = result.model_dump(mode="json")
        return {
            "content": [{"type": "text", "text": spec.summarize(result)}],
            "structuredContent": structured,
            "isError": False,
            "resultType": "complete",
        }
    except MCPError:
        raise
    except ToolNotInContext:
        outcome = "unknown_tool"
        raise unknown_tool(name) from None
    except ApplicationError as exc:
        outcome = exc.code
        return application_error_result(exc)
    except Exception:
        outcome = "internal_error"
        logger.exception("mcp action failed tool=%s", name)
        return internal_error_result()
    finally:
        await call_conn.release()
        logger.info(
            "mcp action principal=%s project=%s tool=%s duration_ms=%.1f outcome=%s",
            scope.principal_id if scope else "-",
            scope.project_slug if scope else "-",
            name,
            (time.monotonic() - started) * 1000,
            outcome,
        )
