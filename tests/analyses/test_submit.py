"""Submitting, running and cancelling analysis runs (issue 42 items 3–5), in-process with the job runner
(``run_now``: the same code a worker runs), against real PostgreSQL, Redis and EPANET. The same cancel,
fail and idempotency tests run for every kind of the registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from analyses.errors import ComputeOff, CostLimit
from analyses.kinds import KIND_NAMES
from analyses.submit import Submitter, cancel, submit
from contexts.errors import InvalidParameter, NotFound, RateLimited
from contexts.models import AccessEvent, Membership, Project, ProjectCompute
from queries.errors import CapabilityGap
from queries.importer.epanet import import_network, wntr_network_path
from queries.jobrunner.runner import run_now
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun, GisLayer, Job
from tests.analyses.conftest import enable, member

START = "2026-04-01T07:00:00Z"
PARAMS: dict[str, dict[str, object]] = {
    "simulation": {
        "start": START,
        "duration_minutes": 120,
        "changes": [{"type": "pump", "pump_id": "335", "status": "off", "at": "2026-04-01T08:00:00Z"}],
    },
    "burst": {"pipe_id": "123", "start": START, "duration_minutes": 240, "leak_flow": 0.01},
    "valve_isolation": {"pipe_ids": ["123"]},
    "flushing": {"hydrant_node_ids": ["121"], "flow": 0.03, "start": START, "duration_minutes": 60},
    "contaminant": {
        "injection_node_ids": ["121"],
        "start": START,
        "injection_minutes": 30,
        "concentration": 10.0,
        "duration_minutes": 240,
    },
}
RESULT_TYPES = {
    "simulation": {"summary"},
    "burst": {"leak", "affected_nodes", "customers_affected"},
    "valve_isolation": {"isolation_segment", "outage_segments", "demand_lost"},
    "flushing": {"pipes_flushed", "pressure", "sources"},
    "contaminant": {"arrival", "extent", "exposure"},
}
pytestmark = pytest.mark.django_db


def written(run: AnalysisRun) -> int:
    return (
        AnalysisResult.objects.filter(run=run).count()
        + AnalysisNodeSeries.objects.filter(run=run).count()
        + AnalysisLinkSeries.objects.filter(run=run).count()
    )


def actions(project: Project, run_id: str) -> list[str]:
    rows = AccessEvent.objects.filter(project_id=project.pk, details__run_id=run_id).order_by("id")
    return list(rows.values_list("action", flat=True))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_run_of_every_kind_computes_writes_and_is_audited(kind: str, net3: Project, alice: Submitter) -> None:
    done = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    assert done.created and done.job.status == "queued" and done.run.status == "queued"
    answer = done.answer()
    assert answer["run_id"] == done.run.run_id and answer["poll_after_ms"] >= 250
    assert answer["estimate"]["cpu_seconds"] >= 0
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded", (run.error_code, run.error_message)
    assert run.progress == 1.0 and run.started_at and run.finished_at
    assert set(AnalysisResult.objects.filter(run=run).values_list("result_type", flat=True)) == RESULT_TYPES[kind]
    series = AnalysisNodeSeries.objects.filter(run=run).count()
    assert (series > 0) == (kind != "valve_isolation")
    assert run.cost["cpu_seconds"] > 0 and run.cost["series_rows"] == written(run) - len(RESULT_TYPES[kind])
    assert run.model_version is not None and len(run.input_sha256) == 64 and run.engine.startswith("EPANET")
    assert actions(net3, run.run_id) == ["analysis_submitted", "analysis_started", "analysis_succeeded"]
    # The audit records the hash, never the inputs.
    details = AccessEvent.objects.get(
        project_id=net3.pk, action="analysis_submitted", details__run_id=run.run_id
    ).details
    assert details["input_sha256"] == run.input_sha256 and "pipe_id" not in details and "params" not in details


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_cancelled_queued_run_of_every_kind_writes_nothing(kind: str, net3: Project, alice: Submitter) -> None:
    done = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    run = cancel(project=net3, run_id=done.run.run_id, who=alice)
    assert run.status == "cancelled" and run.error_code == "CANCELLED"
    run_now(done.job)  # a worker that takes it anyway runs nothing
    run.refresh_from_db()
    assert run.status == "cancelled" and written(run) == 0
    assert actions(net3, run.run_id)[-1] == "analysis_cancelled"
    with pytest.raises(InvalidParameter, match="only a queued or running run can be cancelled"):
        cancel(project=net3, run_id=run.run_id, who=alice)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_the_same_question_of_every_kind_is_one_run(kind: str, net3: Project, alice: Submitter) -> None:
    first = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    again = submit(project=net3, kind=kind, params=dict(reversed(list(PARAMS[kind].items()))), who=alice, send=False)
    assert not again.created and again.run.pk == first.run.pk
    run_now(first.job)
    after = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    assert not after.created and after.run.pk == first.run.pk and after.answer()["status"] == "succeeded"
    AnalysisRun.objects.filter(pk=first.run.pk).update(finished_at=datetime.now(UTC) - timedelta(minutes=11))
    fresh = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    assert fresh.created and fresh.run.pk != first.run.pk


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_revoked_membership_fails_the_run_of_every_kind_and_writes_nothing(
    kind: str, net3: Project, alice: Submitter
) -> None:
    done = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    Membership.objects.filter(principal_id=alice.principal_id, project=net3).update(revoked_at=datetime.now(UTC))
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert (run.status, run.error_code) == ("failed", "PERMISSION_REVOKED") and written(run) == 0
    assert actions(net3, run.run_id)[-1] == "analysis_failed"


def test_a_request_key_makes_it_exact(net3: Project, alice: Submitter) -> None:
    first = submit(project=net3, kind="burst", params={**PARAMS["burst"], "request_key": "k-1"}, who=alice, send=False)
    assert (
        submit(
            project=net3, kind="burst", params={**PARAMS["burst"], "request_key": "k-1"}, who=alice, send=False
        ).run.pk
        == first.run.pk
    )
    with pytest.raises(InvalidParameter, match="request_key was used before for another question"):
        submit(
            project=net3,
            kind="burst",
            params={**PARAMS["burst"], "duration_minutes": 60, "request_key": "k-1"},
            who=alice,
            send=False,
        )


def test_an_unknown_id_is_refused_naming_it_and_nothing_is_queued(net3: Project, alice: Submitter) -> None:
    before = Job.objects.count()
    with pytest.raises(InvalidParameter, match="'P-404'") as caught:
        submit(project=net3, kind="burst", params={**PARAMS["burst"], "pipe_id": "P-404"}, who=alice)
    assert caught.value.details["field"] == "pipe_id"
    with pytest.raises(InvalidParameter, match="start"):
        submit(project=net3, kind="flushing", params={**PARAMS["flushing"], "start": "2026-04-01T07:00:00"}, who=alice)
    assert Job.objects.count() == before and not AnalysisRun.objects.filter(project=net3).exists()
    assert AccessEvent.objects.filter(project_id=net3.pk, action="analysis_refused").count() == 2


def test_analyses_are_off_by_default_and_cost_is_decided_before_anything_runs(net3: Project, alice: Submitter) -> None:
    ProjectCompute.objects.filter(project=net3).update(enabled=False)
    with pytest.raises(ComputeOff, match="project_compute analyses-net3 --enable"):
        submit(project=net3, kind="burst", params=PARAMS["burst"], who=alice)
    enable(net3, max_run=300)
    ProjectCompute.objects.filter(project=net3).update(max_run_seconds=0)
    long_run = {**PARAMS["contaminant"], "duration_minutes": 7 * 24 * 60}
    with pytest.raises(CostLimit, match="over the per-run cap of 0 s") as caught:
        submit(project=net3, kind="contaminant", params=long_run, who=alice)
    assert caught.value.details["estimate_cpu_seconds"] > 0 and caught.value.retryable is False
    enable(net3, cpu=1)
    done = submit(project=net3, kind="valve_isolation", params=PARAMS["valve_isolation"], who=alice, send=False)
    run_now(done.job)
    AnalysisRun.objects.filter(pk=done.run.pk).update(cost={"cpu_seconds": 1.0})  # the day is spent
    with pytest.raises(CostLimit, match="has 0.0 left today"):
        submit(project=net3, kind="burst", params=PARAMS["burst"], who=alice)
    assert not AnalysisRun.objects.filter(project=net3, kind="burst").exists()


def test_concurrency_is_refused_at_once(net3: Project, alice: Submitter, bob: Submitter) -> None:
    enable(net3, concurrent=3)
    for minutes in (60, 120):
        submit(
            project=net3, kind="burst", params={**PARAMS["burst"], "duration_minutes": minutes}, who=alice, send=False
        )
    with pytest.raises(RateLimited, match="You have 2 runs queued or running") as caught:
        submit(project=net3, kind="burst", params={**PARAMS["burst"], "duration_minutes": 180}, who=alice)
    assert caught.value.retryable is True
    submit(project=net3, kind="burst", params=PARAMS["burst"], who=bob, send=False)
    carol = member(net3, "carol", ["simulation.run"])
    with pytest.raises(RateLimited, match="has 3 runs queued or running, its limit"):
        submit(project=net3, kind="burst", params=PARAMS["burst"], who=carol)


def test_only_the_owner_cancels(net3: Project, alice: Submitter, bob: Submitter) -> None:
    done = submit(project=net3, kind="burst", params=PARAMS["burst"], who=alice, send=False)
    with pytest.raises(NotFound):
        cancel(project=net3, run_id=done.run.run_id, who=bob)
    operator = Submitter(actor="operator root")
    assert cancel(project=net3, run_id=done.run.run_id, who=operator, operator=True).status == "cancelled"


def test_a_reimport_while_queued_changes_nothing_the_run_computes(net3: Project, alice: Submitter) -> None:
    done = submit(project=net3, kind="burst", params=PARAMS["burst"], who=alice, send=False)
    pinned = done.run.model_version_id
    import_network(project=net3, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)  # no pipe 123
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded" and run.model_version_id == pinned
    assert AnalysisLinkSeries.objects.filter(run=run, element_id="123").exists()


def test_valve_isolation_without_a_valve_layer_is_refused(net3: Project, alice: Submitter) -> None:
    GisLayer.objects.filter(project=net3, kind="valves").delete()
    with pytest.raises(CapabilityGap, match="has no valve layer"):
        submit(project=net3, kind="valve_isolation", params=PARAMS["valve_isolation"], who=alice)


def test_a_us_project_answers_in_its_units(net3: Project, alice: Submitter) -> None:
    Project.objects.filter(pk=net3.pk).update(unit_system="US")
    net3.refresh_from_db()
    done = submit(project=net3, kind="burst", params={**PARAMS["burst"], "leak_flow": 158.5}, who=alice, send=False)
    run_now(done.job)
    leak = AnalysisResult.objects.get(run=done.run, result_type="leak").payload
    assert "gpm" in leak["units"].values() and done.run.parameters["leak_flow"] == 158.5
