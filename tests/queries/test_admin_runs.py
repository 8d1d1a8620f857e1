"""The admin's analysis runs (issue 42 item 6): the list (kind, status, who, model version, estimate
against actual, age) with bounded queries, the operator's cancel (the job runner's one cancel, audited),
and a run's series against the model baseline on its page — for runs the analyses' own services produce
(``analyses.submit`` then the job runner in-process), against real PostgreSQL, Redis and EPANET."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from analyses.submit import Submission, Submitter, submit
from contexts.models import AccessEvent, Project
from queries.importer.baseline_window import simulate_baseline_window
from queries.importer.epanet import import_network, wntr_network_path
from queries.jobrunner.runner import run_now
from queries.models import AnalysisResult, AnalysisRun, Job
from tests.analyses.conftest import RUNNER, enable, member

START = datetime(2026, 4, 1, 7, tzinfo=UTC)
BURST = {"pipe_id": "123", "start": "2026-04-01T07:00:00Z", "duration_minutes": 240, "leak_flow": 0.01}
CHANGELIST = "admin:queries_analysisrun_changelist"
#: The runs list's statements, whatever the number of runs: session, user, the project filter's choices,
#: the filtered and the total count, the page (runs with their project, job, principal and model version)
#: — pinned (N+1 is a bug).
LIST_QUERIES = 6
#: A run's page: session, user, the run (with its project, job, principal and model version), and the
#: chart's own — the results' elements, which of them have series (nodes, links), the series, the baseline
#: — and the run's content type (the page's History link; cached per process after the first page).
RUN_PAGE_QUERIES = 9

pytestmark = pytest.mark.django_db


@pytest.fixture
def utility(db: None, test_redis: redis.Redis) -> Project:
    """Net3 with analyses on and the model baseline of the runs' window (07:00–11:00 UTC)."""
    project = Project.objects.create(slug="admin-runs-net3", name="Admin runs Net3")
    import_network(project=project, inp_path=wntr_network_path("Net3.inp"), center=(-85.5, 38.0), scale=30.0,
                   baseline_hours=0)  # fmt: skip
    simulate_baseline_window(project=project, start=START, hours=4, step_s=900)
    enable(project)
    return project


@pytest.fixture
def alice(utility: Project) -> Submitter:
    return member(utility, "alice", RUNNER)


@pytest.fixture
def operator(db: None) -> Client:
    user = get_user_model().objects.create_superuser("runs-root", "runs@example.org", "x" * 20)
    client = Client()
    client.force_login(user)
    return client


def burst(project: Project, who: Submitter, *, minutes: int = 240, run: bool = True) -> AnalysisRun:
    """A burst run through the analyses' services; run by the job runner in this process unless ``run``
    is False (it stays queued)."""
    done: Submission = submit(
        project=project, kind="burst", params={**BURST, "duration_minutes": minutes}, who=who, send=False
    )
    if run:
        run_now(done.job)
    return AnalysisRun.objects.select_related("job").get(pk=done.run.pk)


def listing(client: Client, **query: str) -> str:
    response = client.get(reverse(CHANGELIST), query)
    assert response.status_code == 200
    return response.content.decode()


def chart_of(page: str) -> str:
    start = page.index('<svg xmlns="http://www.w3.org/2000/svg" class="tjw-run-chart"')
    return page[start : page.index("</svg>", start) + len("</svg>")]


def run_page(client: Client, run: AnalysisRun, **query: str) -> str:
    response = client.get(reverse("admin:queries_analysisrun_change", args=[run.pk]), query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_runs_list_shows_estimate_against_actual(operator: Client, utility: Project, alice: Submitter) -> None:
    done = burst(utility, alice)
    queued = burst(utility, alice, minutes=120, run=False)
    assert done.status == "succeeded" and done.cost["cpu_seconds"] > 0 and done.estimate["cpu_seconds"] > 0
    body = listing(operator, q=done.run_id)
    estimated, actual = done.estimate["cpu_seconds"], done.cost["cpu_seconds"]
    assert f"{estimated:.2f} s / {actual:.2f} s (×{actual / estimated:.2f})" in body
    assert "Succeeded" in body and "alice" in body and "v1 Net3.inp" in body
    assert queued.run_id not in body  # found by its run id, nothing else
    body = listing(operator, q=queued.run_id)
    assert f"{queued.estimate['cpu_seconds']:.2f} s / —" in body and "Queued" in body
    # The status is the job's: filtering on it finds each run once.
    assert queued.run_id in listing(operator, status="queued", project__id__exact=str(utility.pk))
    assert queued.run_id not in listing(operator, status="succeeded", project__id__exact=str(utility.pk))
    assert done.run_id in listing(operator, kind__exact="burst", status="succeeded")


def test_the_runs_list_reads_a_fixed_number_of_statements(
    operator: Client, utility: Project, alice: Submitter, django_assert_max_num_queries: object
) -> None:
    burst(utility, alice)  # the list of this project only: other tests' committed runs may be there
    with CaptureQueriesContext(connection) as one:
        listing(operator, project__id__exact=str(utility.pk))
    burst(utility, alice, minutes=180)
    burst(utility, member(utility, "bob", RUNNER), minutes=120, run=False)
    with django_assert_max_num_queries(LIST_QUERIES):  # type: ignore[operator]
        body = listing(operator, project__id__exact=str(utility.pk))
    assert body.count('class="field-estimate_vs_actual"') == 3
    with CaptureQueriesContext(connection) as three:
        listing(operator, project__id__exact=str(utility.pk))
    assert len(three) == len(one)  # no statement per row


def test_an_operator_cancels_a_queued_run_and_it_is_audited(
    operator: Client, utility: Project, alice: Submitter
) -> None:
    queued = burst(utility, alice, run=False)
    done = burst(utility, alice, minutes=120)
    response = operator.post(
        reverse(CHANGELIST), {"action": "cancel_runs", "_selected_action": [queued.pk, done.pk]}, follow=True
    )
    assert response.status_code == 200
    messages = [str(m) for m in response.context["messages"]]
    said = f"Run {queued.run_id}: Cancelled by operator runs-root before it started"
    assert any(m.startswith(said) for m in messages), messages
    assert f"Run {done.run_id} is succeeded; only a queued or running run can be cancelled." in messages
    queued.refresh_from_db()
    job = Job.objects.get(analysis_run=queued)
    assert (queued.status, job.status, AnalysisRun.objects.get(pk=done.pk).status) == ("cancelled", "cancelled",
                                                                                         "succeeded")  # fmt: skip
    assert not AnalysisResult.objects.filter(run=queued).exists()
    cancelled = AccessEvent.objects.filter(project_id=utility.pk, action="analysis_cancelled",
                                           details__run_id=queued.run_id)  # fmt: skip
    by_operator = cancelled.get(actor="operator runs-root")
    assert by_operator.details == {"kind": "burst", "run_id": queued.run_id, "requested": True}
    assert cancelled.count() == 2  # the operator's request, and the job's change of state (its kind's hook)
    assert not AccessEvent.objects.filter(action="analysis_cancelled", details__run_id=done.run_id).exists()


def test_a_runs_page_charts_the_most_affected_node_against_the_baseline(
    operator: Client, utility: Project, alice: Submitter, django_assert_max_num_queries: object
) -> None:
    run = burst(utility, alice)
    affected = AnalysisResult.objects.get(run=run, result_type="affected_nodes")
    most = affected.payload["nodes"][0]["node_id"]
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):  # type: ignore[operator]
        page = run_page(operator, run)
    svg = chart_of(page)
    assert f"junction {most}: pressure (m)" in svg and run.run_id in svg
    assert svg.count('class="tjw-run"') == 1 and svg.count('class="tjw-model-baseline"') == 1
    assert "<script" not in svg and "style=" not in svg  # allowed by the admin's strict CSP
    assert "2026-04-01 07:00 UTC" in svg and "2026-04-01 11:00 UTC (UTC)" in svg
    assert f'href="?element={most}&amp;element_type=junction"' in page  # the results' elements, to pick

    # A link, a field asked for; and a US project reads the same chart in its units.
    svg = chart_of(run_page(operator, run, element="123", element_type="pipe", field="velocity"))
    assert "pipe 123: velocity (m/s)" in svg and 'class="tjw-model-baseline"' in svg
    utility.unit_system = "US"
    utility.save(update_fields=["unit_system"])
    svg = chart_of(run_page(operator, run, element=most))
    assert f"junction {most}: pressure (psi)" in svg and " psi</text>" in svg and " m</text>" not in svg


def test_the_chart_escapes_what_it_is_asked(operator: Client, utility: Project, alice: Submitter) -> None:
    run = burst(utility, alice)
    page = run_page(operator, run, element='<img src=x onerror="alert(1)">')
    assert "<img src=x" not in page
    assert "stores no series for element &#x27;&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&#x27;" in page
    queued = burst(utility, alice, minutes=60, run=False)
    assert f"Run {queued.run_id} is queued: it has no series." in run_page(operator, queued)


def test_a_user_who_is_not_staff_is_refused(utility: Project, alice: Submitter) -> None:
    run = burst(utility, alice, run=False)
    user = get_user_model().objects.create_user("not-an-operator", password="pw-not-used")
    client = Client()
    client.force_login(user)
    for url in (reverse(CHANGELIST), reverse("admin:queries_analysisrun_change", args=[run.pk])):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    refused = client.post(reverse(CHANGELIST), {"action": "cancel_runs", "_selected_action": [run.pk]})
    assert refused.status_code == 302
    assert AnalysisRun.objects.get(pk=run.pk).status == "queued"
