"""The ranking family (issue 22) on the seeded demo, each answer against a direct computation: the
baseline table (joined to the GIS districts, or filtered with PostGIS directly) for
``rank_model_baseline``; the cleaned readings and the baseline series, interpolated here with numpy, for
``rank_scada_deviation`` — including readings outside the baseline's coverage (left out, reported) and a
device with nothing to compare (unranked, never "no deviation")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.db import connection

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.models import Project
from contexts.scope import QueryScope
from queries.models import ElementGisProperties, GisFeature, GisLayer, NodeBaseline, ScadaDevice, ScadaReading
from queries.services import ranking
from tests.queries.factories import service_scope
from tests.support.demo import DEMO

pytestmark = [pytest.mark.django_db]

AT = datetime(2026, 11, 1, 9, tzinfo=UTC)
BREAK, NOON = datetime(2026, 11, 1, 8, tzinfo=UTC), datetime(2026, 11, 1, 12, tzinfo=UTC)


def scope() -> QueryScope:
    return service_scope(Project.objects.get(slug=DEMO), {"scada.view", "simulation.view"})


def demo_id() -> int:
    return Project.objects.get(slug=DEMO).pk


def test_lowest_pressures_in_hexi_are_the_baseline_tables(demo_loaded: None) -> None:
    # Question 1 of the demo: the 10 lowest baseline pressures in Hexi at 09:00Z.
    result = ranking.rank_model_baseline(
        scope=scope(), element_type="junction", field="pressure", time=AT, area={"district": "Hexi"}
    )
    hexi = ElementGisProperties.objects.filter(project__slug=DEMO, element_type="junction", district="Hexi")
    rows = list(
        NodeBaseline.objects.filter(
            project__slug=DEMO, element_type="junction", time=AT, element_id__in=hexi.values("element_id")
        )
        .order_by("pressure", "element_id")
        .values_list("element_id", "pressure")
    )
    assert [(i.element_id, i.value) for i in result.data.items] == rows[:10]
    assert result.data.total == len(rows) and result.data.has_more and result.units == {"pressure": "m"}
    assert result.origin == "model_baseline" and result.data.area == {"district": "Hexi"}
    # Highest, a time between instants (the instant before), no area: the whole type.
    top = ranking.rank_model_baseline(
        scope=scope(), element_type="pipe", field="velocity", time=AT + timedelta(minutes=7), order="desc", limit=50
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT element_id, velocity FROM queries_linkbaseline WHERE project_id = %s AND element_type = 'pipe' "
            "AND time = %s ORDER BY velocity DESC, element_id",
            [demo_id(), AT],
        )
        every = cursor.fetchall()
    assert top.data.time == AT and [(i.element_id, i.value) for i in top.data.items] == every[:50]
    assert top.data.total == len(every)


def test_circle_and_polygon_areas_are_postgis_filters(demo_loaded: None) -> None:
    center, radius = (117.2, 39.1), 1500.0
    circle = ranking.rank_model_baseline(
        scope=scope(), element_type="junction", field="head", time=AT, limit=50,
        area={"center": list(center), "radius_m": radius},
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT b.element_id, b.head FROM queries_nodebaseline b JOIN queries_junction j "
            "ON j.project_id = b.project_id AND j.element_id = b.element_id "
            "WHERE b.project_id = %s AND b.element_type = 'junction' AND b.time = %s "
            "AND ST_DWithin(j.geog, ST_SetSRID(ST_MakePoint(%s, %s), 4326)::geography, %s, true) "
            "ORDER BY b.head, b.element_id",
            [demo_id(), AT, *center, radius],
        )
        inside = cursor.fetchall()
    assert 0 < circle.data.total == len(inside)
    assert [(i.element_id, i.value) for i in circle.data.items] == inside[:50]
    # A polygon feature of a GIS layer (made here: the demo's layers are lines and points).
    layer = GisLayer.objects.create(project_id=demo_id(), layer_key="zones", name="Zones", geometry_type="Polygon")
    square = "SRID=4326;POLYGON((117.19 39.09,117.21 39.09,117.21 39.11,117.19 39.11,117.19 39.09))"
    GisFeature.objects.create(layer=layer, source_fid="Z-1", geom=square)
    polygon = ranking.rank_model_baseline(
        scope=scope(), element_type="junction", field="pressure", time=AT, limit=50,
        area={"layer_key": "zones", "source_fid": "Z-1"},
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT b.element_id, b.pressure FROM queries_nodebaseline b JOIN queries_junction j "
            "ON j.project_id = b.project_id AND j.element_id = b.element_id "
            "WHERE b.project_id = %s AND b.element_type = 'junction' AND b.time = %s "
            "AND ST_Intersects(j.geom, ST_GeomFromEWKT(%s)) ORDER BY b.pressure, b.element_id",
            [demo_id(), AT, square],
        )
        inside = cursor.fetchall()
    assert 0 < polygon.data.total == len(inside)
    assert [(i.element_id, i.value) for i in polygon.data.items] == inside[:50]


def test_area_refusals_name_the_field(demo_loaded: None) -> None:
    call = dict(scope=scope(), element_type="junction", field="pressure", time=AT)
    cases: list[tuple[Any, type[Exception], str]] = [
        ({"district": "Atlantis"}, NotFound, "area.district"),
        ({"layer_key": "water_mains", "source_fid": "WM-200003"}, InvalidParameter, "area.source_fid"),
        ({"layer_key": "water_mains", "source_fid": "no-such"}, NotFound, "area"),
        ({"district": "Hexi", "radius_m": 5}, InvalidParameter, "area"),
        ({"center": [117.2, 39.1], "radius_m": 10001}, InvalidParameter, "area.radius_m"),
        ({"center": [190, 39.1], "radius_m": 10}, InvalidParameter, "area.center"),
        ("Hexi", InvalidParameter, "area"),
    ]
    for area, error, field in cases:
        with pytest.raises(error) as caught:
            ranking.rank_model_baseline(**call, area=area)  # type: ignore[arg-type]
        assert caught.value.details == {"field": field}, area
    with pytest.raises(InvalidParameter, match="limit"):
        ranking.rank_model_baseline(**call, limit=51)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="Fields of a junction"):
        ranking.rank_model_baseline(scope=scope(), element_type="junction", field="flow", time=AT)
    with pytest.raises(LimitExceeded, match="24 h"):
        ranking.rank_scada_deviation(scope=scope(), start=BREAK, end=BREAK + timedelta(hours=25), quantity="flow")


def reference_deviation(start: datetime, end: datetime, quantity: str) -> dict[str, tuple[float, float, int, int]]:
    """device → (mean |diff|, max |diff|, readings, compared), computed here: cleaned readings, the
    baseline series at the device's element, numpy's linear interpolation inside the series' span."""
    out = {}
    for device in ScadaDevice.objects.filter(project__slug=DEMO, quantity=quantity):
        readings = list(
            ScadaReading.objects.filter(device=device, time__gte=start, time__lt=end, cleaned_value__isnull=False)
            .order_by("time")
            .values_list("time", "cleaned_value")
        )
        series = list(
            NodeBaseline.objects.filter(
                project__slug=DEMO, element_type=device.element_type, element_id=device.element_id
            )
            .order_by("time")
            .values_list("time", "pressure")
        )
        if not readings:
            continue
        bt = np.array([t.timestamp() for t, _ in series])
        bv = np.array([v for _, v in series])
        inside = [(t.timestamp(), v) for t, v in readings if len(bt) and bt[0] <= t.timestamp() <= bt[-1]]
        if not inside:
            out[device.device_id] = (float("nan"), float("nan"), len(readings), 0)
            continue
        diff = np.array([v for _, v in inside]) - np.interp([t for t, _ in inside], bt, bv)
        out[device.device_id] = (float(np.mean(np.abs(diff))), float(np.max(np.abs(diff))), len(readings), len(inside))
    return out


def test_deviation_ranking_is_the_interpolated_difference(demo_loaded: None) -> None:
    # Question 2 of the demo: the pressure sensors that departed most from the model, 08:00Z–12:00Z.
    result = ranking.rank_scada_deviation(scope=scope(), start=BREAK, end=NOON, quantity="pressure", limit=50)
    want = reference_deviation(BREAK, NOON, "pressure")
    order = sorted((k for k, v in want.items() if v[3]), key=lambda k: (-want[k][0], k))
    assert [d.device_id for d in result.data.items] == order
    for item in result.data.items:
        mean, worst, readings, compared = want[item.device_id]
        assert item.mean_abs_diff == pytest.approx(mean, rel=1e-9, abs=1e-9)
        assert item.max_abs_diff == pytest.approx(worst, rel=1e-9, abs=1e-9)
        assert (item.readings, item.compared, item.expected_readings) == (readings, compared, 48)
        assert item.unit == "m" and result.units[item.device_id] == "m"
    assert result.origin == "cleaned" and result.window is not None and result.window.start == BREAK
    assert result.data.devices == ScadaDevice.objects.filter(project__slug=DEMO, quantity="pressure").count()
    top = ranking.rank_scada_deviation(scope=scope(), start=BREAK, end=NOON, quantity="pressure", limit=3)
    assert [d.device_id for d in top.data.items] == order[:3] and top.data.has_more


def test_missing_baseline_is_never_zero_deviation(demo_loaded: None) -> None:
    """Readings past the end of the baseline are left out and the coverage says so; a device whose element
    has no baseline at all is unranked with the reason (the baseline rows are removed in this test's
    transaction only)."""
    first, second = (
        ScadaDevice.objects.filter(project__slug=DEMO, quantity="pressure")
        .order_by("device_id")
        .values_list("device_id", "element_id")[:2]
    )
    cut = datetime(2026, 11, 1, 10, tzinfo=UTC)
    NodeBaseline.objects.filter(project__slug=DEMO, element_type="junction", element_id=first[1], time__gt=cut).delete()
    NodeBaseline.objects.filter(project__slug=DEMO, element_type="junction", element_id=second[1]).delete()
    result = ranking.rank_scada_deviation(scope=scope(), start=BREAK, end=NOON, quantity="pressure", limit=50)
    by_id = {d.device_id: d for d in result.data.items}
    partial = by_id[first[0]]
    assert partial.compared < partial.readings and partial.baseline_end == cut
    assert partial.compared == len(
        ScadaReading.objects.filter(
            device__device_id=first[0], device__project__slug=DEMO, time__gte=BREAK, time__lte=cut,
            cleaned_value__isnull=False,
        )
    )  # fmt: skip
    want = reference_deviation(BREAK, NOON, "pressure")
    assert partial.mean_abs_diff == pytest.approx(want[first[0]][0], rel=1e-9, abs=1e-9)
    assert second[0] not in by_id
    assert [(u.device_id, u.reason) for u in result.data.unranked] == [
        (second[0], "no model baseline at the readings' times")
    ]
    assert result.data.unranked_total == 1 and result.data.total == result.data.devices - 1


def test_device_cap_and_device_areas(demo_loaded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    hexi = ranking.rank_scada_deviation(
        scope=scope(), start=BREAK, end=NOON, quantity="pressure", limit=50, area={"district": "Hexi"}
    )
    in_hexi = set(
        ElementGisProperties.objects.filter(project__slug=DEMO, element_type="junction", district="Hexi").values_list(
            "element_id", flat=True
        )
    )
    expected = {
        d.device_id
        for d in ScadaDevice.objects.filter(project__slug=DEMO, quantity="pressure")
        if d.element_id in in_hexi
    }
    assert 0 < hexi.data.devices == len(expected)
    assert {d.device_id for d in hexi.data.items} | {u.device_id for u in hexi.data.unranked} == expected
    monkeypatch.setattr(ranking, "MAX_DEVICES", 2)
    with pytest.raises(LimitExceeded) as caught:
        ranking.rank_scada_deviation(scope=scope(), start=BREAK, end=NOON, quantity="pressure")
    assert caught.value.details == {"field": "area"}
