"""Small factories for the contexts models: a project, principals with memberships, a task with a
leased current run and an execution request. Tests build their world from these, not from seed_demo."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection
from django.utils import timezone

from contexts.models import ExecutionRequest, Membership, Permission, Principal, Project, Task, TaskRun
from contexts.tokens import VerifiedToken

ALL_PERMISSIONS = [p.value for p in Permission]
T = TypeVar("T")
HOST_CLIENT = "tjwater-agent-mcp"


def issuer() -> str:
    return settings.TJWATER_OIDC_ISSUER or settings.TJWATER_DEV_ISSUER_ID


def project(slug: str | None = None) -> Project:
    slug = slug or f"proj-{uuid.uuid4().hex[:10]}"
    return Project.objects.create(slug=slug, name=slug.title())


def principal(subject: str | None = None) -> Principal:
    subject = subject or f"user-{uuid.uuid4().hex[:10]}"
    return Principal.objects.create(issuer=issuer(), subject=subject, display_name=subject)


def membership(who: Principal, where: Project, permissions: list[str] | None = None) -> Membership:
    return Membership.objects.create(
        principal=who, project=where, permissions=ALL_PERMISSIONS if permissions is None else permissions
    )


@dataclass
class LeasedRun:
    task: Task
    run: TaskRun
    execution_request: ExecutionRequest
    session_id: str


def leased_run(
    where: Project, *, owner: Principal | None = None, session_id: str | None = None, lease_s: int = 600
) -> LeasedRun:
    """A task whose current run, owned by ``owner`` (the principal that may bind it), is leased to
    ``session_id`` for ``lease_s`` seconds, with one execution request."""
    n = uuid.uuid4().hex[:10]
    session_id = session_id or f"session-exec-{n}"
    task = Task.objects.create(project=where, title=f"Investigation {n}")
    run = TaskRun.objects.create(
        task=task,
        sequence=1,
        owner=owner,
        lease_holder=session_id,
        lease_expires_at=timezone.now() + timedelta(seconds=lease_s),
    )
    request = ExecutionRequest.objects.create(run=run, request_id=f"exec-req-{n}")
    return LeasedRun(task=task, run=run, execution_request=request, session_id=session_id)


def supersede(run: TaskRun, *, session_id: str = "session-new", now: datetime | None = None) -> TaskRun:
    """Start the next run of the task: the old one is superseded, the new one leased elsewhere."""
    now = now or timezone.now()
    TaskRun.objects.filter(pk=run.pk).update(superseded_at=now, status=TaskRun.Status.SUPERSEDED)
    return TaskRun.objects.create(
        task_id=run.task_id,
        sequence=run.sequence + 1,
        owner_id=run.owner_id,
        lease_holder=session_id,
        lease_expires_at=now + timedelta(minutes=10),
    )


def token(who: Principal, *, client_id: str = HOST_CLIENT, scopes: tuple[str, ...] = ("mcp.query",)) -> VerifiedToken:
    """A verified token as the validator would return it (service-level tests; the REST tests use real
    dev-issuer tokens)."""
    return VerifiedToken(
        issuer=who.issuer,
        subject=who.subject,
        client_id=client_id,
        scopes=frozenset(scopes),
        audience=("tjwater-mcp",),
        expires_at=int(timezone.now().timestamp()) + 3600,
    )


def committed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in its own thread, i.e. on its own database connection in autocommit mode: its writes
    are committed even while the calling test sits in its (rolled-back) transaction, so other
    processes and threads see them."""

    def run() -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


# A catalog shaped like the registry's (tool → required permissions), plus tools of the classes a
# task_reader must never get (R-CTX-4). None of the latter exist in the product; they are here to prove
# the rule holds if one is ever registered.
CATALOG: dict[str, frozenset[str]] = {
    "get_element_properties": frozenset({"webgis.view"}),
    "list_scada_devices": frozenset({"scada.view"}),
    "query_model_baseline_field": frozenset({"simulation.view"}),
    "query_element_history": frozenset({"scada.view", "simulation.view"}),
    "list_sensor_placement_runs": frozenset({"optimization.run"}),
    "get_task_context": frozenset(),
    "get_task_evidence": frozenset(),
    "publish_report": frozenset({"report.publish"}),
    "approve_plan": frozenset({"approval.grant"}),
    "control_device_valve": frozenset({"device.control"}),
    "run_shell": frozenset(),
    "delegate_subtask": frozenset({"webgis.view"}),
}
TASK_SCOPED = frozenset({"get_task_context", "get_task_evidence"})
FORBIDDEN_FOR_READERS = frozenset(
    {"publish_report", "approve_plan", "control_device_valve", "run_shell", "delegate_subtask"}
)


@dataclass
class World:
    alpha: Project
    beta: Project
    alice: Principal
    bob: Principal
    carol: Principal
    alice_alpha: Membership
    alice_beta: Membership
    bob_beta: Membership
    run_alpha: LeasedRun
    run_beta: LeasedRun
