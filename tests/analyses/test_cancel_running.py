"""A running analysis on Net6 (3,356 nodes) stops within 2 s of its cancel (issue 42 item 5): the engine
asks the job's cancel key between two of EPANET's time steps (``queries.runs.engine.stopping``), so a week
of hydraulics (several seconds of solving) is not waited out. A real Celery worker of the ``analysis``
queue runs it; the run writes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from analyses.submit import Submitter, cancel, submit
from contexts.models import Principal, Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun
from tests.analyses.conftest import RUNNER, enable, member, running_worker

pytestmark = pytest.mark.e2e
SLUG = "analyses-net6-cancel"
WEEK = {"start": "2026-04-01T00:00:00Z", "duration_minutes": 7 * 24 * 60, "elements": ["JUNCTION-0"]}


@pytest.fixture(scope="module")
def net6(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[Project, Submitter]]:
    """Net6 committed (the worker reads it on its own connection), deleted afterwards."""
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="Net6 cancel")
        import_network(project=project, inp_path=wntr_network_path("Net6.inp"), scale=70.0, baseline_hours=0)
        enable(project, cpu=86_400, max_run=3600)
        alice = member(project, "analyses-net6-alice", RUNNER)
    yield project, alice
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        Principal.objects.filter(subject="analyses-net6-alice").delete()


@pytest.fixture(scope="module")
def worker(net6: tuple[Project, Submitter], django_db_blocker: Any) -> Iterator[None]:
    yield from running_worker(django_db_blocker)


def _run(pk: int) -> AnalysisRun:
    return AnalysisRun.objects.get(pk=pk)


def _wait(pk: int, done: Any, timeout: float) -> AnalysisRun:
    deadline = time.monotonic() + timeout
    while not done(run := _run(pk)):
        assert time.monotonic() < deadline, (run.status, run.status_message)
        time.sleep(0.05)
    return run


def test_a_running_net6_simulation_stops_within_two_seconds_of_its_cancel(
    net6: tuple[Project, Submitter], worker: None, django_db_blocker: Any
) -> None:
    project, alice = net6
    with django_db_blocker.unblock():
        _cancel_while_epanet_runs(project, alice)


def _cancel_while_epanet_runs(project: Project, alice: Submitter) -> None:
    accepted = submit(project=project, kind="simulation", params=WEEK, who=alice)
    # "Simulating …" is said just before the engine is called: from then on EPANET is writing and solving.
    running = _wait(accepted.run.pk, lambda r: r.status_message.startswith("Simulating"), timeout=120)
    assert running.status == "running"
    time.sleep(0.5)  # inside the solve: a week of Net6 takes several seconds of EPANET's time steps
    asked = time.monotonic()
    cancel(project=project, run_id=running.run_id, who=alice)
    stopped = _wait(accepted.run.pk, lambda r: r.status in ("cancelled", "succeeded", "failed"), timeout=30)
    took = time.monotonic() - asked

    assert stopped.status == "cancelled", (stopped.error_code, stopped.error_message)
    assert stopped.error_message.startswith("Cancelled while EPANET ran"), stopped.error_message
    assert took < 2.0, f"the run stopped {took:.2f} s after its cancel"
    assert not AnalysisResult.objects.filter(run=stopped).exists()
    assert not AnalysisNodeSeries.objects.filter(run=stopped).exists()
    assert not AnalysisLinkSeries.objects.filter(run=stopped).exists()
