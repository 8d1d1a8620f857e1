"""The project's stored-series cap (issue 42 item 8): a submission whose series would take the project
past ``max_series_rows`` is refused with ``STORAGE_LIMIT`` before anything is queued, and the rows it
estimates are the rows the run writes (one rule, ``analyses.storage.kept_elements``), against real
PostgreSQL, Redis and EPANET."""

from __future__ import annotations

import math

import pytest

from analyses.errors import StorageLimit
from analyses.kinds import KIND_NAMES
from analyses.storage import FULL_SERIES_HOURS, stored_series_rows
from analyses.submit import Submitter, submit
from contexts.models import AccessEvent, Project, ProjectCompute
from queries.jobrunner.runner import run_now
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisRun, Job
from tests.analyses.test_submit import PARAMS

pytestmark = pytest.mark.django_db

BURST = {**PARAMS["burst"], "duration_minutes": 60}


def stored(run: AnalysisRun) -> int:
    return AnalysisNodeSeries.objects.filter(run=run).count() + AnalysisLinkSeries.objects.filter(run=run).count()


def cap(project: Project, rows: int) -> None:
    ProjectCompute.objects.filter(project=project).update(max_series_rows=rows)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_the_rows_a_run_writes_are_its_estimate(kind: str, net3: Project, alice: Submitter) -> None:
    done = submit(project=net3, kind=kind, params=PARAMS[kind], who=alice, send=False)
    estimate = done.run.estimate["series_rows"]
    assert (estimate > 0) == (kind != "valve_isolation")  # valve isolation has no window, so no series
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded", (run.error_code, run.error_message)
    assert stored(run) == run.cost["series_rows"] == estimate


def test_a_short_window_of_chosen_elements_is_estimated_as_written(net3: Project, alice: Submitter) -> None:
    # Net3's "123" names a junction and a pipe: both are kept, with the reservoir and the tank.
    params = {**BURST, "elements": ["Lake", "1", "123"]}
    done = submit(project=net3, kind="burst", params=params, who=alice, send=False)
    steps = done.run.estimate["hydraulic_steps"] + 1  # the window's start and end are both reported
    assert steps == 5 and done.run.estimate["series_rows"] == 4 * steps
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert stored(run) == run.cost["series_rows"] == 4 * steps


def test_a_long_window_without_elements_stores_no_series_and_passes_any_cap(net3: Project, alice: Submitter) -> None:
    cap(net3, 0)
    params = {**BURST, "duration_minutes": (FULL_SERIES_HOURS + 1) * 60}
    done = submit(project=net3, kind="burst", params=params, who=alice, send=False)
    assert done.created and done.run.estimate["series_rows"] == 0


def test_over_the_cap_is_refused_with_the_rows_and_nothing_is_queued(net3: Project, alice: Submitter) -> None:
    first = submit(project=net3, kind="burst", params=BURST, who=alice, send=False)
    rows = first.run.estimate["series_rows"]
    assert stored_series_rows(net3) == rows  # a queued run counts by its estimate
    cap(net3, 2 * rows - 1)
    runs, jobs = AnalysisRun.objects.count(), Job.objects.count()
    second = {**BURST, "start": "2026-04-01T09:00:00Z"}
    with pytest.raises(StorageLimit) as refused:
        submit(project=net3, kind="burst", params=second, who=alice, send=False)
    assert refused.value.code == "STORAGE_LIMIT" and refused.value.retryable is False
    assert refused.value.details == {"series_rows": rows, "stored_series_rows": rows, "max_series_rows": 2 * rows - 1}
    assert (AnalysisRun.objects.count(), Job.objects.count()) == (runs, jobs)
    refusal = AccessEvent.objects.filter(project_id=net3.pk, action="analysis_refused").get()
    assert refusal.details["reason"] == "STORAGE_LIMIT"

    run_now(first.job)  # succeeded: it counts by the rows it wrote, the same number
    assert stored_series_rows(net3) == stored(AnalysisRun.objects.get(pk=first.run.pk)) == rows
    with pytest.raises(StorageLimit):
        submit(project=net3, kind="burst", params=second, who=alice, send=False)
    cap(net3, 2 * rows)
    assert submit(project=net3, kind="burst", params=second, who=alice, send=False).created


def test_a_failed_run_holds_no_storage(net3: Project, alice: Submitter) -> None:
    first = submit(project=net3, kind="burst", params=BURST, who=alice, send=False)
    rows = first.run.estimate["series_rows"]
    cap(net3, rows)
    AnalysisRun.objects.filter(pk=first.run.pk).update(status="failed")
    assert stored_series_rows(net3) == 0
    second = {**BURST, "start": "2026-04-01T09:00:00Z"}
    assert submit(project=net3, kind="burst", params=second, who=alice, send=False).created


def test_runs_without_a_job_count_their_rows(net3: Project, alice: Submitter) -> None:
    """The demo's seeded runs have no job and no recorded count: their rows are counted."""
    done = submit(project=net3, kind="burst", params=BURST, who=alice, send=False)
    run_now(done.job)
    rows = stored(AnalysisRun.objects.get(pk=done.run.pk))
    AnalysisRun.objects.filter(pk=done.run.pk).update(job=None, cost={})
    assert stored_series_rows(net3) == rows
    AnalysisRun.objects.filter(pk=done.run.pk).update(cost={"series_rows": rows})  # recorded: counted by it
    assert stored_series_rows(net3) == rows


def test_a_valve_isolation_with_a_hydraulic_check_stores_the_checks_series_as_estimated(
    net3: Project, alice: Submitter
) -> None:
    params = {**PARAMS["valve_isolation"], "hydraulic_check": {"start": "2026-04-01T07:00:00Z", "duration_minutes": 60}}
    done = submit(project=net3, kind="valve_isolation", params=params, who=alice, send=False)
    estimate = done.run.estimate["series_rows"]
    assert estimate > 0  # the check's window: every element at each report instant
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded", (run.error_code, run.error_message)
    assert stored(run) == run.cost["series_rows"] == estimate


def test_a_runs_soft_limit_includes_writing_its_series() -> None:
    """The soft limit covers the COPY of the run's series too (a 2-million-row run whose limit left it out
    was stopped inside its COPY by make bench-analysis), within 30 s and 5 s under the hard limit."""
    from analyses.storage import WRITE_S_PER_ROW
    from analyses.submit import LIMIT_FACTOR, MIN_LIMIT_S, soft_limit_s

    assert soft_limit_s(2.0, 0, 600) == MIN_LIMIT_S
    rows = 2_094_672
    assert soft_limit_s(2.0, rows, 600) == math.ceil((2.0 + rows * WRITE_S_PER_ROW) * LIMIT_FACTOR) > 60
    assert soft_limit_s(500.0, rows, 600) == 595
