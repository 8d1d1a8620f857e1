"""The evidence world's shapes: an investigation (a task with a leased current run and an execution
request) and the world the evidence tests share (tests/evidence/conftest.py ``world``)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from contexts.grants import tool_catalog
from contexts.models import ContextEvent, ExecutionRequest, Principal, Project, QueryContext, Task, TaskRun
from contexts.scope import QueryScope
from contexts.selectors import resolve_context
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from evidence.models import EvidenceSnapshot, QueryReceipt
from evidence.services import run_with_evidence
from evidence.task_tools import DEMO_SAMPLE_SOURCE
from queries.demo.seed import DEMO_B_SLUG, DEMO_EXECUTION_REQUEST_ID, DEMO_SESSION_ID, DEMO_SLUG
from tests.support.tokens import verified_token

HOST_CLIENT = "tjwater-agent-mcp"


def in_thread(fn: Callable[[], dict[str, Any]]) -> Callable[[], Any]:
    """``execute`` for the async entry point: the sync query in a worker thread, connection returned."""

    async def execute() -> dict[str, Any]:
        def run() -> dict[str, Any]:
            try:
                return fn()
            finally:
                connection.close()

        return await anyio.to_thread.run_sync(run)

    return execute


def run_evidence_call(*, execute: Callable[[], dict[str, Any]], **call: Any) -> dict[str, Any]:
    """One call through the real evidence path (``run_with_evidence``, as the MCP edge runs it), from
    synchronous test code: its own event loop, the database steps in worker threads, and ``execute`` —
    the caller's query — in a worker thread too (``in_thread``)."""
    return anyio.run(functools.partial(run_with_evidence, execute=in_thread(execute), **call))


def verified(subject: str, client: str = HOST_CLIENT) -> VerifiedToken:
    return verified_token(
        subject,
        client=client,
        scopes=("mcp.context.bind", "mcp.query"),
        issuer=settings.TJWATER_OIDC_ISSUER,
        expires_at=int(timezone.now().timestamp()) + 3600,
    )


@dataclass
class Investigation:
    """A task with a current run leased to ``session_id`` and one execution request."""

    task: Task
    run: TaskRun
    session_id: str
    execution_request_id: str


@dataclass
class EvidenceWorld:
    demo: Project
    demo_b: Project
    demo_task: Investigation  # the demo's task 1 (run 2, session-demo-1)
    other_task: Investigation  # another investigation in the same project
    demo_b_task: Task  # bob's task in demo-b (run leased by session-demo-b-1)
    bind: Callable[..., QueryScope]
    investigation: Callable[[], Investigation]


def new_investigation(project: Project, created: list[int]) -> Investigation:
    n = uuid.uuid4().hex[:10]
    task = Task.objects.create(project=project, title=f"evid test {n}", status=Task.Status.IN_PROGRESS)
    created.append(task.pk)
    session = f"evid-session-{n}"
    worker = Principal.objects.get(subject="svc-worker", memberships__project=project)
    run = TaskRun.objects.create(
        task=task,
        sequence=1,
        owner=worker,
        lease_holder=session,
        lease_expires_at=timezone.now() + timedelta(hours=2),
    )
    request = ExecutionRequest.objects.create(run=run, request_id=f"evid-exec-{n}")
    return Investigation(task=task, run=run, session_id=session, execution_request_id=request.request_id)


@contextmanager
def evidence_world() -> Iterator[EvidenceWorld]:
    """The evidence world (see tests/evidence/conftest.py), committed rows removed on exit; needs database
    access in autocommit (``django_db_blocker.unblock()``)."""
    demo = Project.objects.get(slug=DEMO_SLUG)
    demo_b = Project.objects.get(slug=DEMO_B_SLUG)
    demo_run = TaskRun.objects.select_related("task").get(task__project=demo, superseded_at__isnull=True)
    created_tasks: list[int] = []
    contexts: list[int] = []
    catalog, task_scoped = tool_catalog()

    def bind(
        purpose: str,
        *,
        subject: str = "svc-worker",
        project: Project = demo,
        investigation: Investigation | None = None,
        session_id: str | None = None,
        report_revision: int | None = None,
    ) -> QueryScope:
        inv = investigation
        fields: dict[str, Any] = {} if report_revision is None else {"report_revision": report_revision}
        if purpose == "task_execution":
            assert inv is not None
            fields |= {
                "task_id": inv.task.pk,
                "run_id": inv.run.pk,
                "execution_request_id": inv.execution_request_id,
            }
            session = inv.session_id
        elif purpose == "task_reader":
            assert inv is not None
            fields |= {"task_id": inv.task.pk, "parent_session_id": inv.session_id}
            session = session_id or f"evid-reader-{uuid.uuid4().hex[:8]}"
        else:
            session = session_id or f"evid-chat-{uuid.uuid4().hex[:8]}"
        token = verified(subject)
        with override_settings(TJWATER_CONTEXT_TTL_S=3600):
            created = context_create(
                token=token,
                project_slug=project.slug,
                session_id=session,
                purpose=purpose,
                catalog=catalog,
                task_scoped=task_scoped,
                **fields,
            )
        contexts.append(created.context_id)
        return resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=())

    world = EvidenceWorld(
        demo=demo,
        demo_b=demo_b,
        demo_task=Investigation(
            task=demo_run.task, run=demo_run, session_id=DEMO_SESSION_ID, execution_request_id=DEMO_EXECUTION_REQUEST_ID
        ),
        other_task=new_investigation(demo, created_tasks),
        demo_b_task=Task.objects.get(project=demo_b),
        bind=bind,
        investigation=lambda: new_investigation(demo, created_tasks),
    )
    yield world
    # Evidence of the demo task goes (the demo itself, its DEMO sample included, stays as seeded); our
    # tasks cascade their runs, receipts, snapshots and contexts.
    QueryReceipt.objects.filter(task=demo_run.task).delete()
    EvidenceSnapshot.objects.filter(task=demo_run.task).exclude(source=DEMO_SAMPLE_SOURCE).delete()
    Task.objects.filter(pk__in=created_tasks).delete()
    QueryContext.objects.filter(pk__in=contexts).delete()
    ContextEvent.objects.filter(context_id__in=contexts).delete()
