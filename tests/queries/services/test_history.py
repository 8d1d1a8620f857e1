"""query_element_history over real HTTP against the seeded demo: the UNION ALL pages concatenate to
exactly the series in the stated order (a reference built here from the ORM), the comparison shows the
burst near LINK-1523 and not at a far device, limits and refusals, and pinned query counts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from statistics import median
from typing import Any

import pytest
from django.contrib.gis.db.models.functions import Distance
from django.db import connection
from django.test.utils import CaptureQueriesContext

from contexts import access
from contexts.errors import LimitExceeded, PermissionDenied
from contexts.models import Project
from contexts.scope import QueryScope
from queries.errors import AnalysisRunWithoutSeries
from queries.models import (
    NODE_TYPES,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisRun,
    Junction,
    LinkBaseline,
    NodeBaseline,
    Pipe,
    ScadaDevice,
    ScadaReading,
)
from queries.registry import tools_by_name
from queries.schemas.common import PageRequest
from queries.schemas.history import ElementKey
from queries.services import history
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

Call = Callable[..., dict[str, Any]]
BURST = "burst-20261101-0800"
AT_0800 = datetime(2026, 11, 1, 8, tzinfo=UTC)
Point = tuple[Any, ...]


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def scope_with(*permissions: str) -> QueryScope:
    project = Project.objects.get(slug=DEMO)
    return service_scope(project, permissions)


def devices_by_distance() -> list[ScadaDevice]:
    """The demo's pressure devices, nearest to LINK-1523 first."""
    pipe = Pipe.objects.get(project__slug=DEMO, element_id="LINK-1523")
    return list(
        ScadaDevice.objects.filter(project__slug=DEMO, quantity="pressure")
        .annotate(d=Distance("location", pipe.geom))
        .order_by("d", "device_id")
    )


def reference(elements: Sequence[dict[str, str]], start: datetime, end: datetime, model: str | None) -> list[Point]:
    """Every point the history holds, in the order R-PAGE-3 states, read series by series from the ORM:
    each device (by id) measured then cleaned, then each element's model series (by type, id)."""
    points: list[Point] = []
    devices = ScadaDevice.objects.filter(project__slug=DEMO)
    keys = {(e["element_type"], e["element_id"]) for e in elements}
    for device in sorted((d for d in devices if (d.element_type, d.element_id) in keys), key=lambda d: d.device_id):
        readings = ScadaReading.objects.filter(device=device, time__gte=start, time__lt=end).order_by("time")
        for origin, column in (("measured", "monitored_value"), ("cleaned", "cleaned_value")):
            points += [
                (origin, device.device_id, device.element_type, device.element_id, device.quantity, iso(r.time),
                 getattr(r, column), r.quality)
                for r in readings
            ]  # fmt: skip
    if model is None:
        return points
    for etype, eid in sorted(keys):
        node = etype in NODE_TYPES
        if model == "model_baseline":
            rows = (NodeBaseline if node else LinkBaseline).objects.filter(project__slug=DEMO)
        else:
            rows = (AnalysisNodeSeries if node else AnalysisLinkSeries).objects.filter(
                run__project__slug=DEMO, run__run_id=BURST
            )
        field = "pressure" if node else "flow"
        for r in rows.filter(element_type=etype, element_id=eid, time__gte=start, time__lt=end).order_by("time"):
            points.append((model, None, etype, eid, field, iso(r.time), getattr(r, field), None))
    return points


def as_tuples(items: Sequence[dict[str, Any]]) -> list[Point]:
    return [
        (p["origin"], p["device_id"], p["element_type"], p["element_id"], p["field"], p["time"], p["value"],
         p["quality"])
        for p in items
    ]  # fmt: skip


def all_pages(call: Call, args: dict[str, Any], limit: int) -> tuple[list[Point], list[dict[str, Any]]]:
    """Page through a history with ``limit`` points per call; returns the points and the raw pages."""
    points: list[Point] = []
    pages: list[dict[str, Any]] = []
    offset = 0
    while True:
        result = structured(call("query_element_history", {**args, "limit": limit, "offset": offset}))
        pages.append(result)
        assert result["truncated"] is False and result["data"]["total"] is None
        points += as_tuples(result["data"]["items"])
        offset += len(result["data"]["items"])
        if not result["data"]["has_more"]:
            return points, pages


def story_elements() -> list[dict[str, str]]:
    """Two pressure devices' junctions near LINK-1523, a flow meter's pipe, and the burst pipe itself
    (no device: model series only)."""
    near = devices_by_distance()[:2]
    flow = ScadaDevice.objects.filter(project__slug=DEMO, quantity="flow").order_by("device_id").first()
    assert flow is not None
    return [
        *({"element_type": d.element_type, "element_id": d.element_id} for d in near),
        {"element_type": "pipe", "element_id": flow.element_id},
        {"element_type": "pipe", "element_id": "LINK-1523"},
    ]


def test_pages_concatenate_to_the_series_in_order(demo_call: Call) -> None:
    elements = story_elements()
    start, end = AT_0800 - timedelta(hours=1), AT_0800 + timedelta(hours=1)
    args = {"elements": elements, "start": iso(start), "end": iso(end), "mode": "realtime_comparison"}
    expected = reference(elements, start, end, "model_baseline")
    points, pages = all_pages(demo_call, args, limit=37)
    assert points == expected
    assert len(pages) == -(-len(expected) // 37) and len(expected) > 100
    assert {p["origin"] for p in pages[-1]["data"]["items"]} == {"model_baseline"}
    last = pages[-1]
    assert {d["device_id"] for d in last["data"]["devices"]} == {p[1] for p in expected if p[1]}
    assert [g["reason"] for g in last["data_gaps"] if "No SCADA device" in g["reason"]] == [
        "No SCADA device on pipe LINK-1523: nothing measured."
    ]
    assert (
        last["window"] == {"start": iso(start), "end": iso(end), "timezone": "Asia/Shanghai"}
        and last["units"]["pressure"] == "m"
    )


def test_observed_and_analysis_comparison_pages(demo_call: Call) -> None:
    elements = story_elements()
    start, end = AT_0800 - timedelta(minutes=30), AT_0800 + timedelta(minutes=45)
    window = {"elements": elements, "start": iso(start), "end": iso(end)}
    observed, _ = all_pages(demo_call, {**window, "mode": "observed"}, limit=25)
    assert observed == reference(elements, start, end, None)
    compared, pages = all_pages(demo_call, {**window, "mode": "analysis_comparison", "run_id": BURST}, limit=50)
    assert compared == reference(elements, start, end, "analysis_run")
    assert pages[0]["data"]["run_id"] == BURST and pages[0]["source_ref"].endswith(f"/analysis_comparison/{BURST}")


def test_gaps_are_reported_not_filled(demo_call: Call) -> None:
    """A device's slots with nothing received come back as null measured points with quality gap, and
    are listed in data_gaps for the page; the cleaned series never has a value there."""
    gap = ScadaReading.objects.filter(device__project__slug=DEMO, quality="gap", time__gte=AT_0800).order_by(
        "device__device_id", "time"
    )[0]
    device = gap.device
    args = {
        "elements": [{"element_type": device.element_type, "element_id": device.element_id}],
        "start": iso(gap.time - timedelta(minutes=10)),
        "end": iso(gap.time + timedelta(minutes=10)),
        "mode": "observed",
    }
    result = structured(demo_call("query_element_history", args))
    at_gap = [p for p in result["data"]["items"] if p["time"] == iso(gap.time)]
    assert {(p["origin"], p["value"], p["quality"]) for p in at_gap} == {
        ("measured", None, "gap"),
        ("cleaned", None, "gap"),
    }
    assert any(g["start"] == iso(gap.time) and device.device_id in g["reason"] for g in result["data_gaps"])


def _shift(points: Sequence[Point], device_id: str) -> float:
    """Median of cleaned − model during the burst (08:30–12:00) minus before it (05:00–07:45), at the
    model's instants: the device's constant bias cancels."""
    model = {p[5]: p[6] for p in points if p[0] == "model_baseline" and p[3] == points_element(points, device_id)}
    cleaned = [(p[5], p[6]) for p in points if p[0] == "cleaned" and p[1] == device_id and p[6] is not None]
    before = [v - model[t] for t, v in cleaned if t in model and t < "2026-11-01T07:46"]
    during = [v - model[t] for t, v in cleaned if t in model and t >= "2026-11-01T08:30"]
    return median(during) - median(before)


def points_element(points: Sequence[Point], device_id: str) -> str:
    return next(p[3] for p in points if p[1] == device_id)


def test_realtime_comparison_shows_the_burst_near_link_1523_only(demo_call: Call) -> None:
    devices = devices_by_distance()
    near, far = devices[0], devices[-1]
    burst = AnalysisRun.objects.get(project__slug=DEMO, run_id=BURST)
    # The far device: in the burst's first hours the run computed (almost) no change at its junction.
    first_hours = {
        "time__gte": datetime(2026, 11, 1, 8, tzinfo=UTC),
        "time__lte": datetime(2026, 11, 1, 11, tzinfo=UTC),
    }
    change = [
        abs(a.pressure - b.pressure)
        for a, b in zip(
            AnalysisNodeSeries.objects.filter(run=burst, element_id=far.element_id, **first_hours).order_by("time"),
            NodeBaseline.objects.filter(
                project__slug=DEMO, element_type="junction", element_id=far.element_id, **first_hours
            ).order_by("time"),
            strict=True,
        )
    ]  # fmt: skip
    assert max(change) < 0.05
    args = {
        "elements": [{"element_type": d.element_type, "element_id": d.element_id} for d in (near, far)],
        "start": "2026-11-01T05:00:00Z",
        "end": "2026-11-01T12:00:00Z",
        "mode": "realtime_comparison",
    }
    # 55: a page of 60 of these points is 12006 bytes since the window names its timezone — over the inline cap.
    points, _ = all_pages(demo_call, args, limit=55)
    assert _shift(points, near.device_id) < -1.0  # metres below the baseline, well beyond the noise
    assert abs(_shift(points, far.device_id)) < 0.3


def test_limits_and_refusals(demo_call: Call) -> None:
    element = {"element_type": "junction", "element_id": devices_by_distance()[0].element_id}
    day = {"elements": [element], "start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}
    assert structured(demo_call("query_element_history", {**day, "mode": "observed", "limit": 1}))["data"]["has_more"]
    over = {**day, "end": "2026-11-02T00:00:01Z", "mode": "observed"}
    assert business_error(demo_call("query_element_history", over)) == "LIMIT_EXCEEDED"
    ids = Junction.objects.filter(project__slug=DEMO).order_by("element_id").values_list("element_id", flat=True)
    twenty = [{"element_type": "junction", "element_id": i} for i in ids[:21]]
    ok = structured(
        demo_call("query_element_history", {**day, "elements": twenty[:20], "mode": "observed", "limit": 5})
    )
    assert len(ok["data"]["elements"]) == 20
    extra = twenty
    assert demo_call("query_element_history", {**day, "elements": extra, "mode": "observed"})["error"]["code"] == -32602
    wire_refusals = [
        {**day, "mode": "observed", "limit": 501},
        {**day, "mode": "observed", "offset": 10001},
        {**day, "mode": "observed", "elements": [element, element]},
        {**day, "mode": "observed", "elements": []},
        {**day, "mode": "observed", "start": "2026-11-01T00:00:00"},
        {**day, "mode": "everything"},
    ]
    for bad in wire_refusals:
        assert demo_call("query_element_history", bad)["error"]["code"] == -32602, bad
    assert (
        structured(demo_call("query_element_history", {**day, "mode": "observed", "limit": 500}))["data"]["limit"]
        == 500
    )
    assert business_error(demo_call("query_element_history", {**day, "mode": "analysis_comparison"})) == (
        "INVALID_PARAMETER"
    )
    assert business_error(demo_call("query_element_history", {**day, "mode": "observed", "run_id": BURST})) == (
        "INVALID_PARAMETER"
    )
    failed = {**day, "mode": "analysis_comparison", "run_id": "whatif-20261101-1100"}
    assert business_error(demo_call("query_element_history", failed)) == "ANALYSIS_RUN_HAS_NO_SERIES"
    missing = {**day, "mode": "observed", "elements": [{"element_type": "junction", "element_id": "NOPE-1"}]}
    assert business_error(demo_call("query_element_history", missing)) == "NOT_FOUND"


def test_other_projects_and_missing_permissions(demo_call: Call) -> None:
    element = {"element_type": "junction", "element_id": devices_by_distance()[0].element_id}
    day = {"elements": [element], "start": "2026-11-01T00:00:00Z", "end": "2026-11-01T06:00:00Z"}
    reply = demo_call("query_element_history", {**day, "mode": "observed"}, who="bob", project=DEMO_B)
    assert business_error(reply) == "NOT_FOUND"  # a tianjin-demo element, asked for on demo-b
    theirs = ScadaDevice.objects.filter(project__slug=DEMO_B).order_by("device_id").first()
    assert theirs is not None
    own = {**day, "elements": [{"element_type": theirs.element_type, "element_id": theirs.element_id}]}
    run = {**own, "mode": "analysis_comparison", "run_id": BURST}
    assert business_error(demo_call("query_element_history", run, who="bob", project=DEMO_B)) == "NOT_FOUND"
    reply = demo_call("query_element_history", {**day, "mode": "observed"}, who="bob")  # webgis.view only
    assert reply["error"]["code"] == -32602 and reply["error"]["message"] == "Unknown tool: query_element_history"


def test_comparison_modes_need_simulation_view() -> None:
    """scada.view alone reads the observed history; the comparison modes read model data too (R-TOOL),
    declared by the tool (``argument_permissions``) and refused by ``contexts.access`` on every edge."""
    scope = scope_with("scada.view")
    spec = tools_by_name()["query_element_history"]
    elements = [ElementKey(element_type="junction", element_id=devices_by_distance()[0].element_id)]
    window = {"start": AT_0800, "end": AT_0800 + timedelta(hours=1), "page": PageRequest(limit=5)}
    access.require_permissions(scope, spec.permissions_for({"mode": "observed"}))
    assert history.query_element_history(scope=scope, elements=elements, mode="observed", **window).data.items
    for mode in ("realtime_comparison", "analysis_comparison"):
        with pytest.raises(PermissionDenied) as refused:
            access.require_permissions(scope, spec.permissions_for({"mode": mode}))
        assert refused.value.details == {"missing_permissions": ["simulation.view"]}


def test_the_devices_on_elements_of_every_type_and_too_many(monkeypatch: pytest.MonkeyPatch) -> None:
    """The devices statement (one per call, each element type's ids an array) finds the devices of nodes and
    links alike, in device-id order, and one device over ``MAX_DEVICES`` is refused, not cut."""
    scope = scope_with("scada.view")
    first: dict[str, ScadaDevice] = {}
    for device in ScadaDevice.objects.filter(project__slug=DEMO).order_by("-device_id"):
        first[device.element_type] = device  # the lowest device id of each type
    assert {"junction", "pipe", "tank"} <= set(first)
    keys = {(d.element_type, d.element_id) for d in first.values()}
    expected = sorted(
        d.device_id for d in ScadaDevice.objects.filter(project__slug=DEMO) if (d.element_type, d.element_id) in keys
    )
    elements = [ElementKey(element_type=t, element_id=i) for t, i in sorted(keys)]
    window = {"start": AT_0800, "end": AT_0800 + timedelta(hours=1), "page": PageRequest(limit=5)}
    found = history.query_element_history(scope=scope, elements=elements, mode="observed", **window)
    assert [d.device_id for d in found.data.devices] == expected
    monkeypatch.setattr(history, "MAX_DEVICES", len(expected) - 1)
    with pytest.raises(LimitExceeded, match=f"More than {len(expected) - 1} devices"):
        history.query_element_history(scope=scope, elements=elements, mode="observed", **window)


def test_pinned_query_counts_and_one_union_statement(django_assert_num_queries) -> None:  # noqa: ANN001
    scope = scope_with("scada.view", "simulation.view")
    elements = [ElementKey.model_validate(e) for e in story_elements()]
    window = {"start": AT_0800, "end": AT_0800 + timedelta(hours=2), "page": PageRequest(limit=50, max_limit=500)}
    with django_assert_num_queries(3):
        history.query_element_history(scope=scope, elements=elements, mode="observed", **window)
    with CaptureQueriesContext(connection) as captured:
        history.query_element_history(scope=scope, elements=elements, mode="realtime_comparison", **window)
    assert len(captured.captured_queries) == 4  # elements, devices, the model coverage, the page
    page_sql = captured.captured_queries[-1]["sql"]
    assert page_sql.count("UNION ALL") == 3 and page_sql.endswith("LIMIT 51 OFFSET 0")  # one row more: has_more
    with django_assert_num_queries(4):
        history.query_element_history(
            scope=scope, elements=elements, mode="analysis_comparison", run_id=BURST, **window
        )
    # The elements, their devices and the run are read together (one round trip on the MCP driver), so a run
    # without series is refused after three statements, not two.
    with django_assert_num_queries(3), pytest.raises(AnalysisRunWithoutSeries):
        history.query_element_history(
            scope=scope, elements=elements, mode="analysis_comparison", run_id="whatif-20261101-1100", **window
        )


# --- missing model data is reported, never silently absent (issue 21) ---------------------------------


def test_model_gaps_name_the_uncovered_part_and_the_covered_range(project: Project, tmp_path: Any) -> None:
    from queries.importer.baseline_window import simulate_baseline_window
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.importer.scada_devices import import_scada_devices
    from queries.importer.scada_readings import import_scada

    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    devices = tmp_path / "devices.csv"
    devices.write_text(
        "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
        "PT-11,Pressure 11,pressure,psi,junction,11,,,900\n"
    )
    import_scada_devices(project=project, path=devices)
    readings = tmp_path / "readings.csv"
    day = datetime(2026, 4, 1, tzinfo=UTC)
    readings.write_text(
        "time,PT-11\n" + "".join(f"{iso(day + timedelta(minutes=15 * i))},{50 + i % 3}\n" for i in range(24))
    )
    import_scada(project=project, path=readings)
    simulate_baseline_window(project=project, start=day, hours=3, step_s=900)
    scope = service_scope(project, ["scada.view", "simulation.view"])
    key = [ElementKey(element_type="junction", element_id="11")]
    page = PageRequest(limit=500, max_limit=500)
    result = history.query_element_history(
        scope=scope, elements=key, start=day, end=day + timedelta(hours=6), mode="realtime_comparison", page=page
    )
    model = [p for p in result.data.items if p.origin == "model_baseline"]
    assert len(model) == 13 and model[-1].time == day + timedelta(hours=3)
    assert [(g.start, g.end, g.reason) for g in result.data_gaps] == [
        (
            day + timedelta(hours=3, minutes=15),  # the 03:00 instant holds until 03:15
            day + timedelta(hours=6),
            "No model baseline from 2026-04-01T03:15Z to 2026-04-01T06:00Z: the model baseline covers "
            "2026-04-01T00:00Z to 2026-04-01T03:00Z.",
        )
    ]
    later = history.query_element_history(
        scope=scope, elements=key, start=day + timedelta(days=1), end=day + timedelta(days=1, hours=2),
        mode="realtime_comparison", page=page,
    )  # fmt: skip
    assert not [p for p in later.data.items if p.origin == "model_baseline"]
    assert [(g.start, g.end) for g in later.data_gaps if "model baseline" in g.reason] == [
        (day + timedelta(days=1), day + timedelta(days=1, hours=2))
    ]


def test_an_analysis_run_not_covering_the_window_reports_the_uncovered_parts() -> None:
    first, last = datetime(2026, 11, 1, 8, tzinfo=UTC), datetime(2026, 11, 1, 10, tzinfo=UTC)
    gaps = history._run_gaps(first - timedelta(hours=1), last + timedelta(hours=2), first, last)
    assert [(g.start, g.end) for g in gaps] == [(first - timedelta(hours=1), first), (last, last + timedelta(hours=2))]
    assert gaps[0].reason == (
        "No analysis run values from 2026-11-01T07:00Z to 2026-11-01T08:00Z: the analysis run's series cover "
        "2026-11-01T08:00Z to 2026-11-01T10:00Z only."
    )
    assert history._run_gaps(first, last, first, last) == []
