"""The ``area`` argument of the ranking tools: exactly one of

- ``{"district": "<name>"}`` — elements whose GIS district (``ElementGisProperties.district``) is that name;
- ``{"layer_key": "<key>", "source_fid": "<fid>"}`` — a polygon feature of a source GIS layer (elements or
  devices whose geometry intersects it);
- ``{"center": [lon, lat], "radius_m": <≤ 10000>}`` — a circle (WGS84 spheroid distance, ``ST_DWithin`` on
  geography: the GiST-indexed ``geog`` of network elements).

No discriminator field; the same shape in every tool. ``AREA_SCHEMA`` is the wire schema; ``parse_area``
checks the same rules for callers that skip it; ``resolve_area`` (a plan step) finds the district or the
polygon in the caller's project (unknown → ``NotFound`` naming the field; a feature that is not a polygon
→ ``InvalidParameter``); ``element_area`` / ``device_area`` are the filters, as ORM expressions. A district
that has elements but none of the type a tool ranks is not an empty answer: ``Area.gap`` says what the
district does link, for the result's ``data_gaps`` (issue 40 item 6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.gis.db.models import GeometryField, PointField
from django.db.models import BooleanField, CharField, Count, Exists, F, FloatField, Func, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast

from contexts.errors import InvalidParameter, NotFound
from queries.models import ElementGisProperties, GisFeature
from queries.plan import Plan, statement_factory
from queries.schemas.common import DataGap

MAX_RADIUS_M = 10000.0
_POLYGONS = ("POLYGON", "MULTIPOLYGON")

_NAME = {"type": "string", "minLength": 1, "maxLength": 64}
AREA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": 'Optional area: exactly one of {"district": name} (GIS district), {"layer_key": key, '
    '"source_fid": fid} (a GIS polygon) or {"center": [lon, lat], "radius_m": m ≤ 10000} (a circle).',
    "oneOf": [
        {
            "type": "object",
            "properties": {"district": {**_NAME, "description": "A GIS district, e.g. Hexi."}},
            "required": ["district"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"layer_key": _NAME, "source_fid": _NAME},
            "required": ["layer_key", "source_fid"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "center": {
                    "type": "array",
                    "description": "[longitude, latitude] in EPSG:4326 degrees.",
                    "prefixItems": [
                        {"type": "number", "minimum": -180, "maximum": 180},
                        {"type": "number", "minimum": -90, "maximum": 90},
                    ],
                    "items": False,
                    "minItems": 2,
                    "maxItems": 2,
                },
                "radius_m": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RADIUS_M},
            },
            "required": ["center", "radius_m"],
            "additionalProperties": False,
        },
    ],
}


@dataclass(frozen=True)
class Area:
    district: str | None = None
    layer_key: str | None = None
    source_fid: str | None = None
    center: tuple[float, float] | None = None
    radius_m: float | None = None
    feature_pk: int | None = None  # set by resolve_area for a polygon
    #: ``(element_type, count)`` of the district's elements, set by resolve_area (same query, no extra one).
    district_types: tuple[tuple[str, int], ...] = ()

    def lacks(self, element_type: str) -> bool:
        """Whether this is a district with no element of ``element_type`` (needs resolve_area first)."""
        return self.district is not None and element_type not in dict(self.district_types)

    def gap(self, what: str) -> DataGap:
        """The ``data_gaps`` entry of a district that links no ``what`` (e.g. "district Midtown links
        3 pipes and no junction"), so an empty list never reads as "none of them is low"."""
        links = ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in self.district_types)
        return DataGap(reason=f"district {self.district} links {links} and no {what}")

    def as_dict(self) -> dict[str, Any]:
        if self.district is not None:
            return {"district": self.district}
        if self.layer_key is not None:
            return {"layer_key": self.layer_key, "source_fid": self.source_fid}
        assert self.center is not None
        return {"center": list(self.center), "radius_m": self.radius_m}

    @property
    def kind(self) -> str:
        """``district``, ``polygon`` (resolved: ``feature_pk`` set) or ``circle``."""
        if self.district is not None:
            return "district"
        if self.layer_key is not None:
            return "polygon"
        return "circle"

    def values(self) -> tuple[Any, ...]:
        """What the filter of this kind of area binds: ``(district,)``, ``(feature_pk,)`` or
        ``(lon, lat, radius_m)``."""
        if self.district is not None:
            return (self.district,)
        if self.layer_key is not None:
            assert self.feature_pk is not None, "resolve_area first"
            return (self.feature_pk,)
        assert self.center is not None and self.radius_m is not None
        return (*self.center, self.radius_m)

    def ref(self) -> str:
        """The area as part of a ``source_ref``."""
        if self.district is not None:
            return f"district={self.district}"
        if self.layer_key is not None:
            return f"polygon={self.layer_key}/{self.source_fid}"
        assert self.center is not None
        return f"circle={self.center[0]},{self.center[1]},{self.radius_m:g}m"


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        raise InvalidParameter(f"area.{field} must be a name of 1–64 characters.", details={"field": f"area.{field}"})
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_area(area: Mapping[str, Any] | None) -> Area | None:
    """The area argument checked (the same rules as ``AREA_SCHEMA``), or ``None`` when absent."""
    if area is None:
        return None
    shape = (
        "exactly one of {district}, {layer_key, source_fid} or {center, radius_m}"
        if not isinstance(area, Mapping)
        else None
    )
    keys = set(area) if isinstance(area, Mapping) else set()
    if shape or keys not in ({"district"}, {"layer_key", "source_fid"}, {"center", "radius_m"}):
        raise InvalidParameter(
            "area must be exactly one of {district}, {layer_key, source_fid} or {center, radius_m}.",
            details={"field": "area"},
        )
    if keys == {"district"}:
        return Area(district=_name(area["district"], "district"))
    if keys == {"layer_key", "source_fid"}:
        return Area(layer_key=_name(area["layer_key"], "layer_key"), source_fid=_name(area["source_fid"], "source_fid"))
    center, radius = area["center"], area["radius_m"]
    if not (isinstance(center, list | tuple) and len(center) == 2 and all(_number(c) for c in center)):
        raise InvalidParameter("area.center must be [longitude, latitude].", details={"field": "area.center"})
    lon, lat = float(center[0]), float(center[1])
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise InvalidParameter(
            "area.center must be [longitude, latitude] with -180 ≤ lon ≤ 180 and -90 ≤ lat ≤ 90.",
            details={"field": "area.center"},
        )
    if not _number(radius) or not 0 < radius <= MAX_RADIUS_M:
        raise InvalidParameter(
            f"area.radius_m must be a number of metres, more than 0 and at most {MAX_RADIUS_M:.0f}.",
            details={"field": "area.radius_m"},
        )
    return Area(center=(lon, lat), radius_m=float(radius))


@statement_factory
def _district(project_id: int, district: str) -> Any:
    """How many elements of each type the project's GIS district ``district`` has (a statement factory,
    compiled once); bounded by the handful of element types."""
    return (
        ElementGisProperties.objects.filter(project_id=project_id, district=district)
        .values("element_type")
        .annotate(n=Count("pk"))
        .values_list("element_type", "n")
        .order_by("element_type")[:16]
    )


@statement_factory
def _feature_kind(project_id: int, layer_key: str, source_fid: str) -> Any:
    """A GIS feature of the project with its geometry type (a statement factory, compiled once)."""
    return (
        GisFeature.objects.filter(layer__project_id=project_id, layer__layer_key=layer_key, source_fid=source_fid)
        .annotate(kind=Func(F("geom"), function="GeometryType", output_field=CharField()))
        .values("pk", "kind")[:1]
    )


def resolve_area(project_id: int, area: Area | None) -> Plan[Area | None]:
    """A plan step (``yield from``): the district must name elements of the project, the polygon must
    be a polygon feature of one of its layers. One query; none for a circle."""
    if area is None or area.center is not None:
        return area
    if area.district is not None:
        found = yield _district(project_id, area.district)
        if not found:
            raise NotFound(
                f"No element has GIS district {area.district!r} in this project.", details={"field": "area.district"}
            )
        return Area(district=area.district, district_types=tuple((str(t), int(n)) for t, n in found))
    rows = yield _feature_kind(project_id, area.layer_key, area.source_fid)
    if not rows:
        raise NotFound("No GIS feature with that layer_key and source_fid in this project.", details={"field": "area"})
    if (rows[0]["kind"] or "").upper() not in _POLYGONS:
        raise InvalidParameter(
            f"area: GIS feature {area.source_fid} is a {str(rows[0]['kind']).lower()}, not a polygon.",
            details={"field": "area.source_fid"},
        )
    return Area(layer_key=area.layer_key, source_fid=area.source_fid, feature_pk=int(rows[0]["pk"]))


def _polygon(feature_pk: int) -> Subquery:
    return Subquery(GisFeature.objects.filter(pk=feature_pk).values("geom")[:1], output_field=GeometryField(srid=4326))


def point_geography(lon: float, lat: float) -> Func:
    """An EPSG:4326 point as geography, made in SQL from its two numbers — each one parameter of the
    statement, so a statement factory can bind them (a ``Point`` value is one adapted parameter)."""
    return Func(
        Value(lon, output_field=FloatField()),
        Value(lat, output_field=FloatField()),
        template="ST_SetSRID(ST_MakePoint(%(expressions)s), 4326)::geography",
        output_field=PointField(srid=4326, geography=True),
    )


def within_radius(geography: Any, lon: float, lat: float, radius_m: float) -> Func:
    """``ST_DWithin(geography, centre, radius, true)`` (WGS84 spheroid, GiST-backed on a geography column),
    the centre from ``point_geography``."""
    centre = point_geography(lon, lat)
    return Func(geography, centre, Value(radius_m), Value(True), function="ST_DWithin", output_field=BooleanField())


def element_area(kind: str, project_id: int, element_type: str, *values: Any) -> Q | Func | Exists:
    """A filter on a network element model (``geom``/``geog``) for an area of ``kind`` with ``values``
    (``Area.kind``, ``Area.values``): each value reaches the SQL unchanged as one parameter, for statement
    factories."""
    if kind == "district":
        (district,) = values
        return Exists(
            ElementGisProperties.objects.filter(
                project_id=project_id,
                element_type=element_type,
                element_id=OuterRef("element_id"),
                district=district,
            )
        )
    if kind == "polygon":
        (feature_pk,) = values
        return Func(F("geom"), _polygon(feature_pk), function="ST_Intersects", output_field=BooleanField())
    lon, lat, radius_m = values
    return within_radius(F("geog"), lon, lat, radius_m)


def device_area(kind: str, project_id: int, *values: Any) -> Q | Func | Exists:
    """A filter on ``ScadaDevice`` for an area of ``kind`` with ``values`` (``Area.kind``, ``Area.values``):
    its element's district, or where it is installed — each value one parameter, for statement factories."""
    if kind == "district":
        (district,) = values
        return Exists(
            ElementGisProperties.objects.filter(
                project_id=project_id,
                element_type=OuterRef("element_type"),
                element_id=OuterRef("element_id"),
                district=district,
            )
        )
    if kind == "polygon":
        (feature_pk,) = values
        return Func(F("location"), _polygon(feature_pk), function="ST_Intersects", output_field=BooleanField())
    lon, lat, radius_m = values
    return within_radius(Cast("location", PointField(srid=4326, geography=True)), lon, lat, radius_m)
