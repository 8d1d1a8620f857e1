"""The analysis runs' admin pages in a real browser (issue 42 item 6), as the device chart's
(``test_admin_browser.py``): headless Chromium through playwright-core, a real uvicorn server, the
OpenID provider of devtools/. The runs list shows estimate against actual; a run's page draws its series
against the model baseline with nothing blocked by the Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from contexts.models import AccessEvent, Permission, Principal, Project
from tests.e2e.browser import Browser
from tests.e2e.test_admin_browser import ALICE_SUB, assert_no_console_errors, open_admin_and_sign_in
from tests.support.idp import IdentityProvider, Members
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

SLUG = "browser-runs"
SUBMITTER = "runs-browser-submitter"


@pytest.fixture
def utility_with_a_run(django_db_blocker: object, test_redis: object) -> Iterator[dict[str, object]]:
    """Net3 with analyses on, the model baseline of 07:00–11:00 UTC and one burst run produced by the
    analyses' services (submitted, then run by the job runner in this process) — committed (the server
    process reads them), deleted afterwards."""
    from analyses.submit import submit
    from queries.importer.baseline_window import simulate_baseline_window
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.jobrunner.runner import run_now
    from queries.models import AnalysisResult, AnalysisRun
    from tests.analyses.conftest import ISSUER, RUNNER, enable, member

    start = datetime(2026, 4, 1, 7, tzinfo=UTC)
    params = {"pipe_id": "123", "start": start.isoformat(), "duration_minutes": 240, "leak_flow": 0.01}
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="Runs in a browser")
        import_network(project=project, inp_path=wntr_network_path("Net3.inp"), center=(-85.5, 38.0), scale=30.0,
                       baseline_hours=0)  # fmt: skip
        simulate_baseline_window(project=project, start=start, hours=4, step_s=900)
        enable(project)
        done = submit(project=project, kind="burst", params=params, who=member(project, SUBMITTER, RUNNER), send=False)
        run_now(done.job)
        run = AnalysisRun.objects.get(pk=done.run.pk)
        most = AnalysisResult.objects.get(run=run, result_type="affected_nodes").payload["nodes"][0]["node_id"]
    yield {"project": project.pk, "run": run.pk, "run_id": run.run_id, "most": most, "estimate": run.estimate,
           "cost": run.cost}  # fmt: skip
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        AccessEvent.objects.filter(project_id=project.pk).delete()
        Project.objects.filter(pk=project.pk).delete()
        Principal.objects.filter(issuer=ISSUER, subject=SUBMITTER).delete()


@pytest.mark.usefixtures("sso_users")
def test_operator_sees_the_runs_and_a_run_chart(
    admin_server: ServerProcess,
    browser: Browser,
    members_factory: Callable[..., Members],
    idp: IdentityProvider,
    utility_with_a_run: dict[str, object],
) -> None:
    members_factory(idp.issuer, {ALICE_SUB: [Permission.WEBGIS_VIEW.value]})
    page = browser.new_page()
    open_admin_and_sign_in(page, admin_server, "alice")
    page.goto(f"{admin_server.url}/admin/queries/analysisrun/?q={utility_with_a_run['run_id']}")
    estimated = float(utility_with_a_run["estimate"]["cpu_seconds"])  # type: ignore[index]
    actual = float(utility_with_a_run["cost"]["cpu_seconds"])  # type: ignore[index]
    row = page.text("#result_list td.field-estimate_vs_actual")
    assert row == f"{estimated:.2f} s / {actual:.2f} s (×{actual / estimated:.2f})", row
    assert page.text("#result_list td.field-run_status") == "Succeeded"
    assert page.text("#result_list td.field-who") == SUBMITTER
    page.screenshot("operator_sees_the_analysis_runs")

    page.goto(f"{admin_server.url}/admin/queries/analysisrun/{utility_with_a_run['run']}/change/")
    page.wait_for("svg.tjw-run-chart")
    drawn = page.evaluate(
        "(() => { const s = document.querySelector('svg.tjw-run-chart');"
        " return {run: s.querySelectorAll('polyline.tjw-run').length,"
        " model: s.querySelectorAll('polyline.tjw-model-baseline').length,"
        " width: s.getBoundingClientRect().width, title: s.querySelector('text').textContent}; })()"
    )
    assert drawn["run"] == 1 and drawn["model"] == 1 and drawn["width"] == 760, drawn
    assert drawn["title"].startswith(f"junction {utility_with_a_run['most']}: pressure (m)"), drawn
    assert_no_console_errors(page)  # nothing blocked by the CSP: no script, no inline style
    page.screenshot("operator_sees_a_run_chart")

    # The chart's own form charts another element (a GET after the read-only change form).
    page.fill("input[name=element]", "123")
    page.select_option("select[name=element_type]", "pipe")
    page.click("input[type=submit][value=Chart]")
    page.wait_for("svg.tjw-run-chart")
    title = page.evaluate("document.querySelector('svg.tjw-run-chart text').textContent")
    assert title.startswith("pipe 123: flow (m3/s)"), title
    assert_no_console_errors(page)
