"""The model-baseline family over real HTTP against the seeded demo (values checked against the
baseline rows in the database), the per-type field enum, the instant rule (at or nearest before, never
outside the baseline), the limits and the pinned query counts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.gis.geos import Point
from jsonschema import Draft202012Validator

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.models import Project
from contexts.scope import QueryScope
from queries.models import ELEMENT_MODELS, LinkBaseline, NodeBaseline, Reservoir
from queries.registry import tools_by_name
from queries.schemas.common import PageRequest
from queries.services import baseline
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

Call = Callable[..., dict[str, Any]]
DAY0 = datetime(2026, 11, 1, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def scope_on(project: Project) -> QueryScope:
    return service_scope(project, {"simulation.view"})


def ids_of(element_type: str, slug: str = DEMO, n: int = 3) -> list[str]:
    return list(
        ELEMENT_MODELS[element_type]
        .objects.filter(project__slug=slug)
        .order_by("element_id")
        .values_list("element_id", flat=True)[:n]
    )


def series_rows(
    model: type[NodeBaseline] | type[LinkBaseline],
    element_type: str,
    ids: Sequence[str],
    start: datetime,
    end: datetime,
) -> list[dict[str, Any]]:
    return list(
        model.objects.filter(
            project__slug=DEMO, element_type=element_type, element_id__in=ids, time__gte=start, time__lt=end
        )
        .order_by("element_id", "time")
        .values()
    )


def as_points(rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> list[dict[str, Any]]:
    return [{"element_id": r["element_id"], "time": iso(r["time"]), "values": {f: r[f] for f in fields}} for r in rows]


def valid_call(tool: str, arguments: dict[str, Any]) -> None:
    Draft202012Validator(tools_by_name()[tool].input_schema).validate({"context_handle": "h" * 16, **arguments})


# --- query_model_baseline_series --------------------------------------------------------------------


def test_series_matches_the_baseline_rows(demo_call: Call) -> None:
    ids = ids_of("junction", n=2)
    start, end = DAY0 + timedelta(hours=6), DAY0 + timedelta(hours=9)
    args = {"element_type": "junction", "element_ids": ids, "start": iso(start), "end": iso(end)}
    s = structured(demo_call("query_model_baseline_series", args))
    rows = series_rows(NodeBaseline, "junction", ids, start, end)
    assert s["data"]["items"] == as_points(rows, baseline.NODE_FIELDS)
    assert len(rows) == 2 * 12  # every 15 min, [start, end)
    assert s["origin"] == "model_baseline" and s["source"] == "model_baseline" and s["data_gaps"] == []
    assert s["units"] == {"pressure": "m", "head": "m", "demand": "m3/s", "quality": "mg/L"}
    assert (s["data"]["total"], s["data"]["has_more"], s["truncated"]) == (len(rows), False, False)
    assert s["window"] == {"start": iso(start), "end": iso(end), "timezone": "Asia/Shanghai"}


def test_series_of_links_with_chosen_fields(demo_call: Call) -> None:
    ids = ["LINK-1523", *ids_of("pipe", n=1)]
    start, end = DAY0 + timedelta(hours=7), DAY0 + timedelta(hours=10)
    args = {"element_type": "pipe", "element_ids": ids, "start": iso(start), "end": iso(end)}
    s = structured(demo_call("query_model_baseline_series", {**args, "fields": ["flow", "status"]}))
    assert s["data"]["items"] == as_points(series_rows(LinkBaseline, "pipe", ids, start, end), ["flow", "status"])
    assert s["data"]["fields"] == ["flow", "status"] and s["units"] == {"flow": "m3/s"}
    assert {type(p["values"]["status"]) for p in s["data"]["items"]} == {int}
    # node fields of a link type are refused by the wire schema (the enum depends on element_type)
    assert demo_call("query_model_baseline_series", {**args, "fields": ["pressure"]})["error"]["code"] == -32602


def test_series_cut_to_fit_inline_pages_through_the_whole_set(demo_call: Call) -> None:
    ids = ids_of("junction", n=3)
    start, end = DAY0, DAY0 + timedelta(days=1)
    call: dict[str, Any] = {"element_type": "junction", "element_ids": ids, "start": iso(start), "end": iso(end)}
    points: list[dict[str, Any]] = []
    truncated = 0
    while True:
        s = structured(demo_call("query_model_baseline_series", call))
        points += s["data"]["items"]
        if not s["data"]["has_more"]:
            break
        call = s["continue_with"] or {**call, "offset": s["data"]["offset"] + len(s["data"]["items"])}
        valid_call("query_model_baseline_series", call)
        truncated += s["truncated"]
    assert truncated >= 1
    assert points == as_points(series_rows(NodeBaseline, "junction", ids, start, end), baseline.NODE_FIELDS)


def test_series_limits_over_http(demo_call: Call) -> None:
    ids = ids_of("junction", n=21)
    day = {"element_type": "junction", "start": iso(DAY0), "end": iso(DAY0 + timedelta(days=1))}
    at = structured(demo_call("query_model_baseline_series", {**day, "element_ids": ids[:20], "limit": 3}))
    assert at["data"]["total"] == len(series_rows(NodeBaseline, "junction", ids[:20], DAY0, DAY0 + timedelta(days=1)))
    assert demo_call("query_model_baseline_series", {**day, "element_ids": ids})["error"]["code"] == -32602
    assert demo_call("query_model_baseline_series", day)["error"]["code"] == -32602  # the filter is required
    longer = {**day, "element_ids": ids[:1], "end": iso(DAY0 + timedelta(days=1, seconds=1))}
    assert business_error(demo_call("query_model_baseline_series", longer)) == "LIMIT_EXCEEDED"
    naive = {**day, "element_ids": ids[:1], "start": "2026-11-01T00:00:00"}
    assert demo_call("query_model_baseline_series", naive)["error"]["code"] == -32602
    reply = demo_call("query_model_baseline_series", {**day, "element_ids": [ids[0], "NOPE-1"]})
    assert business_error(reply) == "NOT_FOUND"
    assert reply["result"]["structuredContent"]["details"] == {"unknown_element_ids": ["NOPE-1"]}


def test_series_reports_the_part_of_the_window_without_baseline(demo_call: Call) -> None:
    last = NodeBaseline.objects.filter(project__slug=DEMO).order_by("-time").values_list("time", flat=True)[0]
    ids = ids_of("tank", n=1)
    start, end = last - timedelta(hours=1), last + timedelta(hours=3)
    s = structured(
        demo_call(
            "query_model_baseline_series",
            {"element_type": "tank", "element_ids": ids, "start": iso(start), "end": iso(end)},
        )
    )
    assert s["data"]["items"] == as_points(series_rows(NodeBaseline, "tank", ids, start, end), baseline.NODE_FIELDS)
    assert s["data_gaps"] == [
        {
            "start": iso(last + timedelta(minutes=15)),
            "end": iso(end),
            "reason": "after the last model baseline instant",
            "element_id": ids[0],
        }
    ]


# --- get_model_baseline_at_time ---------------------------------------------------------------------


def test_at_time_is_the_instant_at_or_nearest_before(demo_call: Call) -> None:
    rows = series_rows(LinkBaseline, "pipe", ["LINK-1523"], DAY0 + timedelta(hours=8), DAY0 + timedelta(hours=9))
    exact, between = rows[0], rows[1]
    for asked, row in (
        (iso(exact["time"]), exact),
        (iso(between["time"] + timedelta(minutes=7)), between),
        ((between["time"] + timedelta(minutes=14, seconds=59)).isoformat(), between),  # "+00:00" form
    ):
        s = structured(
            demo_call("get_model_baseline_at_time", {"element_type": "pipe", "element_id": "LINK-1523", "time": asked})
        )
        assert s["data"]["time"] == iso(row["time"]) and s["data"]["values"] == {
            f: row[f] for f in baseline.LINK_FIELDS
        }
        assert s["origin"] == "model_baseline" and s["units"]["headloss"] == "m/m"
    beijing = structured(
        demo_call(
            "get_model_baseline_at_time",
            {"element_type": "pipe", "element_id": "LINK-1523", "time": "2026-11-01T16:07:00+08:00"},
        )
    )
    assert beijing["data"]["requested_time"] == "2026-11-01T08:07:00Z" and beijing["data"]["time"] == iso(exact["time"])


def test_at_time_outside_the_baseline_or_element_is_not_found(demo_call: Call) -> None:
    ids = ids_of("junction", n=1)
    first, last = (
        NodeBaseline.objects.filter(project__slug=DEMO, element_type="junction", element_id=ids[0])
        .order_by(*order)
        .values_list("time", flat=True)[0]
        for order in (["time"], ["-time"])
    )
    args = {"element_type": "junction", "element_id": ids[0]}
    assert structured(demo_call("get_model_baseline_at_time", {**args, "time": iso(last)}))["data"]["time"] == iso(last)
    before = demo_call("get_model_baseline_at_time", {**args, "time": iso(first - timedelta(seconds=1))})
    assert business_error(before) == "NOT_FOUND"
    assert before["result"]["structuredContent"]["details"] == {"baseline_start": first.isoformat()}
    after = demo_call("get_model_baseline_at_time", {**args, "time": iso(last + timedelta(seconds=1))})
    assert after["result"]["structuredContent"]["details"] == {"baseline_end": last.isoformat()}
    missing = demo_call("get_model_baseline_at_time", {**args, "element_id": "NOPE-1", "time": iso(last)})
    assert business_error(missing) == "NOT_FOUND"
    # a node id asked as a link type is another element: not found
    wrong_type = demo_call("get_model_baseline_at_time", {**args, "element_type": "pipe", "time": iso(last)})
    assert business_error(wrong_type) == "NOT_FOUND"
    assert demo_call("get_model_baseline_at_time", {**args, "time": "2026-11-01T08:00:00"})["error"]["code"] == -32602


# --- query_model_baseline_field ---------------------------------------------------------------------


def field_rows(element_type: str, field: str, time: datetime, slug: str = DEMO) -> list[dict[str, Any]]:
    model = NodeBaseline if element_type in ("junction", "tank", "reservoir") else LinkBaseline
    rows = (
        model.objects.filter(project__slug=slug, element_type=element_type, time=time)
        .order_by("element_id")
        .values_list("element_id", field)[:10000]
    )
    return [{"element_id": e, "value": v} for e, v in rows]


def test_field_page_matches_the_rows(demo_call: Call) -> None:
    instant = DAY0 + timedelta(hours=8)
    args = {"element_type": "pump", "field": "flow", "time": iso(instant + timedelta(minutes=10)), "limit": 7}
    s = structured(demo_call("query_model_baseline_field", {**args, "offset": 5}))
    rows = field_rows("pump", "flow", instant)
    assert s["data"]["items"] == rows[5:12] and s["data"]["time"] == iso(instant)
    assert s["page"] == {"total": len(rows), "limit": 7, "offset": 5, "has_more": True}
    assert s["origin"] == "model_baseline" and s["units"] == {"flow": "m3/s"}


def test_field_pages_cover_the_whole_set(demo_call: Call) -> None:
    instant = DAY0 + timedelta(hours=20)
    seen: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = {"element_type": "tank", "field": "head", "time": iso(instant), "limit": 8, "offset": offset}
        s = structured(demo_call("query_model_baseline_field", page))
        seen += s["data"]["items"]
        offset += 8
        if not s["data"]["has_more"]:
            break
    assert seen == field_rows("tank", "head", instant)  # in order, no gap, no duplicate


def test_field_limits_and_enum(demo_call: Call) -> None:
    base = {"element_type": "junction", "field": "pressure", "time": iso(DAY0 + timedelta(hours=1))}
    full = demo_call("query_model_baseline_field", {**base, "limit": 500})
    # 500 junction values exceed the inline size: cut with a valid continuation
    cut = structured(full)
    assert (
        cut["truncated"] is True
        and cut["data"]["items"]
        == field_rows("junction", "pressure", DAY0 + timedelta(hours=1))[: len(cut["data"]["items"])]
    )
    valid_call("query_model_baseline_field", cut["continue_with"])
    far = structured(demo_call("query_model_baseline_field", {**base, "offset": 10000}))
    assert far["data"]["items"] == [] and far["data"]["total"] == len(field_rows("junction", "pressure", DAY0))
    for over in ({"limit": 501}, {"offset": 10001}, {"field": "flow"}, {"field": "age"}):
        assert demo_call("query_model_baseline_field", {**base, **over})["error"]["code"] == -32602
    link = structured(demo_call("query_model_baseline_field", {**base, "element_type": "valve", "field": "setting"}))
    assert link["data"]["items"] == field_rows("valve", "setting", DAY0 + timedelta(hours=1))
    outside = {**base, "time": "2026-10-01T00:00:00Z"}
    assert business_error(demo_call("query_model_baseline_field", outside)) == "NOT_FOUND"


# --- across projects, permissions ------------------------------------------------------------------


def test_other_projects_elements_are_not_found(demo_call: Call) -> None:
    here = set(ids_of("junction", n=50))
    only_here = sorted(here - set(ids_of("junction", slug=DEMO_B, n=10000)))[0]
    t = iso(DAY0 + timedelta(hours=1))
    at = demo_call(
        "get_model_baseline_at_time",
        {"element_type": "junction", "element_id": only_here, "time": t},
        who="bob",
        project=DEMO_B,
    )
    assert business_error(at) == "NOT_FOUND"
    series = {"element_type": "junction", "element_ids": [only_here], "start": t, "end": iso(DAY0 + timedelta(hours=2))}
    assert business_error(demo_call("query_model_baseline_series", series, who="bob", project=DEMO_B)) == "NOT_FOUND"
    # demo-b's field page holds demo-b's elements only
    b = structured(
        demo_call(
            "query_model_baseline_field",
            {"element_type": "junction", "field": "head", "time": t, "limit": 500},
            who="bob",
            project=DEMO_B,
        )
    )
    assert b["data"]["total"] == len(field_rows("junction", "head", DAY0 + timedelta(hours=1), slug=DEMO_B))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (
            "query_model_baseline_series",
            {
                "element_type": "pipe",
                "element_ids": ["LINK-1523"],
                "start": "2026-11-01T00:00:00Z",
                "end": "2026-11-01T01:00:00Z",
            },
        ),
        (
            "get_model_baseline_at_time",
            {"element_type": "pipe", "element_id": "LINK-1523", "time": "2026-11-01T00:00:00Z"},
        ),
        ("query_model_baseline_field", {"element_type": "pipe", "field": "flow", "time": "2026-11-01T00:00:00Z"}),
    ],
)
def test_without_simulation_view_the_tools_are_unknown(demo_call: Call, tool: str, args: dict[str, Any]) -> None:
    reply = demo_call(tool, args, who="bob", project=DEMO)  # bob holds only webgis.view on tianjin-demo
    assert reply["error"]["code"] == -32602 and reply["error"]["message"] == f"Unknown tool: {tool}"


# --- synchronous: the point limit on dense synthetic data, service checks, query counts ------------


def dense_project(elements: int) -> QueryScope:
    """``elements`` reservoirs with a one-minute baseline of 1001 instants each."""
    project = Project.objects.create(slug="cat-b-dense-baseline", name="Dense baseline")
    Reservoir.objects.bulk_create(
        Reservoir(
            project=project, element_id=f"R-{i:02d}", geom=Point(117.0 + i / 100, 39.0, srid=4326), base_head=50.0
        )
        for i in range(elements)
    )
    NodeBaseline.objects.bulk_create(
        NodeBaseline(
            project=project,
            element_type="reservoir",
            element_id=f"R-{i:02d}",
            time=DAY0 + timedelta(minutes=m),
            pressure=0.0,
            head=50.0 + m / 1000,
            demand=-0.1,
            quality=0.0,
        )  # fmt: skip
        for i in range(elements)
        for m in range(1001)
    )
    return scope_on(project)


@pytest.fixture
def dense() -> QueryScope:
    return dense_project(10)  # 10010 points


@pytest.fixture
def small() -> QueryScope:
    return dense_project(2)


def test_the_point_limit_at_and_over_its_bound(dense: QueryScope) -> None:
    ids = [f"R-{i:02d}" for i in range(10)]
    at = baseline.query_model_baseline_series(
        scope=dense, element_type="reservoir", element_ids=ids, start=DAY0, end=DAY0 + timedelta(minutes=1000)
    )
    assert (at.data.total, len(at.data.items), at.data.has_more, at.data_gaps) == (10000, 10000, False, [])
    assert at.data.items[1000].element_id == "R-01" and at.data.items[1000].values["head"] == 50.0
    with pytest.raises(LimitExceeded, match="10000"):
        baseline.query_model_baseline_series(
            scope=dense, element_type="reservoir", element_ids=ids, start=DAY0, end=DAY0 + timedelta(minutes=1001)
        )


def test_service_level_checks(small: QueryScope) -> None:
    hour = {"start": DAY0, "end": DAY0 + timedelta(hours=1)}
    with pytest.raises(LimitExceeded, match="At most 20"):
        baseline.query_model_baseline_series(
            scope=small, element_type="reservoir", element_ids=[f"X-{i}" for i in range(21)], **hour
        )
    with pytest.raises(InvalidParameter):
        baseline.query_model_baseline_series(scope=small, element_type="reservoir", element_ids=[], **hour)
    with pytest.raises(InvalidParameter, match="Fields of a reservoir"):
        baseline.query_model_baseline_series(
            scope=small, element_type="reservoir", element_ids=["R-00"], fields=["flow"], **hour
        )
    with pytest.raises(InvalidParameter):
        baseline.query_model_baseline_field(
            scope=small, element_type="pipe", field="pressure", time=DAY0, page=PageRequest()
        )
    with pytest.raises(InvalidParameter):
        baseline.get_model_baseline_at_time(
            scope=small, element_type="reservoir", element_id="R-00", time=DAY0.replace(tzinfo=None)
        )
    with pytest.raises(NotFound):
        baseline.get_model_baseline_at_time(scope=small, element_type="pipe", element_id="LINK-1523", time=DAY0)
    whole_day = baseline.query_model_baseline_series(
        scope=small,
        element_type="reservoir",
        element_ids=["R-00"],
        start=DAY0 - timedelta(hours=1),
        end=DAY0 + timedelta(hours=23),
    )
    assert [(g.start, g.end, g.reason) for g in whole_day.data_gaps] == [
        (DAY0 - timedelta(hours=1), DAY0, "before the first model baseline instant"),
        (DAY0 + timedelta(minutes=1001), DAY0 + timedelta(hours=23), "after the last model baseline instant"),
    ]
    paged = baseline.query_model_baseline_series(
        scope=small, element_type="reservoir", element_ids=["R-00", "R-01"], fields=["head"], **hour,
        page=PageRequest(limit=30, offset=45, max_limit=baseline.MAX_POINTS),
    )  # fmt: skip
    assert [(p.element_id, p.time) for p in paged.data.items] == [
        *(("R-00", DAY0 + timedelta(minutes=m)) for m in range(45, 60)),
        *(("R-01", DAY0 + timedelta(minutes=m)) for m in range(15)),
    ]
    assert (paged.data.total, paged.data.has_more, paged.data.items[0].values) == (120, True, {"head": 50.045})


def test_query_counts_are_pinned(demo_loaded: None, django_assert_num_queries: Callable[..., Any]) -> None:
    scope = scope_on(Project.objects.get(slug=DEMO))
    ids = ids_of("junction", n=20)
    with django_assert_num_queries(3):  # elements, per-element spans, page — for 20 elements as for 1
        baseline.query_model_baseline_series(
            scope=scope, element_type="junction", element_ids=ids, start=DAY0, end=DAY0 + timedelta(hours=24)
        )
    with django_assert_num_queries(1):
        baseline.get_model_baseline_at_time(
            scope=scope, element_type="pipe", element_id="LINK-1523", time=DAY0 + timedelta(hours=8, minutes=7)
        )
    with django_assert_num_queries(3):  # instant, count, page
        baseline.query_model_baseline_field(
            scope=scope, element_type="junction", field="pressure", time=DAY0, page=PageRequest(limit=100)
        )
