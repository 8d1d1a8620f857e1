"""The contexts Celery tasks through the real Redis broker and a real worker."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from contexts import issuer_keys, services, tasks, tokens
from contexts.models import ContextEvent, Membership, Principal, Project, QueryContext
from tests.contexts import factories
from tests.contexts.factories import CATALOG
from tests.support.tokens import Issuer
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
    test's transaction) and deleted afterwards — not ``transaction=True`` (refused at collection by
    tests/conftest.py), whose flush would wipe other modules' committed fixtures."""
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


def test_the_jobs_are_on_the_beat_schedule() -> None:
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {"contexts.revoke_stale", "contexts.purge", "contexts.refresh_issuer_keys"} <= scheduled
    # Renewal runs well inside the JWKS cache lifetime, so the shared copy never runs out in between.
    entry = next(e for e in app.conf.beat_schedule.values() if e["task"] == "contexts.refresh_issuer_keys")
    assert float(entry["schedule"]) < settings.TJWATER_OIDC_JWKS_CACHE_S


@pytest.fixture
def real_issuer() -> Iterator[Issuer]:
    """The in-process issuer of the token matrix, trusted as the one issuer by this process (the worker
    runs in it); the process-wide validator and the shared JWKS copy are forgotten afterwards."""
    issuer = Issuer()
    issuer.add_key("k1")
    tokens.reset_validator()
    with override_settings(TJWATER_OIDC_ISSUER=issuer.url, TJWATER_DEV_ISSUER=False):
        yield issuer
    tokens.reset_validator()
    issuer.httpd.shutdown()
    issuer.httpd.server_close()
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{issuer_keys.SHARED_JWKS_KEY_PREFIX}*"):
        client.delete(key)
    client.close()


def test_refresh_issuer_keys_task_renews_the_caches_ahead_of_a_rotation(worker: None, real_issuer: Issuer) -> None:
    validator = tokens.get_validator()
    validator.verify(real_issuer.token("k1"))
    assert (validator.cached_kids(), real_issuer.jwks_fetches) == (("k1",), 1)
    real_issuer.add_key("k2")  # the issuer starts publishing its next key

    result = tasks.refresh_issuer_keys.delay().get(timeout=30)

    assert result == {"issuer": real_issuer.url, "kids": ["k1", "k2"], "source": "issuer", "shared": True}
    assert real_issuer.jwks_fetches == 2
    # This process's cache was replaced: a token signed with the new key needs no refetch.
    assert validator.cached_kids() == ("k1", "k2")
    assert validator.verify(real_issuer.token("k2")).subject == "alice"
    assert real_issuer.jwks_fetches == 2
    # The shared copy every server process reads when its own goes stale holds the new key too: a
    # validator with an empty memory (another process) takes it without calling the issuer.
    client = redis.Redis.from_url(settings.REDIS_URL)
    shared = json.loads(client.get(validator.shared_cache_key) or b"{}")
    client.close()
    assert sorted(k["kid"] for k in shared["jwks"]["keys"]) == ["k1", "k2"]
    other_process = tokens.TokenValidator(tokens.config_from_settings())
    assert other_process.verify(real_issuer.token("k2")).subject == "alice"
    assert real_issuer.jwks_fetches == 2


def test_refresh_issuer_keys_command(real_issuer: Issuer) -> None:
    out = StringIO()
    call_command("contexts_maintenance", "--refresh-issuer-keys", stdout=out)
    assert out.getvalue().strip() == "issuer keys refreshed source=issuer keys=1 shared=True"
    assert real_issuer.jwks_fetches == 1
    real_issuer.down = True
    with pytest.raises(CommandError, match="could not be fetched"):
        call_command("contexts_maintenance", "--refresh-issuer-keys", stdout=StringIO())
    # The caches keep what they had: tokens still verify while the issuer is down.
    assert tokens.get_validator().verify(real_issuer.token("k1")).subject == "alice"


def test_revoke_stale_on_several_workers_at_once_revokes_each_context_exactly_once(prepared: Prepared) -> None:
    """Four concurrent runs (threads with their own connections, like workers) over 120 stale contexts
    in small batches: every context is revoked once, with exactly one audit row."""

    def stale_contexts() -> list[int]:
        where, who = factories.project("stale-many"), factories.principal()
        membership = factories.membership(who, where)
        token = factories.token(who)
        with override_settings(TJWATER_CONTEXT_MAX_LIVE=200):  # 120 live contexts of one principal
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
