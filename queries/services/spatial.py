"""The spatial family: network elements near a point (SPEC R-GEO, seed 001 "空间邻近查询").

``query_nearby_elements`` answers "which pipes are within 200 m of this address" with true distances:
the WGS84 spheroid distance in metres from the point to the *whole* geometry of each element (a pipe's
nearest segment, not its midpoint or a vertex), never a planar EPSG:3857 distance.

How the statement meets R-GEO, in one query on the element table's ``geog`` column (a geography
generated from ``geom``, with its own GiST index — queries/models/network.py):

- candidates come from the GiST index: ``ST_DWithin(geog, point, radius, true)`` on geography is
  index-backed (PostGIS's planner support adds ``geog && _st_expand(point, radius)``) and then exact
  on the spheroid; ``ST_Distance(geog, point, true)`` gives the metres;
- antimeridian and poles: geography boxes are geocentric (x, y, z on the unit sphere), so a radius
  box that crosses ±180° or covers a pole is one box, with no wrap-around and no Mercator
  distortion. This is the candidate-box split and the "no Mercator filter near the poles" of R-GEO,
  done by PostGIS itself; ``tests/queries/services/test_spatial.py`` proves both on a synthetic
  network that straddles 180° and one around the north pole;
- empty geometries never match ``ST_DWithin`` (PostGIS returns false for EMPTY), and ``geom`` is
  NOT NULL, so null or empty geometries are skipped;
- order by distance, then ``element_id`` (a pipe and its end node, or two pipes sharing a node, are
  often exactly equidistant), with LIMIT/OFFSET in SQL; ``total`` comes from ``COUNT(*) OVER ()`` in
  the same statement. Only a page past the end (no rows, offset > 0) needs a second statement, the
  count, to still report ``total``;
- no hits → empty items. The radius is never widened.

Both are written as plain ``Func`` calls rather than GeoDjango's ``geog__dwithin``/``Distance``: those
look up the SRID's units in ``spatial_ref_sys`` through Django's connection the first time a process
compiles them, which the MCP driver (``mcp_app.executor``, compiling on the event loop) cannot do.
The SQL is equivalent (the index condition is the same) and every value is a bound parameter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from django.db.models import Count, F, FloatField, Func, Value, Window

from contexts.errors import InvalidParameter, LimitExceeded
from contexts.scope import QueryScope
from queries.fitting import fitting
from queries.models import ELEMENT_MODELS
from queries.paging import collection
from queries.plan import CountOf, Plan, count_of, service, statement_factory
from queries.schemas.common import PageRequest
from queries.schemas.spatial import NearbyElement, NearbyElementsResult, NearbyPage
from queries.services.area import point_geography, within_radius
from queries.services.network import _check_type, _db_values, _properties, _units

SOURCE: Final = "model_network"
DEFAULT_ELEMENT_TYPE = "pipe"
DEFAULT_RADIUS_M = 200.0
MAX_RADIUS_M = 10000.0
DEFAULT_LIMIT = 5
MAX_LIMIT = 100


def _center_lon_lat(center: Sequence[float]) -> tuple[float, float]:
    """The centre's (longitude, latitude) in EPSG:4326 degrees, range-checked (the wire schema checks the
    same bounds). Two numbers, bound as such (``area.point_geography``): no GEOS point is made per call."""
    if len(center) != 2 or not all(
        isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) for c in center
    ):
        raise InvalidParameter("center must be [longitude, latitude] in EPSG:4326 degrees.")
    lon, lat = float(center[0]), float(center[1])
    if not (-180.0 <= lon <= 180.0 and -90.0 <= lat <= 90.0):
        raise InvalidParameter("center must be [longitude, latitude] with -180 ≤ lon ≤ 180 and -90 ≤ lat ≤ 90.")
    return lon, lat


def nearby_page(*, limit: int = DEFAULT_LIMIT, offset: int = 0) -> PageRequest:
    """The page of a nearby query: default 5, at most 100 per page (SPEC §5)."""
    return PageRequest(limit=limit, offset=offset, max_limit=MAX_LIMIT)


def _within(element_type: str, project_id: int, lon: float, lat: float, radius_m: float) -> Any:
    """The project's elements of a type within ``radius_m`` of the point (GiST-backed ``ST_DWithin`` on
    the spheroid)."""
    return ELEMENT_MODELS[element_type].objects.filter(
        within_radius(F("geog"), lon, lat, radius_m), project_id=project_id
    )


@collection(static=1)
def _nearby(element_type: str, project_id: int, lon: float, lat: float, radius_m: float) -> Any:
    """Those elements nearest first (ties by id), each with its distance and the count of all of them
    (``COUNT(*) OVER ()``): its first rows and rows from an offset are statement factories, the point and
    radius bound as numbers — the ORM built and compiled this statement with its GIS functions on every
    call (mcp_app/README.md "Measuring", seventh session)."""
    distance = Func(
        F("geog"), point_geography(lon, lat), Value(True), function="ST_Distance", output_field=FloatField()
    )
    fields, coordinates = _db_values(element_type)
    return (
        _within(element_type, project_id, lon, lat, radius_m)
        .annotate(distance_m=distance, total_within=Window(Count("*")))
        .order_by("distance_m", "element_id")
        .values(*fields, "distance_m", "total_within", **coordinates)
    )


@statement_factory(static=1)
def _within_count(element_type: str, project_id: int, lon: float, lat: float, radius_m: float) -> CountOf:
    return count_of(_within(element_type, project_id, lon, lat, radius_m))


@service
def query_nearby_elements(
    *,
    scope: QueryScope,
    center: Sequence[float],
    element_type: str = DEFAULT_ELEMENT_TYPE,
    radius_m: float = DEFAULT_RADIUS_M,
    page: PageRequest | None = None,
) -> Plan[NearbyElementsResult]:
    """Elements of one type of the caller's project within ``radius_m`` metres (WGS84 spheroid) of
    ``center`` = [lon, lat], nearest first, one page (one query; two for a page past the end)."""
    page = page or nearby_page()
    _check_type(element_type)
    lon, lat = _center_lon_lat(center)
    if isinstance(radius_m, bool) or not (
        isinstance(radius_m, int | float) and math.isfinite(radius_m) and radius_m > 0
    ):
        raise InvalidParameter("radius_m must be a positive number of metres.")
    if radius_m > MAX_RADIUS_M:
        raise LimitExceeded(f"radius_m must be at most {MAX_RADIUS_M:.0f} m; use a smaller radius.")
    if page.limit > MAX_LIMIT:  # a caller may hand in a general page (max 500): this one is 100
        raise LimitExceeded(f"limit must be between 1 and {MAX_LIMIT} for a nearby query.")
    values = (scope.project_id, lon, lat, float(radius_m))
    rows = yield (
        _nearby.at(element_type, *values, page.offset, page.limit)
        if page.offset
        else _nearby.first(element_type, *values, page.limit)
    )
    if rows:
        total = int(rows[0]["total_within"])
    elif page.offset == 0:
        total = 0
    else:  # past the end: the window count has no row to ride on
        total = yield _within_count(element_type, *values)
    items = fitting(  # under the MCP edge's inline budget only the items that can be returned are built
        rows,
        lambda row: NearbyElement(
            element_id=row["element_id"],
            distance_m=float(row["distance_m"]),
            properties=_properties(element_type, row),
        ),
    )
    data = NearbyPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(rows) < total,
        source=SOURCE,
        element_type=element_type,  # type: ignore[arg-type]  # checked by _check_type above
        center=[lon, lat],
        center_crs="EPSG:4326",
        distance_method="WGS84_spheroid",
        radius_m=float(radius_m),
    )
    return NearbyElementsResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/{element_type}/nearby",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=data,
        units={"distance_m": "m", "radius_m": "m", **_units(element_type)},
        page=data.info(),
    )
