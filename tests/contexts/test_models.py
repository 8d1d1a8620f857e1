"""Database-level guarantees of the contexts models."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from contexts.models import ContextPurpose, QueryContext, TaskReport
from tests.contexts import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def report() -> TaskReport:
    task = factories.leased_run(factories.project()).task
    return TaskReport.objects.create(task=task, revision=1, sections={"summary": "first"})


@pytest.mark.parametrize("change", [{"sections": {"summary": "rewritten"}}, {"revision": 2}])
def test_report_revisions_are_immutable_through_the_orm(report: TaskReport, change: dict[str, object]) -> None:
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        TaskReport.objects.filter(pk=report.pk).update(**change)
    report.refresh_from_db()
    assert (report.revision, report.sections) == (1, {"summary": "first"})


def test_report_revisions_are_immutable_through_raw_sql(report: TaskReport) -> None:
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE contexts_taskreport SET sections = '{}'::jsonb WHERE id = %s", [report.pk])
    report.refresh_from_db()
    assert report.sections == {"summary": "first"}


def test_a_change_is_a_new_revision(report: TaskReport) -> None:
    TaskReport.objects.create(task=report.task, revision=2, sections={"summary": "second"})
    assert list(TaskReport.objects.filter(task=report.task).values_list("revision", flat=True)) == [1, 2]
    report.save()  # an unchanged save is not a change
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskReport.objects.create(task=report.task, revision=2, sections={})


def test_a_task_context_row_must_name_its_run() -> None:
    who = factories.principal()
    where = factories.project()
    membership = factories.membership(who, where)
    with pytest.raises(IntegrityError, match="querycontext_purpose_binding"), transaction.atomic():
        QueryContext.objects.create(
            handle_hash="0" * 64,
            principal=who,
            client_id="c",
            project=where,
            membership=membership,
            session_id="s",
            purpose=ContextPurpose.TASK_EXECUTION,
            expires_at="2030-01-01T00:00:00Z",
        )
