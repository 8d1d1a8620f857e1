"""The contexts Celery tasks through the real Redis broker and a real worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.db import connection
from django.utils import timezone

from contexts import services, tasks
from contexts.models import ContextEvent, Membership, Principal, Project, QueryContext
from tests.contexts import factories
from tests.contexts.conftest import CATALOG
from tjwater.celery import app

pytestmark = pytest.mark.django_db


@dataclass
class Prepared:
    membership_removed: int
    healthy: int
    long_expired: int


def bind(projects: list[Project]) -> tuple[int, Membership]:
    where, who = factories.project(), factories.principal()
    projects.append(where)
    membership = factories.membership(who, where)
    created = services.context_create(
        token=factories.token(who), project_slug=where.slug, session_id="s", purpose="ordinary_chat", catalog=CATALOG
    )
    return created.context_id, membership


@pytest.fixture(scope="module")
def prepared(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[Prepared]:
    """The worker thread has its own database connection, so the rows are committed here (before each
    test's transaction) and deleted afterwards — not ``transaction=True``, whose flush would wipe other
    modules' committed fixtures."""
    projects: list[Project] = []
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        removed, membership = bind(projects)
        Membership.objects.filter(pk=membership.pk).update(revoked_at=timezone.now())
        healthy, _ = bind(projects)
        long_expired, _ = bind(projects)
        QueryContext.objects.filter(pk=long_expired).update(expires_at=timezone.now() - timedelta(days=30))
    yield Prepared(membership_removed=removed, healthy=healthy, long_expired=long_expired)
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        ids = [p.pk for p in projects]
        principals = list(Membership.objects.filter(project_id__in=ids).values_list("principal_id", flat=True))
        ContextEvent.objects.filter(project_id__in=ids).delete()
        Project.objects.filter(pk__in=ids).delete()
        Principal.objects.filter(pk__in=principals).delete()


@pytest.fixture(scope="module")
def worker(prepared: Prepared) -> Iterator[None]:
    """Module-scoped so the worker starts before each test's transaction: starting a worker closes the
    calling thread's database connection, which Django refuses inside an atomic block. The reserved
    test Redis database is emptied before and after, like the ``test_redis`` fixture does."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield
    client.flushdb()
    client.close()


def test_revoke_stale_task_revokes_contexts_of_removed_memberships(worker: None, prepared: Prepared) -> None:
    result = tasks.revoke_stale.delay().get(timeout=30)

    assert set(result) == {"run_superseded", "lease_lapsed", "membership_removed"}
    assert result["membership_removed"] >= 1
    assert QueryContext.objects.get(pk=prepared.membership_removed).revoke_reason == "membership removed"
    assert QueryContext.objects.get(pk=prepared.healthy).revoked_at is None
    assert ContextEvent.objects.filter(context_id=prepared.membership_removed, action="revoked").count() == 1
    assert tasks.revoke_stale.delay().get(timeout=30)["membership_removed"] == 0  # idempotent
    assert ContextEvent.objects.filter(context_id=prepared.membership_removed, action="revoked").count() == 1


def test_purge_task_deletes_contexts_past_retention(worker: None, prepared: Prepared) -> None:
    assert tasks.purge.delay().get(timeout=30) >= 1

    assert not QueryContext.objects.filter(pk=prepared.long_expired).exists()
    assert QueryContext.objects.filter(pk=prepared.healthy).exists()
    assert tasks.purge.delay().get(timeout=30) == 0


def test_both_jobs_are_on_the_beat_schedule() -> None:
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {"contexts.revoke_stale", "contexts.purge"} <= scheduled


def test_revoke_stale_on_several_workers_at_once_revokes_each_context_exactly_once(prepared: Prepared) -> None:
    """Four concurrent runs (threads with their own connections, like workers) over 120 stale contexts
    in small batches: every context is revoked once, with exactly one audit row."""

    def stale_contexts() -> list[int]:
        where, who = factories.project("stale-many"), factories.principal()
        membership = factories.membership(who, where)
        token = factories.token(who)
        ids = [
            services.context_create(
                token=token, project_slug=where.slug, session_id="s", purpose="ordinary_chat", catalog=CATALOG
            ).context_id
            for _ in range(120)
        ]
        Membership.objects.filter(pk=membership.pk).update(revoked_at=timezone.now())
        return ids

    def cleanup() -> None:
        ContextEvent.objects.filter(context_id__in=ids).delete()
        Principal.objects.filter(memberships__project__slug="stale-many").delete()
        Project.objects.filter(slug="stale-many").delete()

    ids = factories.committed(stale_contexts)
    try:
        barrier = threading.Barrier(4)

        def worker_run() -> int:
            barrier.wait(timeout=10)
            try:
                return services.contexts_revoke_stale(batch_size=7, max_batches=100).membership_removed
            finally:
                connection.close()

        with ThreadPoolExecutor(max_workers=4) as pool:
            counts = list(pool.map(lambda _: worker_run(), range(4)))

        assert sum(counts) >= 120  # other committed fixtures may add their own stale contexts
        assert QueryContext.objects.filter(pk__in=ids, revoked_at__isnull=True).count() == 0
        events = ContextEvent.objects.filter(context_id__in=ids, action="revoked")
        assert events.count() == 120
        assert len(set(events.values_list("context_id", flat=True))) == 120
    finally:
        factories.committed(cleanup)
