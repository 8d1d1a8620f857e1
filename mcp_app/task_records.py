"""Job-backed tools and the records of their MCP tasks (SEP-2663 ``io.modelcontextprotocol/tasks``, R-RUN-5).

A submit tool whose declaration names a ``follow`` (``queries.registry.Follow``: a read tool that renders
its job's run, an action tool that cancels it) is *job-backed*: a client that declares the Tasks extension
in the request's ``_meta`` gets its call answered as an MCP task instead of the job answer. This module
decides that (``JobTools.offer``, on the action path only: the read hot path never looks), writes the
``McpTask`` row in the submit's own transaction (so the task exists — ``tasks/get`` resolves — before the
``CreateTaskResult`` is sent, as the extension requires), and finds a task again for the principal and
project of a ``tasks/*`` request. Nothing here knows what a job computes: the job answer's fields the
follow tools need are copied by name from their input schemas, and its ``poll_after_ms`` is the hint.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_types import CLIENT_CAPABILITIES_META_KEY
from pydantic import BaseModel

from contexts.models import ContextPurpose, ProjectCompute
from contexts.scope import QueryScope
from mcp_app.catalog import Catalog, CatalogEntry
from mcp_app.models import McpTask

logger = logging.getLogger("tjwater.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: How long a task is kept (``ttlMs``) when its project names no retention: the default retention of runs.
TASK_TTL = timedelta(days=30)
#: The poll hint when a job answer gives none (``poll_after_ms``).
DEFAULT_POLL_MS = 1000
#: A task id is 256 random bits (like a context handle); only its SHA-256 is stored.
TASK_ID_BYTES = 32
TASK_ID_MAX_LENGTH = 100


@dataclass(frozen=True)
class JobTool:
    """A job-backed submit tool: the catalog entries of its follow tools and the job-answer fields they
    are called with (their required arguments besides ``context_handle``)."""

    read: CatalogEntry
    cancel: CatalogEntry
    keys: tuple[str, ...]


def _required(entry: CatalogEntry) -> set[str]:
    return set(entry.spec.input_schema.get("required", [])) - {"context_handle"}


class JobTools:
    """The job-backed tools of one catalog (built once per process, with the catalog)."""

    def __init__(self, catalog: Catalog) -> None:
        self.by_tool: dict[str, JobTool] = {}
        for name, entry in catalog.entries.items():
            follow = entry.spec.follow
            if follow is None:
                continue
            read, cancel = catalog.get(follow.read), catalog.get(follow.cancel)
            if read is None or cancel is None or read.spec.effect != "read" or cancel.spec.effect != "cancel":
                # e.g. a follow tool left out of this deployment's catalog: the tool is answered as a job only.
                logger.warning("tool %s is not job-backed: its follow tools are not a read and a cancel here", name)
                continue
            keys = tuple(sorted(_required(read) | _required(cancel)))
            self.by_tool[name] = JobTool(read=read, cancel=cancel, keys=keys)

    def __bool__(self) -> bool:
        return bool(self.by_tool)

    def offer(self, entry: CatalogEntry, meta: Mapping[str, Any] | None) -> JobTool | None:
        """The job tool to answer this call as a task with, or None: only a job-backed tool, only for a
        client that declared the extension *on this request* (a task is never sent to one that did
        not)."""
        job = self.by_tool.get(entry.spec.name)
        if job is None or not declares_tasks(meta):
            return None
        return job


def declares_tasks(meta: Mapping[str, Any] | None) -> bool:
    """Whether the request's ``_meta`` client capabilities list the Tasks extension."""
    capabilities = (meta or {}).get(CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def may_be_task(scope: QueryScope) -> bool:
    """R-RUN-5 (seed 001): an investigation's run is never an MCP task — only an ordinary chat's."""
    return scope.purpose == ContextPurpose.ORDINARY_CHAT


def task_key(task_id: str) -> str:
    return hashlib.sha256(task_id.encode()).hexdigest()


def _retention(project_id: int) -> timedelta:
    """How long the project keeps a finished run (``ProjectCompute.retention_days``): its task lives as long."""
    days = ProjectCompute.objects.filter(project_id=project_id).values_list("retention_days", flat=True).first()
    return timedelta(days=days) if days else TASK_TTL


def record_task(*, job: JobTool, scope: QueryScope, tool: str, result: BaseModel) -> tuple[str, McpTask] | None:
    """Write the task of a submit's ``result`` (called inside the submit's transaction) and return its id
    (shown once) and row; None when the job answer lacks a field the follow tools need (then the call is
    answered as a job)."""
    data = result.model_dump(mode="json").get("data")
    if not isinstance(data, dict) or any(key not in data for key in job.keys):
        return None
    poll = data.get("poll_after_ms")
    task_id = secrets.token_urlsafe(TASK_ID_BYTES)
    now = datetime.now(UTC)
    row = McpTask.objects.create(
        key=task_key(task_id),
        principal_id=scope.principal_id,
        project_id=scope.project_id,
        tool=tool,
        arguments={key: data[key] for key in job.keys},
        poll_interval_ms=poll if isinstance(poll, int) and poll > 0 else DEFAULT_POLL_MS,
        created_at=now,
        expires_at=now + _retention(scope.project_id),
    )
    return task_id, row


def task_statement(task_id: str, scope: QueryScope, now: datetime) -> Any:
    """The one statement that finds a live task of this scope's principal and project (run by the MCP
    driver on the event loop). Another principal's task, another project's, an expired one and an
    unknown id all find nothing — one answer for all (STYLE "scoped lookups")."""
    return McpTask.objects.filter(
        key=task_key(task_id), principal_id=scope.principal_id, project_id=scope.project_id, expires_at__gt=now
    ).values("tool", "arguments", "poll_interval_ms", "created_at", "expires_at")[:1]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def ttl_ms(created_at: datetime, expires_at: datetime) -> int:
    return int((expires_at - created_at).total_seconds() * 1000)


def create_task_result(task_id: str, row: McpTask, status_message: str) -> dict[str, Any]:
    """The ``CreateTaskResult`` (``Result & Task``, ``resultType: "task"``) of a submit answered as a task."""
    return {
        "resultType": "task",
        "taskId": task_id,
        "status": "working",
        "statusMessage": status_message,
        "createdAt": iso(row.created_at),
        "lastUpdatedAt": iso(row.created_at),
        "ttlMs": ttl_ms(row.created_at, row.expires_at),
        "pollIntervalMs": row.poll_interval_ms,
    }
