"""The evidence world: the demo utility (committed once per session by ``demo_loaded``) plus committed
rows of our own — tasks with leased runs for ``svc-worker`` in ``tianjin-demo`` — and context bindings
created with ``contexts.services.context_create`` like the REST API does, resolved into ``QueryScope``s
with ``resolve_context`` like the MCP edge does.

The tests drive real threads and asyncio tasks with their own database connections, so every row is
committed (``django_db_blocker.unblock()``, no test transaction) and removed again afterwards:
``transaction=True`` would flush the demo other modules rely on (tests/conftest.py refuses it at collection).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contexts.scope import QueryScope
from evidence.models import EvidenceSnapshot, QueryReceipt
from evidence.task_tools import DEMO_SAMPLE_SOURCE
from tests.evidence.factories import EvidenceWorld, Investigation, evidence_world


@pytest.fixture(scope="module")
def world(db_unblocked: None) -> Iterator[EvidenceWorld]:
    with evidence_world() as built:
        yield built


@pytest.fixture
def clean_demo_evidence(world: EvidenceWorld) -> Iterator[None]:
    """Tests that count the demo task's receipts and snapshots start and end with none."""
    QueryReceipt.objects.filter(task=world.demo_task.task).delete()
    EvidenceSnapshot.objects.filter(task=world.demo_task.task).exclude(source=DEMO_SAMPLE_SOURCE).delete()
    yield
    QueryReceipt.objects.filter(task=world.demo_task.task).delete()
    EvidenceSnapshot.objects.filter(task=world.demo_task.task).exclude(source=DEMO_SAMPLE_SOURCE).delete()


@pytest.fixture(scope="module")
def inv(world: EvidenceWorld) -> Investigation:
    """A fresh investigation of the module's own (``world.investigation``)."""
    return world.investigation()


@pytest.fixture(scope="module")
def executor(world: EvidenceWorld, inv: Investigation) -> QueryScope:
    """The ``task_execution`` binding of the module's investigation."""
    return world.bind("task_execution", investigation=inv)
