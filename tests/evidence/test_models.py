"""The database enforces what the evidence models promise: snapshots are immutable and always
``origin=system``, and a receipt's key tuple is unique (a constraint, not a Python check).

Marked ``django_db`` (each test in a rolled-back transaction). Every module of this package has at
least one such test: pytest-django then sets up the test database itself instead of the suite's
fallback in ``tests/conftest.py``, which would serialize the whole demo database first."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from contexts.models import Principal, Project, Task, TaskRun
from evidence.models import EvidenceSnapshot, QueryReceipt
from tests.contexts import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> TaskRun:
    return factories.leased_run(factories.project()).run


def snapshot(run: TaskRun, **extra: object) -> EvidenceSnapshot:
    fields = {
        "project_id": run.task.project_id,
        "task": run.task,
        "run": run,
        "tool": "get_element_properties",
        "source": "model_network",
        "params": {"element_id": "J1"},
        "data": {"data": {"x": 1}},
        "byte_size": 20,
        "sha256": "0" * 64,
        **extra,
    }
    return EvidenceSnapshot.objects.create(**fields)


def test_a_snapshot_cannot_be_updated_by_any_path(run: TaskRun) -> None:
    saved = snapshot(run)
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        EvidenceSnapshot.objects.filter(pk=saved.pk).update(data={"data": {"x": 2}})
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE evidence_evidencesnapshot SET tool = 'other' WHERE id = %s", [saved.pk])
    saved.refresh_from_db()
    assert saved.data == {"data": {"x": 1}} and saved.tool == "get_element_properties"


def test_only_system_evidence_exists(run: TaskRun) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        snapshot(run, origin="client")


def test_deleting_the_project_removes_its_evidence(run: TaskRun) -> None:
    saved = snapshot(run)
    Project.objects.filter(pk=run.task.project_id).delete()
    assert not EvidenceSnapshot.objects.filter(pk=saved.pk).exists()
    assert not Task.objects.filter(pk=run.task_id).exists()


def test_the_receipt_key_tuple_is_unique_in_the_database(run: TaskRun) -> None:
    who: Principal = factories.principal()
    key = {
        "principal": who,
        "project_id": run.task.project_id,
        "session_id": "s1",
        "task": run.task,
        "run": run,
        "request_key": "k1",
    }
    QueryReceipt.objects.create(**key, tool="t", params_hash="a" * 64)
    with pytest.raises(IntegrityError), transaction.atomic():
        QueryReceipt.objects.create(**key, tool="t", params_hash="b" * 64)
    QueryReceipt.objects.create(**{**key, "session_id": "s2"}, tool="t", params_hash="a" * 64)  # another session
    assert QueryReceipt.objects.filter(task=run.task).count() == 2


def test_a_complete_receipt_has_a_snapshot(run: TaskRun) -> None:
    who = factories.principal()
    with pytest.raises(IntegrityError), transaction.atomic():
        QueryReceipt.objects.create(
            principal=who,
            project_id=run.task.project_id,
            session_id="s",
            task=run.task,
            run=run,
            request_key="k",
            tool="t",
            params_hash="a" * 64,
            state="complete",
        )
