"""The sensor placement family over real HTTP against the seeded demo: runs and selected sensors checked
against the stored rows, paging of the runs and of a run's sensors (both in SQL), optimization.run not
weakened, cross-project ids not found, and pinned query counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from contexts.models import Project
from queries.models import SensorPlacementRun
from queries.schemas.common import PageRequest
from queries.services import placement
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

Call = Callable[..., dict[str, Any]]


def runs_of(slug: str) -> list[SensorPlacementRun]:
    return list(SensorPlacementRun.objects.filter(project__slug=slug).order_by("-created_at", "run_id"))


def test_list_sensor_placement_runs(demo_call: Call) -> None:
    stored = runs_of(DEMO)
    result = structured(demo_call("list_sensor_placement_runs", {}))
    assert [
        (i["run_id"], i["objective"], i["objective_value"], i["sensor_count"], i["parameters"])
        for i in result["data"]["items"]
    ] == [(r.run_id, r.objective, r.objective_value, len(r.selected_sensors), r.parameters) for r in stored]
    assert (result["data"]["total"], result["data"]["has_more"]) == (len(stored), False)
    pages = [structured(demo_call("list_sensor_placement_runs", {"limit": 1, "offset": k})) for k in range(len(stored))]
    assert [p["data"]["items"][0]["run_id"] for p in pages] == [r.run_id for r in stored]
    assert [p["data"]["has_more"] for p in pages] == [True] * (len(stored) - 1) + [False]
    assert demo_call("list_sensor_placement_runs", {"limit": 501})["error"]["code"] == -32602
    assert structured(demo_call("list_sensor_placement_runs", {"limit": 500}))["data"]["limit"] == 500
    assert demo_call("list_sensor_placement_runs", {"offset": 10001})["error"]["code"] == -32602


def test_get_sensor_placement_run_pages_the_selected_sensors(demo_call: Call) -> None:
    run = SensorPlacementRun.objects.get(project__slug=DEMO, run_id="placement-demand-20")
    pages = [
        structured(demo_call("get_sensor_placement_run", {"run_id": run.run_id, "limit": 7, "offset": k}))["data"]
        for k in range(0, len(run.selected_sensors), 7)
    ]
    assert [s for p in pages for s in p["items"]] == run.selected_sensors  # rank order, nothing lost or repeated
    assert [p["has_more"] for p in pages] == [True] * (len(pages) - 1) + [False]
    assert {p["total"] for p in pages} == {len(run.selected_sensors)}
    first = pages[0]
    assert (first["run"]["objective"], first["run"]["sensor_count"]) == (run.objective, len(run.selected_sensors))
    scalar = {k: v for k, v in run.scores.items() if not isinstance(v, list)}
    assert first["scores"] == scalar
    assert first["omitted_scores"] == sorted(k for k, v in run.scores.items() if isinstance(v, list))
    whole = structured(demo_call("get_sensor_placement_run", {"run_id": run.run_id, "limit": 500}))["data"]
    assert whole["items"] == run.selected_sensors and whole["has_more"] is False
    past = structured(demo_call("get_sensor_placement_run", {"run_id": run.run_id, "offset": 10000}))["data"]
    assert (past["items"], past["total"]) == ([], len(run.selected_sensors))


def test_placement_needs_optimization_run(demo_call: Call) -> None:
    """bob holds only webgis.view on tianjin-demo: the tools are answered as unknown."""
    for tool, args in (
        ("list_sensor_placement_runs", {}),
        ("get_sensor_placement_run", {"run_id": "placement-demand-20"}),
    ):
        reply = demo_call(tool, args, who="bob")
        assert reply["error"]["code"] == -32602 and reply["error"]["message"] == f"Unknown tool: {tool}"


def test_runs_of_another_project_are_not_found(demo_call: Call) -> None:
    reply = demo_call("get_sensor_placement_run", {"run_id": "placement-demand-20"}, who="bob", project=DEMO_B)
    assert business_error(reply) == "NOT_FOUND"
    assert business_error(demo_call("get_sensor_placement_run", {"run_id": "no-such-run"})) == "NOT_FOUND"
    theirs = structured(demo_call("list_sensor_placement_runs", {}, who="bob", project=DEMO_B))["data"]
    assert (theirs["items"], theirs["total"]) == ([], len(runs_of(DEMO_B)))


def test_pinned_query_counts_and_the_array_is_paged_in_sql(django_assert_num_queries) -> None:  # noqa: ANN001
    project = Project.objects.get(slug=DEMO)
    scope = service_scope(project, {"optimization.run"})
    with django_assert_num_queries(2):
        placement.list_sensor_placement_runs(scope=scope, page=PageRequest())
    with CaptureQueriesContext(connection) as captured:
        result = placement.get_sensor_placement_run(
            scope=scope, run_id="placement-demand-20", page=PageRequest(limit=3)
        )
    [query] = captured.captured_queries
    # The page of the array comes out of the database; the whole array is never selected.
    assert "jsonb_path_query_array" in query["sql"] and '."selected_sensors" AS' not in query["sql"]
    assert [s.rank for s in result.data.items] == [1, 2, 3]
