"""The evidence beat task through the real Redis broker and a real Celery worker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.utils import timezone

from evidence import tasks
from evidence.models import QueryReceipt
from tests.evidence.factories import EvidenceWorld, Investigation
from tjwater.celery import app


@pytest.fixture(scope="module")
def worker(world: EvidenceWorld) -> Iterator[None]:
    """Module-scoped like tests/contexts/test_tasks.py; the reserved Redis database is emptied around it."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield
    client.flushdb()
    client.close()


def _receipt(inv: Investigation, world: EvidenceWorld, key: str, age: timedelta) -> QueryReceipt:
    scope = world.bind("task_execution", investigation=inv)
    receipt = QueryReceipt.objects.create(
        principal_id=scope.principal_id,
        project_id=scope.project_id,
        session_id=scope.session_id,
        task=inv.task,
        run=inv.run,
        request_key=key,
        tool="get_element_properties",
        params_hash="0" * 64,
    )
    QueryReceipt.objects.filter(pk=receipt.pk).update(updated_at=timezone.now() - age)
    return receipt


def test_the_beat_task_fails_stale_receipts_once(worker: None, world: EvidenceWorld) -> None:
    inv = world.investigation()
    stale = _receipt(inv, world, "crashed", timedelta(minutes=10))
    live = _receipt(inv, world, "running", timedelta(seconds=0))

    assert tasks.fail_stale_receipts.delay().get(timeout=30) >= 1
    assert QueryReceipt.objects.get(pk=stale.pk).state == "failed"
    assert QueryReceipt.objects.get(pk=live.pk).state == "pending"
    assert tasks.fail_stale_receipts.delay().get(timeout=30) == 0  # idempotent


@pytest.mark.django_db
def test_the_job_is_on_the_beat_schedule() -> None:
    # (django_db: also makes pytest-django set up the test database for this module; see test_models.py)
    entry = next(e for e in app.conf.beat_schedule.values() if e["task"] == "evidence.fail_stale_receipts")
    assert float(entry["schedule"]) <= settings.TJWATER_MCP_QUERY_BUDGET_S * 2
