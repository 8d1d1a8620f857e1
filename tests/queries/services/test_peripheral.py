"""query_peripheral_data over real HTTP against the seeded demo: every source against its rows in
order, paging without gaps or duplicates, point and time filters, limits, project scoping, the
``synthetic`` flag and origin, and the pinned query counts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.gis.geos import Point

from contexts.errors import InvalidParameter, NotFound
from queries.models import Observation, PeripheralPoint, TestData, WorkOrder
from queries.schemas.common import PageRequest
from queries.services import peripheral
from tests.queries.services.test_spatial import demo_scope, principal_without_webgis, refused_call, synthetic_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


@pytest.fixture(scope="module")
def no_webgis_handle(demo_loaded: None, django_db_blocker: Any) -> Iterator[str]:
    with principal_without_webgis(django_db_blocker) as handle:
        yield handle


def _z(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def expected_keys(source: str, **filters: Any) -> list[tuple[Any, ...]]:
    """The identifying keys of the whole selection, in the service's order, straight from the ORM."""
    if source == "points":
        return [
            (p,)
            for p in PeripheralPoint.objects.filter(project__slug=DEMO, **filters)
            .order_by("point_id")
            .values_list("point_id", flat=True)
        ]
    if source == "work_orders":
        rows = WorkOrder.objects.filter(project__slug=DEMO, **filters).order_by("recorded_at", "order_id")
        return list(rows.values_list("order_id", "recorded_at"))
    if source == "observations":
        rows = Observation.objects.filter(project__slug=DEMO, **filters).order_by(
            "recorded_at", "point__point_id", "id"
        )
        return list(rows.values_list("point__point_id", "recorded_at", "value"))
    rows = TestData.objects.filter(project__slug=DEMO, **filters).order_by("recorded_at", "sample_id", "parameter")
    return list(rows.values_list("sample_id", "parameter", "value"))


def item_key(source: str, item: dict[str, Any]) -> tuple[Any, ...]:
    if source == "points":
        return (item["point_id"],)
    if source == "work_orders":
        return (item["order_id"], datetime.fromisoformat(item["recorded_at"]))
    if source == "observations":
        return (item["point_id"], datetime.fromisoformat(item["recorded_at"]), item["value"])
    return (item["sample_id"], item["parameter"], item["value"])


def read_all(call: Callable[..., dict[str, Any]], args: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Every page of a selection, following ``continue_with`` when a page was cut to fit inline."""
    items: list[dict[str, Any]] = []
    calls = 0
    while True:
        out = structured(call("query_peripheral_data", args))
        calls += 1
        items += out["data"]["items"]
        if not out["data"]["has_more"]:
            return items, calls
        args = out["continue_with"] if out["truncated"] else {**args, "offset": args.get("offset", 0) + args["limit"]}


@pytest.mark.parametrize("source", ["points", "work_orders", "observations", "test_data"])
def test_each_source_pages_without_gaps_or_duplicates(demo_call: Callable[..., dict[str, Any]], source: str) -> None:
    expected = expected_keys(source)
    items, calls = read_all(demo_call, {"source": source, "limit": 20})
    assert [item_key(source, i) for i in items] == expected and len(expected) >= 25
    assert calls >= 2
    assert all(i["synthetic"] is True for i in items)
    assert {i["record"] for i in items} == {source.rstrip("s") if source != "test_data" else "test_data"}


def test_values_match_the_rows(demo_call: Callable[..., dict[str, Any]]) -> None:
    out = structured(demo_call("query_peripheral_data", {"source": "work_orders", "limit": 1}))
    order = WorkOrder.objects.filter(project__slug=DEMO).order_by("recorded_at", "order_id").select_related("point")[0]
    assert out["data"]["items"] == [
        {
            "record": "work_order",
            "order_id": order.order_id,
            "point_id": order.point.point_id,
            "kind": order.kind,
            "status": order.status,
            "priority": order.priority,
            "recorded_at": _z(order.recorded_at),
            "closed_at": _z(order.closed_at),
            "description": order.description,
            "synthetic": True,
        }
    ]
    assert out["origin"] == "synthetic" and out["page"] == {"total": 25, "limit": 1, "offset": 0, "has_more": True}
    point = PeripheralPoint.objects.get(project__slug=DEMO, point_id="HY-001")
    one = structured(demo_call("query_peripheral_data", {"source": "points", "point_id": "HY-001"}))
    assert one["data"]["items"] == [
        {
            "record": "point",
            "point_id": "HY-001",
            "name": point.name,
            "kind": "hydrant",
            "longitude": round(point.geom.x, 7),
            "latitude": round(point.geom.y, 7),
            "element_type": point.element_type,
            "element_id": point.element_id,
            "properties": point.properties,
            "synthetic": True,
        }
    ]


def test_point_and_time_filters(demo_call: Callable[..., dict[str, Any]]) -> None:
    start, end = "2026-11-01T06:00:00Z", "2026-11-01T20:00:00+08:00"  # 06:00Z … 12:00Z
    args = {"source": "test_data", "point_id": "SP-003", "start": start, "end": end, "limit": 100}
    out = structured(demo_call("query_peripheral_data", args))
    expected = expected_keys(
        "test_data",
        point__point_id="SP-003",
        recorded_at__gte=datetime(2026, 11, 1, 6, tzinfo=UTC),
        recorded_at__lt=datetime(2026, 11, 1, 12, tzinfo=UTC),
    )
    assert [item_key("test_data", i) for i in out["data"]["items"]] == expected and len(expected) == 3
    assert {i["point_id"] for i in out["data"]["items"]} == {"SP-003"}
    assert out["window"] == {"start": "2026-11-01T06:00:00Z", "end": "2026-11-01T12:00:00Z"}
    assert out["data"]["point_id"] == "SP-003" and out["source_ref"].endswith("/test_data/points/SP-003")
    only_start = structured(
        demo_call("query_peripheral_data", {"source": "observations", "start": "2026-11-02T12:00:00Z"})
    )
    assert only_start["window"] is None
    assert only_start["data"]["total"] == len(
        expected_keys("observations", recorded_at__gte=datetime(2026, 11, 2, 12, tzinfo=UTC))
    )


def test_bad_filters(demo_call: Callable[..., dict[str, Any]]) -> None:
    assert (
        business_error(demo_call("query_peripheral_data", {"source": "work_orders", "point_id": "HY-999"}))
        == "NOT_FOUND"
    )
    assert business_error(demo_call("query_peripheral_data", {"source": "points", "point_id": "HY-999"})) == "NOT_FOUND"
    for args in (
        {"source": "points", "start": "2026-11-01T00:00:00Z"},
        {"source": "test_data", "start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"},
        {"source": "test_data", "start": "2026-13-01T00:00:00Z"},
    ):
        assert business_error(demo_call("query_peripheral_data", args)) == "INVALID_PARAMETER", args
    for bad in (
        {"source": "test_data", "start": "2026-11-01T00:00:00"},  # naive
        {"source": "test_data", "end": "2026-11-01"},
        {"source": "sensors"},
        {"source": "points", "point_id": ""},
        {"point_id": "HY-001"},
    ):
        assert demo_call("query_peripheral_data", bad)["error"]["code"] == -32602, bad


def test_limits_at_and_over_their_bounds(demo_call: Callable[..., dict[str, Any]]) -> None:
    full = structured(demo_call("query_peripheral_data", {"source": "test_data", "limit": 500}))
    # 240 rows asked at once: cut to fit inline (R-PAGE-5) with a continuation that is a valid call.
    assert full["truncated"] is True and full["continue_with"]["offset"] == len(full["data"]["items"])
    rest = structured(demo_call("query_peripheral_data", full["continue_with"]))
    assert rest["data"]["offset"] == len(full["data"]["items"])
    deep = structured(demo_call("query_peripheral_data", {"source": "test_data", "offset": 10000}))
    assert (deep["data"]["items"], deep["data"]["total"], deep["data"]["has_more"]) == ([], 240, False)
    for bad in ({"limit": 501}, {"limit": 0}, {"offset": 10001}, {"offset": -1}):
        assert demo_call("query_peripheral_data", {"source": "test_data", **bad})["error"]["code"] == -32602, bad


def test_other_projects_points_are_not_found(demo_call: Callable[..., dict[str, Any]]) -> None:
    args = {"source": "observations", "point_id": "HY-001"}
    assert structured(demo_call("query_peripheral_data", args, who="bob"))["data"]["total"] == 3
    assert business_error(demo_call("query_peripheral_data", args, who="bob", project=DEMO_B)) == "NOT_FOUND"
    theirs = structured(demo_call("query_peripheral_data", {"source": "points"}, who="bob", project=DEMO_B))
    assert (theirs["data"]["items"], theirs["data"]["total"]) == ([], 0)


def test_query_counts_pinned(demo_loaded: None, django_assert_num_queries: Callable[..., Any]) -> None:
    scope = demo_scope()
    with django_assert_num_queries(2):  # grouped count + page
        peripheral.query_peripheral_data(scope=scope, source="observations", page=PageRequest())
    with django_assert_num_queries(3):  # the point, grouped count, page
        peripheral.query_peripheral_data(scope=scope, source="test_data", point_id="SP-001", page=PageRequest())
    with django_assert_num_queries(2):
        peripheral.query_peripheral_data(scope=scope, source="points", point_id="SP-001", page=PageRequest())


def test_origin_follows_the_synthetic_flags() -> None:
    scope = synthetic_scope("cat-a-peripheral")
    real = PeripheralPoint.objects.create(
        project_id=scope.project_id,
        point_id="R-1",
        name="real",
        kind="hydrant",
        geom=Point(1, 1, srid=4326),
        synthetic=False,
    )
    at = datetime(2026, 11, 1, tzinfo=UTC)
    Observation.objects.create(
        project_id=scope.project_id, point=real, recorded_at=at, quantity="q", value=1.0, synthetic=False
    )
    page = PageRequest()
    only_real = peripheral.query_peripheral_data(scope=scope, source="observations", page=page)
    assert (only_real.origin, only_real.data.items[0].synthetic) == ("measured", False)
    Observation.objects.create(
        project_id=scope.project_id, point=real, recorded_at=at, quantity="q", value=2.0, synthetic=True
    )
    mixed = peripheral.query_peripheral_data(scope=scope, source="observations", page=page)
    assert mixed.origin == "synthetic" and [i.synthetic for i in mixed.data.items] == [False, True]
    assert peripheral.query_peripheral_data(scope=scope, source="work_orders", page=page).origin == "synthetic"  # empty
    with pytest.raises(InvalidParameter):
        peripheral.query_peripheral_data(scope=scope, source="observations", page=page, start=datetime(2026, 11, 1))
    with pytest.raises(NotFound):
        peripheral.query_peripheral_data(scope=scope, source="test_data", point_id="HY-001", page=page)


def test_refused_without_webgis_view(demo_server: ServerProcess, no_webgis_handle: str) -> None:
    reply = refused_call(demo_server, no_webgis_handle, "query_peripheral_data", {"source": "points"})
    assert (reply["error"]["code"], reply["error"]["message"]) == (-32602, "Unknown tool: query_peripheral_data")
