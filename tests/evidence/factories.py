"""The evidence world's shapes: an investigation (a task with a leased current run and an execution
request) and the world the evidence tests share (tests/evidence/conftest.py ``world``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from contexts.models import ExecutionRequest, Principal, Project, Task, TaskRun
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from tests.support.tokens import verified_token

HOST_CLIENT = "tjwater-agent-mcp"


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
