"""get_workbench_runtime over real HTTP against the seeded demo (values checked against the snapshot
row), the optional data_source filter, project scoping, and the pinned query count."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from contexts.errors import NotFound
from contexts.models import Project
from queries.models import WorkbenchRuntime
from queries.services import runtime
from tests.queries.services.test_spatial import demo_scope, principal_without_webgis, refused_call, synthetic_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


@pytest.fixture(scope="module")
def no_webgis_handle(demo_loaded: None, django_db_blocker: Any) -> Iterator[str]:
    with principal_without_webgis(django_db_blocker) as handle:
        yield handle


def _z(value: datetime | str) -> str:
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_runtime_matches_the_snapshot(demo_call: Callable[..., dict[str, Any]]) -> None:
    row = WorkbenchRuntime.objects.get(project__slug=DEMO)
    out = structured(demo_call("get_workbench_runtime", {}))
    data = out["data"]
    assert (data["simulation_clock"], data["captured_at"]) == (_z(row.simulation_clock), _z(row.captured_at))
    assert (
        (data["active_scenario"], data["mode"])
        == (row.active_scenario, row.mode)
        == ("burst-20261101-0800", "incident")
    )
    assert [s["name"] for s in data["data_sources"]] == sorted(row.data_sources)
    for status in data["data_sources"]:
        stored = row.data_sources[status["name"]]
        assert status == {
            "name": status["name"],
            "last_sync": _z(stored["last_sync"]),
            "freshness_s": stored["freshness_s"],
            "status": stored["status"],
        }
    assert out["source_ref"] == "project:tianjin-demo/workbench/runtime" and out["units"] == {"freshness_s": "s"}


def test_one_data_source(demo_call: Callable[..., dict[str, Any]]) -> None:
    out = structured(demo_call("get_workbench_runtime", {"data_source": "gis"}))
    assert [(s["name"], s["status"]) for s in out["data"]["data_sources"]] == [("gis", "stale")]
    assert out["source_ref"].endswith("/data_sources/gis")
    assert business_error(demo_call("get_workbench_runtime", {"data_source": "telemetry"})) == "NOT_FOUND"
    assert business_error(demo_call("get_workbench_runtime", {"data_source": "s" * 64})) == "NOT_FOUND"
    for bad in ({"data_source": "s" * 65}, {"data_source": ""}, {"data_source": "a b"}, {"project": "demo-b"}):
        assert demo_call("get_workbench_runtime", bad)["error"]["code"] == -32602, bad


def test_each_project_sees_its_own_runtime(demo_call: Callable[..., dict[str, Any]]) -> None:
    row = WorkbenchRuntime.objects.get(project__slug=DEMO_B)
    theirs = structured(demo_call("get_workbench_runtime", {}, who="bob", project=DEMO_B))["data"]
    assert (theirs["active_scenario"], theirs["mode"]) == (None, row.mode) == (None, "monitoring")
    assert structured(demo_call("get_workbench_runtime", {}, who="bob"))["data"]["mode"] == "incident"


def test_query_count_pinned(demo_loaded: None, django_assert_num_queries: Callable[..., Any]) -> None:
    scope = demo_scope()
    with django_assert_num_queries(1):
        result = runtime.get_workbench_runtime(scope=scope, data_source="scada")
    assert result.data.data_sources[0].freshness_s == 300


def test_odd_snapshot_values_read_as_unknown() -> None:
    scope = synthetic_scope("cat-a-runtime")
    with pytest.raises(NotFound):
        runtime.get_workbench_runtime(scope=scope)
    at = datetime(2026, 11, 1, 6, tzinfo=UTC)
    WorkbenchRuntime.objects.create(
        project=Project.objects.get(pk=scope.project_id),
        simulation_clock=at,
        captured_at=at,
        data_sources={
            "naive": {"last_sync": "2026-11-01T05:00:00", "freshness_s": "300", "status": 7},
            "offset": {"last_sync": "2026-11-01T13:00:00+08:00", "freshness_s": 3600.0, "status": "fresh"},
            "broken": "not an object",
        },
    )
    result = runtime.get_workbench_runtime(scope=scope)
    by_name = {s.name: s for s in result.data.data_sources}
    assert [s.name for s in result.data.data_sources] == ["broken", "naive", "offset"]
    assert (by_name["naive"].last_sync, by_name["naive"].freshness_s, by_name["naive"].status) == (None, None, None)
    assert by_name["offset"].last_sync == datetime(2026, 11, 1, 5, tzinfo=UTC) and by_name["offset"].freshness_s == 3600
    assert by_name["broken"].status is None and result.data.active_scenario is None


def test_refused_without_webgis_view(demo_server: ServerProcess, no_webgis_handle: str) -> None:
    reply = refused_call(demo_server, no_webgis_handle, "get_workbench_runtime", {})
    assert (reply["error"]["code"], reply["error"]["message"]) == (-32602, "Unknown tool: get_workbench_runtime")
