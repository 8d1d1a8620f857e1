"""``manage.py contexts_maintenance`` calls the same services as the Celery tasks."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from contexts import services
from contexts.models import QueryContext, TaskRun
from tests.contexts import factories
from tests.contexts.factories import CATALOG

pytestmark = pytest.mark.django_db


def test_revoke_stale_and_purge_from_the_command_line() -> None:
    where = factories.project()
    who = factories.principal()
    factories.membership(who, where)
    leased = factories.leased_run(where, owner=who)
    token = factories.token(who)
    stale = services.context_create(
        token=token, project_slug=where.slug, session_id=leased.session_id, purpose="task_execution", catalog=CATALOG,
        task_id=leased.task.pk, run_id=leased.run.pk, execution_request_id=leased.execution_request.request_id,
    )  # fmt: skip
    dead = services.context_create(
        token=token, project_slug=where.slug, session_id="s", purpose="ordinary_chat", catalog=CATALOG
    )
    QueryContext.objects.filter(pk=dead.context_id).update(expires_at=timezone.now() - timedelta(days=30))
    TaskRun.objects.filter(pk=leased.run.pk).update(lease_holder="moved")

    out = StringIO()
    call_command("contexts_maintenance", "--revoke-stale", "--purge", stdout=out)

    assert "revoked run_superseded=0 lease_lapsed=1 membership_removed=0" in out.getvalue()
    assert "purged 1" in out.getvalue()
    assert QueryContext.objects.get(pk=stale.context_id).revoke_reason == "lease lapsed or moved"
    assert not QueryContext.objects.filter(pk=dead.context_id).exists()


def test_the_command_needs_a_job() -> None:
    with pytest.raises(CommandError):
        call_command("contexts_maintenance")
