"""The baseline on real dates: a window simulated in chunks on the project's local clock, replaced
atomically, cancellable (nothing written), one simulation per project at a time; import_network's
default day; the rolling baseline computing only what is missing; the Celery task on a real worker
and ``simulate_baseline --wait`` with and without a worker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import psycopg
import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from contexts.models import Project
from queries.importer.baseline_window import SimulationBusy, SimulationCancelled, simulate_baseline_window
from queries.importer.epanet import import_network, local_day_start, wntr_network_path
from queries.jobrunner.runner import CANCEL_KEY, run_job
from queries.models import NodeBaseline
from queries.models.jobs import Job
from queries.services.baseline_jobs import baseline_enqueue, missing_windows, rolling_baseline
from queries.tasks import run_job_task, simulate_baseline
from tests.support.servers import subprocess_database_url
from tjwater.celery import app

GPM = 6.30901964e-05
NET1_PATTERN = [1.0, 1.2, 1.4, 1.6, 1.4, 1.2, 1.0, 0.8, 0.6, 0.4, 0.6, 0.8]  # 2-hour steps


@pytest.fixture
def net1(project: Project) -> Project:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    return project


def times_of(project: Project, element: str = "11") -> list[datetime]:
    return list(
        NodeBaseline.objects.filter(project=project, element_type="junction", element_id=element)
        .order_by("time")
        .values_list("time", flat=True)
    )


def demand_at(project: Project, at: datetime, element: str = "11") -> float:
    return NodeBaseline.objects.get(project=project, element_type="junction", element_id=element, time=at).demand


def test_a_window_in_chunks_on_the_local_clock(net1: Project) -> None:
    net1.timezone = "Asia/Shanghai"  # type: ignore[attr-defined]  # Project.timezone arrives with issue 20
    start = datetime(2026, 3, 10, 6, 0, tzinfo=ZoneInfo("Asia/Shanghai"))  # 06:00 local = 22:00Z the day before
    summary = simulate_baseline_window(project=net1, start=start, hours=30, step_s=900)
    got = times_of(net1)
    assert summary.instants == 121 and len(got) == 121  # 24 h + 6 h chunks, the seam instant once
    assert got[0] == start and got[-1] == start + timedelta(hours=30)
    assert all(b - a == timedelta(minutes=15) for a, b in zip(got, got[1:], strict=False))
    # Junction 11 demands 150 gpm × the pattern of the LOCAL hour: 06:00 → step 3 (1.6), 13:00 → step 6.
    assert demand_at(net1, start) == pytest.approx(150 * GPM * NET1_PATTERN[3], rel=1e-4)
    assert demand_at(net1, start + timedelta(hours=7)) == pytest.approx(150 * GPM * NET1_PATTERN[6], rel=1e-4)
    # The second chunk starts at 06:00 local the next day, from the tank level where the first ended.
    assert demand_at(net1, start + timedelta(hours=24)) == pytest.approx(150 * GPM * NET1_PATTERN[3], rel=1e-4)


def test_the_window_is_replaced_and_the_rest_kept(net1: Project) -> None:
    day = datetime(2026, 4, 1, tzinfo=UTC)
    simulate_baseline_window(project=net1, start=day, hours=12, step_s=1800)
    simulate_baseline_window(project=net1, start=day + timedelta(hours=6), hours=12, step_s=900)
    got = times_of(net1)
    assert got[:13] == [day + timedelta(minutes=30 * i) for i in range(12)] + [day + timedelta(hours=6)]
    assert got[-1] == day + timedelta(hours=18) and len(got) == 12 + 49


def test_a_cancelled_run_writes_nothing(net1: Project) -> None:
    day = datetime(2026, 4, 1, tzinfo=UTC)
    simulate_baseline_window(project=net1, start=day, hours=6, step_s=900)
    before = times_of(net1)
    asked = 0

    def should_stop() -> bool:  # the chunk's own check, two of EPANET's time steps, then stop in the third
        nonlocal asked
        asked += 1
        return asked > 3

    done: list[float] = []
    with pytest.raises(SimulationCancelled, match="previous baseline is unchanged"):
        simulate_baseline_window(
            project=net1, start=day, hours=48, step_s=900, should_stop=should_stop, progress=done.append
        )
    assert asked == 4 and done == []  # stopped inside the first 24 h chunk's solve, before it was written
    assert times_of(net1) == before


def test_a_cancel_after_a_chunk_rolls_it_back(net1: Project) -> None:
    """A chunk written, then the cancel: the window's transaction rolls the written chunk back too."""
    day = datetime(2026, 4, 1, tzinfo=UTC)
    before = times_of(net1)
    done: list[float] = []
    with pytest.raises(SimulationCancelled):
        simulate_baseline_window(
            project=net1, start=day, hours=48, step_s=900, should_stop=lambda: bool(done), progress=done.append
        )
    assert done == [0.5] and times_of(net1) == before


def test_one_simulation_per_project_at_a_time(net1: Project) -> None:
    url = subprocess_database_url().replace("postgis://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(21002, %s)", [net1.pk])
        with pytest.raises(SimulationBusy):
            simulate_baseline_window(project=net1, start=datetime(2026, 4, 1, tzinfo=UTC), hours=1, wait_for_lock=False)


def test_import_network_simulates_the_current_local_day(project: Project) -> None:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=2)
    got = times_of(project)
    assert got[0] == local_day_start(project) and got[-1] == local_day_start(project) + timedelta(hours=2)
    now = datetime(2026, 7, 1, 3, 0, tzinfo=UTC)
    project.timezone = "America/Los_Angeles"  # type: ignore[attr-defined]
    assert local_day_start(project, now) == datetime(2026, 6, 30, 7, 0, tzinfo=UTC)  # midnight PDT


def test_the_rolling_baseline_computes_only_what_is_missing(net1: Project, settings: object) -> None:
    settings.TJWATER_BASELINE_PAST_DAYS = 1  # type: ignore[attr-defined]
    settings.TJWATER_BASELINE_STEP_S = 3600  # type: ignore[attr-defined]
    now = datetime(2026, 5, 10, 12, 20, tzinfo=UTC)
    simulate_baseline_window(project=net1, start=datetime(2026, 5, 10, 0, tzinfo=UTC), hours=6, step_s=3600)
    lo, hi = datetime(2026, 5, 9, 12, tzinfo=UTC), datetime(2026, 5, 11, 12, tzinfo=UTC)
    assert missing_windows(net1, lo, hi, 3600) == [
        (lo, datetime(2026, 5, 9, 23, tzinfo=UTC)),
        (datetime(2026, 5, 10, 7, tzinfo=UTC), hi),
    ]

    # Other projects of the test database with a kept .inp (committed by other tests) roll too: count ours.
    def ours(windows: list[str]) -> list[str]:
        return [w for w in windows if w.startswith(f"{net1.slug} ")]

    result = rolling_baseline(now=now)
    assert len(ours(result.simulated)) == 2 and result.failed == []
    got = times_of(net1)
    assert got == [lo + timedelta(hours=h) for h in range(49)]
    assert ours(rolling_baseline(now=now).simulated) == []  # covered: nothing computed
    assert Job.objects.filter(project=net1, kind="baseline", status="succeeded").count() == 2


def test_a_revoked_task_writes_nothing(net1: Project, test_redis: redis.Redis) -> None:
    job = Job.objects.create(
        project=net1, kind="baseline", subject="w", detail={"start": "2026-04-01T00:00:00+00:00", "hours": 2,
                                                            "step_s": 900},
    )  # fmt: skip
    test_redis.set(CANCEL_KEY.format(job.pk), "1")
    assert run_job(job.pk) == {"status": "cancelled"}
    job.refresh_from_db()
    assert job.status == "cancelled" and "nothing was written" in job.message
    assert not NodeBaseline.objects.filter(project=net1).exists()


def test_an_operator_cancels_a_queued_simulation(net1: Project, test_redis: redis.Redis) -> None:
    job = Job.objects.create(
        project=net1, kind="baseline", subject="w", status="queued", task_id="queued-1",
        detail={"start": "2026-04-01T00:00:00+00:00", "hours": 2, "step_s": 900},
    )  # fmt: skip
    out = StringIO()
    call_command("simulate_baseline", "--cancel", str(job.pk), stdout=out)
    job.refresh_from_db()
    assert job.status == "cancelled" and "before it started; nothing was written" in job.message
    assert test_redis.exists(CANCEL_KEY.format(job.pk))
    # A worker that picks the revoked task up anyway runs nothing (the old task name too).
    assert simulate_baseline.apply(args=[job.pk], task_id="queued-1").get() == {"status": "cancelled"}
    assert run_job_task.apply(args=[job.pk]).get() == {"status": "cancelled"}
    assert not NodeBaseline.objects.filter(project=net1).exists()
    with pytest.raises(CommandError, match=f"Baseline job {job.pk} is cancelled; only a queued or running one"):
        call_command("simulate_baseline", "--cancel", str(job.pk))
    with pytest.raises(CommandError, match="There is no baseline simulation job 0"):
        call_command("simulate_baseline", "--cancel", "0")


def test_wait_without_a_worker_fails_fast_with_a_sentence(net1: Project, test_redis: redis.Redis) -> None:
    t0 = time.monotonic()
    with pytest.raises(CommandError, match=r"No Celery worker answered within 5 s, so nothing was queued"):
        call_command("simulate_baseline", "--project", net1.slug, "--start", "2026-04-01T00:00Z", "--hours", "1",
                     "--wait")  # fmt: skip
    assert time.monotonic() - t0 < 10
    assert not Job.objects.filter(project=net1).exists()


# --- through a real worker (its own database connection: committed rows) ----------------------------


@pytest.fixture(scope="module")
def committed_net1(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[Project]:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        project = Project.objects.create(slug="baseline-worker", name="Baseline worker")
        import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    yield project
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Project.objects.filter(pk=project.pk).delete()


@pytest.fixture(scope="module")
def worker(committed_net1: Project) -> Iterator[None]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield
    client.flushdb()
    client.close()


def test_the_task_on_a_worker_and_wait_follows_it(
    worker: None, committed_net1: Project, django_db_blocker: pytest.FixtureRequest
) -> None:
    """Autocommit (no test transaction): the worker's own connection must see the job rows."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        start = datetime(2026, 4, 2, tzinfo=UTC)
        job = baseline_enqueue(project=committed_net1, start=start, hours=3, step_s=900, started_by="test")
        assert run_job_task.AsyncResult(job.task_id).get(timeout=60)["status"] == "succeeded"
        assert len(times_of(committed_net1)) == 13
        out = StringIO()
        call_command("simulate_baseline", "--project", committed_net1.slug, "--start", "2026-04-03T00:00:00",
                     "--hours", "2", "--wait", stdout=out)  # fmt: skip
        assert "written" in out.getvalue() and len(times_of(committed_net1)) == 13 + 9
        assert Job.objects.filter(project=committed_net1, status="succeeded").count() == 2


def test_an_operator_cancels_a_running_simulation(
    worker: None, committed_net1: Project, django_db_blocker: pytest.FixtureRequest
) -> None:
    """Two months of baseline on a real worker, cancelled by ``simulate_baseline --cancel`` once it runs:
    the task stops within one of EPANET's time steps, rolls back and writes nothing of the window."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        start = datetime(2026, 6, 1, tzinfo=UTC)
        before = NodeBaseline.objects.filter(project=committed_net1).count()
        job = baseline_enqueue(project=committed_net1, start=start, hours=24 * 60, step_s=900, started_by="test")
        deadline = time.monotonic() + 60
        while Job.objects.get(pk=job.pk).status != "running":
            assert time.monotonic() < deadline, "the worker never started the simulation"
            time.sleep(0.02)
        out = StringIO()
        call_command("simulate_baseline", "--cancel", str(job.pk), stdout=out)
        assert "stops within one of EPANET's time steps and writes nothing" in out.getvalue()
        assert run_job_task.AsyncResult(job.task_id).get(timeout=120) == {"status": "cancelled"}
        job.refresh_from_db()
        assert job.status == "cancelled" and "previous baseline is unchanged" in job.message
        assert NodeBaseline.objects.filter(project=committed_net1).count() == before
        assert not NodeBaseline.objects.filter(project=committed_net1, time__gte=start).exists()
