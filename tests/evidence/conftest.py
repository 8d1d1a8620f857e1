"""The evidence world: the demo utility (committed once per session by ``demo_loaded``) plus committed
rows of our own — tasks with leased runs for ``svc-worker`` in ``tianjin-demo`` — and context bindings
created with ``contexts.services.context_create`` like the REST API does, resolved into ``QueryScope``s
with ``resolve_context`` like the MCP edge does.

The tests drive real threads and asyncio tasks with their own database connections, so every row is
committed (``django_db_blocker.unblock()``, no test transaction) and removed again afterwards:
``transaction=True`` would flush the demo other modules rely on (tests/conftest.py refuses it at collection).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from contexts.models import ContextEvent, Project, QueryContext, Task, TaskRun
from contexts.scope import QueryScope
from contexts.selectors import resolve_context
from contexts.services import context_create, tool_catalog
from evidence.models import EvidenceSnapshot, QueryReceipt
from evidence.task_tools import DEMO_SAMPLE_SOURCE
from queries.demo.seed import DEMO_B_SLUG, DEMO_EXECUTION_REQUEST_ID, DEMO_SESSION_ID, DEMO_SLUG
from tests.evidence.factories import EvidenceWorld, Investigation, new_investigation, verified


@pytest.fixture(scope="module")
def db_unblocked(demo_loaded: None, django_db_blocker: Any) -> Iterator[None]:
    """Database access for the whole module, in autocommit (committed rows; see above)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture(scope="module")
def world(db_unblocked: None) -> Iterator[EvidenceWorld]:
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


@pytest.fixture
def clean_demo_evidence(world: EvidenceWorld) -> Iterator[None]:
    """Tests that count the demo task's receipts and snapshots start and end with none."""
    QueryReceipt.objects.filter(task=world.demo_task.task).delete()
    EvidenceSnapshot.objects.filter(task=world.demo_task.task).exclude(source=DEMO_SAMPLE_SOURCE).delete()
    yield
    QueryReceipt.objects.filter(task=world.demo_task.task).delete()
    EvidenceSnapshot.objects.filter(task=world.demo_task.task).exclude(source=DEMO_SAMPLE_SOURCE).delete()
