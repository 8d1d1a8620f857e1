"""query_nearby_elements (SPEC R-GEO): spheroid distances checked against PostGIS and pyproj, the
antimeridian and the pole on small synthetic networks, the GiST index in the plan, paging and limits
over real HTTP against the seeded demo, and the pinned query count.

Synthetic networks are written with the ORM inside the test's transaction (``geog`` is a generated
column and is never written). ``refused_call`` (a principal whose membership lacks ``webgis.view``) is
shared with the other cat_a test modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.contrib.gis.geos import GEOSGeometry, LineString, Point
from django.db import connection
from django.test import override_settings
from pyproj import Geod

from contexts import dev_issuer
from contexts.errors import InvalidParameter, LimitExceeded
from contexts.grants import tool_catalog
from contexts.models import Membership, Principal, Project
from contexts.scope import QueryScope
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from queries.models import Junction, Pipe
from queries.schemas.common import PageRequest
from queries.services import spatial
from tests.queries.factories import service_scope
from tests.support.demo import CLIENT, DEMO, DEMO_B, structured
from tests.support.net1 import call_tool_raw
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

GEOD = Geod(ellps="WGS84")
DEMO_CENTER = [117.2, 39.1]  # the demo network's georeferencing centre (queries/demo/seed.py)


# --- helpers shared with test_gis / test_runtime / test_peripheral ---------------------------------


@contextmanager
def principal_without_webgis(django_db_blocker: Any) -> Iterator[str]:
    """A committed principal whose tianjin-demo membership holds only ``scada.view``, with an
    ordinary_chat context; yields the handle and deletes everything afterwards (cascade). Use it from
    a module-scoped fixture: it must commit outside a test's transaction so the server sees it."""
    subject = "cat-a-no-webgis"
    with django_db_blocker.unblock():
        principal = Principal.objects.create(issuer=settings.TJWATER_OIDC_ISSUER, subject=subject)
        Membership.objects.create(
            principal=principal, project=Project.objects.get(slug=DEMO), permissions=["scada.view"]
        )
        token = VerifiedToken(
            issuer=settings.TJWATER_OIDC_ISSUER,
            subject=subject,
            client_id=CLIENT,
            scopes=frozenset({"mcp.context.bind"}),
            audience=(settings.TJWATER_MCP_AUDIENCE,),
            expires_at=0,
        )
        catalog, task_scoped = tool_catalog()
        with override_settings(TJWATER_CONTEXT_TTL_S=600):
            made = context_create(
                token=token,
                project_slug=DEMO,
                session_id="cat-a-no-webgis",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            )
    try:
        yield made.handle
    finally:
        with django_db_blocker.unblock():
            principal.delete()


def refused_call(server: ServerProcess, handle: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """``tools/call`` of ``tool`` with the ``principal_without_webgis`` handle: the JSON-RPC reply."""
    bearer = dev_issuer.mint_token(subject="cat-a-no-webgis", client_id=CLIENT, scopes=["mcp.query"], ttl_s=600)
    return call_tool_raw(server, tool, args, bearer=bearer, context_handle=handle, timeout=60)


@pytest.fixture(scope="module")
def no_webgis_handle(demo_loaded: None, django_db_blocker: Any) -> Iterator[str]:
    with principal_without_webgis(django_db_blocker) as handle:
        yield handle


def demo_scope(slug: str = DEMO) -> QueryScope:
    project = Project.objects.get(slug=slug)
    return service_scope(project, {"webgis.view", "scada.view", "simulation.view", "optimization.run"})


# --- spatial helpers ---------------------------------------------------------------------------------


def postgis_distances(table: str, project_id: int, center: Sequence[float], ids: Sequence[str]) -> dict[str, float]:
    """PostGIS's own spheroid distance, ``ST_Distance(geog, pt::geography, true)``, for ``ids``."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT element_id, ST_Distance(geog, ST_SetSRID(ST_MakePoint(%s, %s), 4326)::geography, true) "  # noqa: S608
            f"FROM {table} WHERE project_id = %s AND element_id = ANY(%s)",
            [center[0], center[1], project_id, list(ids)],
        )
        return dict(cursor.fetchall())


def postgis_order(table: str, project_id: int, center: Sequence[float], radius_m: float) -> list[tuple[str, float]]:
    """Every element within the radius, in the service's order (distance, then id), computed by PostGIS."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT element_id, ST_Distance(geog, pt, true) AS d FROM {table}, "  # noqa: S608
            "(SELECT ST_SetSRID(ST_MakePoint(%s, %s), 4326)::geography AS pt) c "
            f"WHERE project_id = %s AND ST_DWithin(geog, pt, %s, true) ORDER BY d, element_id",
            [center[0], center[1], project_id, radius_m],
        )
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def geod_point_distance(center: Sequence[float], point: Point) -> float:
    return float(GEOD.inv(center[0], center[1], point.x, point.y)[2])


def geod_line_distance(center: Sequence[float], line: LineString, spacing_m: float = 0.05) -> float:
    """Minimum pyproj geodesic distance from ``center`` to vertices densified every ``spacing_m``
    along each segment's geodesic (a lower-bound-free approximation of point-to-line: its error is at
    most spacing²/(8·d), under 1 mm for the distances used here)."""
    best = float("inf")
    coords = list(line.coords)
    for (x0, y0), (x1, y1) in zip(coords, coords[1:], strict=False):
        length = GEOD.inv(x0, y0, x1, y1)[2]
        inner = GEOD.npts(x0, y0, x1, y1, max(int(length / spacing_m), 1))
        for x, y in [(x0, y0), *inner, (x1, y1)]:
            best = min(best, GEOD.inv(center[0], center[1], x, y)[2])
    return float(best)


def synthetic_scope(slug: str) -> QueryScope:
    project = Project.objects.create(slug=slug, name=slug)
    return service_scope(project, {"webgis.view"}, subject="s")


def add_junction(scope: QueryScope, element_id: str, lon: float, lat: float) -> Junction:
    return Junction.objects.create(
        project_id=scope.project_id, element_id=element_id, elevation=0.0, geom=Point(lon, lat, srid=4326)
    )


def add_pipe(scope: QueryScope, element_id: str, coords: Sequence[tuple[float, float]] | None) -> Pipe:
    geom = GEOSGeometry("LINESTRING EMPTY", srid=4326) if coords is None else LineString(list(coords), srid=4326)
    return Pipe.objects.create(
        project_id=scope.project_id,
        element_id=element_id,
        start_node_id="A",
        end_node_id="B",
        geom=geom,
        length=100.0,
        diameter=0.3,
        roughness=120.0,
    )


def nearby(scope: QueryScope, center: Sequence[float], element_type: str, radius_m: float, limit: int = 100):  # noqa: ANN201
    return spatial.query_nearby_elements(
        scope=scope, center=center, element_type=element_type, radius_m=radius_m, page=spatial.nearby_page(limit=limit)
    )


# --- synthetic networks: antimeridian, pole, empty geometry, ties -----------------------------------


@pytest.fixture
def antimeridian() -> QueryScope:
    """Junctions and pipes on both sides of ±180° at 10° N; ``P-CROSS`` crosses the antimeridian."""
    scope = synthetic_scope("cat-a-antimeridian")
    add_junction(scope, "J-EAST", 179.999, 10.0)  # ~55 m east... of the centre below, west of 180
    add_junction(scope, "J-WEST", -179.999, 10.0)  # just across the antimeridian
    add_junction(scope, "J-FAR", -179.99, 10.0)  # ~1 km away: outside a 500 m radius
    add_junction(scope, "J-OTHER-SIDE", 0.0, 10.0)  # the other side of the planet
    add_pipe(scope, "P-CROSS", [(179.9995, 10.001), (-179.9995, 10.001)])
    add_pipe(scope, "P-WEST", [(-179.9992, 9.999), (-179.9992, 9.998)])
    return scope


def test_antimeridian_points_match_postgis_and_pyproj(antimeridian: QueryScope) -> None:
    center = [179.9995, 10.0]
    result = nearby(antimeridian, center, "junction", 500)
    ids = [i.element_id for i in result.data.items]
    assert ids == ["J-EAST", "J-WEST"]  # J-WEST is 164 m away across 180°; J-FAR and the far side are not
    theirs = postgis_distances("queries_junction", antimeridian.project_id, center, ids)
    points = {j.element_id: j.geom for j in Junction.objects.filter(project_id=antimeridian.project_id)}
    for item in result.data.items:
        assert item.distance_m == theirs[item.element_id]
        assert item.distance_m == pytest.approx(geod_point_distance(center, points[item.element_id]), abs=0.1)
    assert result.data.items[1].distance_m == pytest.approx(164.459, abs=0.01)
    assert (result.data.total, result.data.has_more) == (2, False)


def test_antimeridian_lines_match_postgis_and_pyproj(antimeridian: QueryScope) -> None:
    # West of 180° and south of the crossing pipe: the nearest part of P-CROSS is the 180° meridian.
    center = [-179.9998, 10.0]
    result = nearby(antimeridian, center, "pipe", 500)
    ids = [i.element_id for i in result.data.items]
    assert set(ids) == {"P-CROSS", "P-WEST"}
    theirs = postgis_distances("queries_pipe", antimeridian.project_id, center, ids)
    lines = {p.element_id: p.geom for p in Pipe.objects.filter(project_id=antimeridian.project_id)}
    for item in result.data.items:
        assert item.distance_m == theirs[item.element_id]
        assert item.distance_m == pytest.approx(geod_line_distance(center, lines[item.element_id]), abs=0.1)
    # P-CROSS is one short great-circle segment over 180°, ~110 m north of the centre — not the
    # planar line through Greenwich that its coordinates draw on a flat map.
    assert dict((i.element_id, i.distance_m) for i in result.data.items)["P-CROSS"] == pytest.approx(110.6, abs=0.5)


@pytest.fixture
def north_pole() -> QueryScope:
    """Junctions around the north pole, where longitudes meet and Mercator boxes blow up."""
    scope = synthetic_scope("cat-a-pole")
    add_junction(scope, "J-000", 0.0, 89.999)
    add_junction(scope, "J-090", 90.0, 89.999)
    add_junction(scope, "J-180", 180.0, 89.999)
    add_junction(scope, "J-270", -90.0, 89.998)
    add_junction(scope, "J-POLE", 0.0, 90.0)
    add_junction(scope, "J-SOUTH", 0.0, 89.99)  # ~1 km from the pole
    add_pipe(scope, "P-OVER-POLE", [(45.0, 89.9995), (-135.0, 89.9995)])  # a 111 m pipe across the pole
    return scope


def test_near_pole_points_and_lines(north_pole: QueryScope) -> None:
    center = [0.0, 89.999]
    result = nearby(north_pole, center, "junction", 400)
    by_id = {i.element_id: i.distance_m for i in result.data.items}
    # The pole is 111.7 m away, J-180 (across the pole) ~223 m — a Mercator or lon/lat box filter
    # around the centre would have missed both; J-SOUTH (~1 km) is outside the radius.
    assert set(by_id) == {"J-000", "J-090", "J-POLE", "J-180", "J-270"}
    assert [i.element_id for i in result.data.items][:3] == ["J-000", "J-POLE", "J-090"]
    theirs = postgis_distances("queries_junction", north_pole.project_id, center, list(by_id))
    points = {j.element_id: j.geom for j in Junction.objects.filter(project_id=north_pole.project_id)}
    for element_id, distance in by_id.items():
        assert distance == theirs[element_id]
        assert distance == pytest.approx(geod_point_distance(center, points[element_id]), abs=0.1)
    assert by_id["J-180"] == pytest.approx(223.4, abs=0.5)
    pipes = nearby(north_pole, center, "pipe", 400)
    assert [i.element_id for i in pipes.data.items] == ["P-OVER-POLE"]
    assert (
        pipes.data.items[0].distance_m
        == postgis_distances("queries_pipe", north_pole.project_id, center, ["P-OVER-POLE"])["P-OVER-POLE"]
    )
    line = Pipe.objects.get(project_id=north_pole.project_id).geom
    assert pipes.data.items[0].distance_m == pytest.approx(geod_line_distance(center, line), abs=0.1)


def test_empty_geometry_is_skipped_and_ties_break_by_id() -> None:
    scope = synthetic_scope("cat-a-ties")
    # Inserted out of id order: the order must come from element_id, not from insertion.
    add_pipe(scope, "P-C", [(10.0, 10.0), (10.001, 10.0)])
    add_pipe(scope, "P-A", [(10.0, 10.0), (10.0, 10.001)])
    add_pipe(scope, "P-B", [(10.0, 10.0), (9.999, 10.0)])
    add_pipe(scope, "P-EMPTY", None)
    assert Pipe.objects.get(project_id=scope.project_id, element_id="P-EMPTY").geom.empty
    result = nearby(scope, [10.0, 10.0], "pipe", 10000)
    assert [(i.element_id, i.distance_m) for i in result.data.items] == [("P-A", 0.0), ("P-B", 0.0), ("P-C", 0.0)]
    assert result.data.total == 3


def test_no_hits_is_an_empty_page_and_the_radius_is_not_widened() -> None:
    scope = synthetic_scope("cat-a-lonely")
    add_junction(scope, "J-1", 10.0, 10.0)
    just_outside = geod_point_distance([10.001, 10.0], Point(10.0, 10.0)) - 0.01
    result = nearby(scope, [10.001, 10.0], "junction", just_outside)
    assert (result.data.items, result.data.total, result.data.has_more) == ([], 0, False)
    assert result.data.radius_m == just_outside


def test_center_radius_and_limit_are_range_checked(antimeridian: QueryScope) -> None:
    for center in ([180.0001, 0.0], [0.0, -90.5], [1.0], [float("nan"), 0.0]):
        with pytest.raises(InvalidParameter):
            nearby(antimeridian, center, "pipe", 100)
    with pytest.raises(InvalidParameter):
        nearby(antimeridian, [0.0, 0.0], "pipe", 0)
    with pytest.raises(InvalidParameter):
        nearby(antimeridian, [0.0, 0.0], "hydrant", 100)
    with pytest.raises(LimitExceeded):
        nearby(antimeridian, [0.0, 0.0], "pipe", 10000.5)
    with pytest.raises(LimitExceeded):
        spatial.query_nearby_elements(scope=antimeridian, center=[0.0, 0.0], page=PageRequest(limit=101))
    assert nearby(antimeridian, [180.0, 90.0], "pipe", 10000).data.total == 0  # bounds are inclusive


# --- the demo network: query count, EXPLAIN --------------------------------------------------------


def test_query_count_pinned(demo_loaded: None, django_assert_num_queries: Callable[..., Any]) -> None:
    scope = demo_scope()
    with django_assert_num_queries(1):  # page + total (window count) in one statement
        first = spatial.query_nearby_elements(scope=scope, center=DEMO_CENTER)
    assert (len(first.data.items), first.data.limit) == (5, 5)
    with django_assert_num_queries(2):  # a page past the end also counts
        past = spatial.query_nearby_elements(scope=scope, center=DEMO_CENTER, page=spatial.nearby_page(offset=500))
    assert (past.data.items, past.data.total) == ([], first.data.total)


def test_distances_on_the_demo_match_postgis(demo_loaded: None) -> None:
    scope = demo_scope()
    for element_type, table in (("pipe", "queries_pipe"), ("junction", "queries_junction")):
        result = nearby(scope, DEMO_CENTER, element_type, 300)
        expected = postgis_order(table, scope.project_id, DEMO_CENTER, 300)
        assert [(i.element_id, i.distance_m) for i in result.data.items] == expected[:100]
        assert result.data.total == len(expected) > 5


def explain_nearby(scope: QueryScope, radius_m: float = 200) -> str:
    """EXPLAIN (ANALYZE) of the very statement the service yields, after ANALYZE of the pipe table."""
    plan = spatial.query_nearby_elements.plan(scope=scope, center=DEMO_CENTER, radius_m=radius_m)
    statement = next(plan)  # a statement factory's call: the queryset it builds is the statement
    plan.close()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queries_pipe")
    return statement.build().explain(analyze=True)


def test_explain_uses_the_geography_gist_index(demo_loaded: None) -> None:
    # The demo network (3829 pipes) is enough for the planner to prefer the index; seq scans are not
    # disabled. On this machine: "Index Scan using pipe_geog_gist … Index Cond: (geog && _st_expand(…))".
    text = explain_nearby(demo_scope())
    assert "pipe_geog_gist" in text and "_st_expand" in text, text
    assert "Seq Scan" not in text, text


# --- over real HTTP against the seeded demo ---------------------------------------------------------


def _all_within(center: Sequence[float], radius_m: float, element_type: str = "pipe") -> list[tuple[str, float]]:
    return postgis_order(f"queries_{element_type}", Project.objects.get(slug=DEMO).pk, center, radius_m)


def test_happy_path_defaults(demo_call: Callable[..., dict[str, Any]]) -> None:
    out = structured(demo_call("query_nearby_elements", {"center": DEMO_CENTER}))
    data = out["data"]
    expected = _all_within(DEMO_CENTER, 200)
    assert [(i["element_id"], i["distance_m"]) for i in data["items"]] == expected[:5]
    assert (data["source"], data["center_crs"], data["distance_method"]) == (
        "model_network",
        "EPSG:4326",
        "WGS84_spheroid",
    )
    assert (data["element_type"], data["radius_m"], data["limit"], data["total"]) == ("pipe", 200, 5, len(expected))
    pipe = Pipe.objects.get(project__slug=DEMO, element_id=data["items"][0]["element_id"])
    assert data["items"][0]["properties"]["length"] == pipe.length
    assert data["items"][0]["properties"]["start_node_id"] == pipe.start_node_id
    assert out["page"]["has_more"] is True and out["origin"] == "model_network" and out["units"]["distance_m"] == "m"


def test_paging_covers_the_whole_set(demo_call: Callable[..., dict[str, Any]]) -> None:
    center = [117.21, 39.105]
    expected = _all_within(center, 400, "junction")
    got: list[tuple[str, float]] = []
    offset = 0
    while True:
        args = {"center": center, "element_type": "junction", "radius_m": 400, "limit": 7, "offset": offset}
        data = structured(demo_call("query_nearby_elements", args))["data"]
        got += [(i["element_id"], i["distance_m"]) for i in data["items"]]
        offset += 7
        if not data["has_more"]:
            break
    assert got == expected and len(expected) > 14


def test_limits_at_and_over_their_bounds(demo_call: Callable[..., dict[str, Any]]) -> None:
    at = structured(demo_call("query_nearby_elements", {"center": DEMO_CENTER, "radius_m": 10000, "limit": 1}))
    assert at["data"]["radius_m"] == 10000 and len(at["data"]["items"]) == 1 and at["data"]["total"] > 3000
    deep = structured(demo_call("query_nearby_elements", {"center": DEMO_CENTER, "offset": 10000}))
    assert (deep["data"]["items"], deep["data"]["offset"]) == ([], 10000)
    for bad in (
        {"center": DEMO_CENTER, "radius_m": 10000.5},
        {"center": DEMO_CENTER, "radius_m": 0},
        {"center": DEMO_CENTER, "limit": 101},
        {"center": DEMO_CENTER, "limit": 0},
        {"center": DEMO_CENTER, "offset": 10001},
        {"center": [180.5, 39.1]},
        {"center": [117.2, 90.01]},
        {"center": [117.2]},
        {"center": [117.2, 39.1, 0]},
        {"center": DEMO_CENTER, "element_type": "hydrant"},
        {"radius_m": 100},
    ):
        reply = demo_call("query_nearby_elements", bad)
        assert reply["error"]["code"] == -32602, (bad, reply)


def test_a_full_page_is_cut_to_fit_with_a_valid_continuation(demo_call: Callable[..., dict[str, Any]]) -> None:
    args = {"center": DEMO_CENTER, "radius_m": 2000, "limit": 100}
    first = structured(demo_call("query_nearby_elements", args))
    assert first["truncated"] is True and 0 < len(first["data"]["items"]) < 100
    cont = first["continue_with"]
    assert cont["offset"] == len(first["data"]["items"]) and cont["center"] == DEMO_CENTER
    second = structured(demo_call("query_nearby_elements", cont))
    expected = _all_within(DEMO_CENTER, 2000)
    got = [(i["element_id"], i["distance_m"]) for i in first["data"]["items"] + second["data"]["items"]]
    assert got == expected[: len(got)]


def test_other_projects_elements_are_invisible(demo_call: Callable[..., dict[str, Any]]) -> None:
    # bob on demo-b asks at a point right on tianjin-demo's pipes: demo-b has nothing there.
    theirs = structured(demo_call("query_nearby_elements", {"center": DEMO_CENTER}, who="bob", project=DEMO_B))
    assert (theirs["data"]["items"], theirs["data"]["total"]) == ([], 0)
    assert structured(demo_call("query_nearby_elements", {"center": DEMO_CENTER}, who="bob"))["data"]["total"] > 0


def test_no_hits_over_http(demo_call: Callable[..., dict[str, Any]]) -> None:
    out = structured(demo_call("query_nearby_elements", {"center": [0.0, 89.9999], "radius_m": 10000}))
    assert (out["data"]["items"], out["data"]["total"], out["page"]["has_more"], out["truncated"]) == (
        [],
        0,
        False,
        False,
    )


def test_refused_without_webgis_view(demo_server: ServerProcess, no_webgis_handle: str) -> None:
    reply = refused_call(demo_server, no_webgis_handle, "query_nearby_elements", {"center": DEMO_CENTER})
    assert reply["error"]["code"] == -32602
    assert reply["error"]["message"] == "Unknown tool: query_nearby_elements"
