"""The GIS family: the asset register's attributes of a model element, and raw source GIS features.

Two different things, kept apart (seed 001: the nearby query "不查询原始GIS源要素"):
``get_element_gis_properties`` reads the register as joined to the model (keyed by the model's
element type and id); ``get_source_gis_properties`` reads one feature of a source layer as the GIS
department delivered it, keyed by the layer and the GIS system's own feature id (``source_fid``,
e.g. ``WM-200003``), which is not a model element id. Both are scoped to the caller's project; a
layer, feature or element of another project is "not found", like a missing one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import CharField, F, FloatField, Func, QuerySet

from contexts.errors import NotFound
from contexts.scope import QueryScope
from queries.models import ELEMENT_TYPES, ElementGisProperties, GisFeature
from queries.plan import Plan, service, statement_factory
from queries.schemas.gis import (
    ElementGisAttributes,
    ElementGisPropertiesResult,
    GisLayerInfo,
    ModelElementRef,
    SourceGisFeature,
    SourceGisFeatureResult,
)
from queries.services.network import _check_type

SOURCE = "gis"
REGISTER_FIELDS = ("material", "install_year", "diameter_class", "district", "road")


def _blank_to_none(value: str | None) -> str | None:
    return value or None


@statement_factory
def _register(project_id: int, element_type: str, element_id: str) -> QuerySet[Any]:
    """One element's register attributes (a statement factory: compiled once, then bound)."""
    rows = ElementGisProperties.objects.filter(project_id=project_id, element_type=element_type, element_id=element_id)
    register: QuerySet[Any] = rows.values(*REGISTER_FIELDS, "properties")[:1]
    return register


@service
def get_element_gis_properties(
    *, scope: QueryScope, element_type: str, element_id: str
) -> Plan[ElementGisPropertiesResult]:
    """The register attributes of one element of the caller's project (one query)."""
    _check_type(element_type)
    rows = yield _register(scope.project_id, element_type, element_id)
    if not rows:
        raise NotFound(f"No GIS attributes for {element_type} {element_id} in this project.")
    row = rows[0]
    return ElementGisPropertiesResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/gis/elements/{element_type}/{element_id}",
        queried_at=datetime.now(UTC),
        # The register describes model elements; Origin has no GIS value yet (reported to the lead).
        origin="model_network",
        data=ElementGisAttributes(
            element_type=element_type,  # type: ignore[arg-type]  # checked by _check_type above
            element_id=element_id,
            material=_blank_to_none(row["material"]),
            install_year=row["install_year"],
            diameter_class=_blank_to_none(row["diameter_class"]),
            district=_blank_to_none(row["district"]),
            road=_blank_to_none(row["road"]),
            properties=row["properties"],
        ),
    )


#: The feature's geometry type (GEOS's name: ``ST_GeometryType`` without its ``ST_``) and bounding box
#: (``ST_XMin`` … of ``geometry::box3d``: exact doubles, null for an empty geometry) read in SQL — no GEOS
#: object per call.
_EDGES = ("ST_XMin", "ST_YMin", "ST_XMax", "ST_YMax")
_GEOMETRY_FACTS: dict[str, Func] = {
    "geometry_type": Func(
        F("geom"),
        function="ST_GeometryType",
        template="substr(%(function)s(%(expressions)s), 4)",
        output_field=CharField(),
    ),
    **{
        edge: Func(
            F("geom"), function=edge, template="%(function)s((%(expressions)s)::box3d)", output_field=FloatField()
        )
        for edge in _EDGES
    },
}


def _bbox(row: dict[str, Any]) -> list[float] | None:
    edges = [row[edge] for edge in _EDGES]
    return None if any(v is None for v in edges) else [round(v, 7) for v in edges]


@statement_factory
def _feature(project_id: int, layer_key: str, source_fid: str) -> QuerySet[Any]:
    """One feature of a layer with its layer's facts (a statement factory: compiled once, then bound)."""
    return GisFeature.objects.filter(
        layer__project_id=project_id, layer__layer_key=layer_key, source_fid=source_fid
    ).values(
        "source_fid",
        "properties",
        "element_type",
        "element_id",
        "layer__layer_key",
        "layer__name",
        "layer__geometry_type",
        "layer__source_crs",
        "layer__source_name",
        "layer__exported_at",
        **_GEOMETRY_FACTS,
    )[:1]


@service
def get_source_gis_properties(*, scope: QueryScope, layer_key: str, source_fid: str) -> Plan[SourceGisFeatureResult]:
    """One raw feature of a source GIS layer of the caller's project, with its layer (one query)."""
    rows = yield _feature(scope.project_id, layer_key, source_fid)
    if not rows:
        raise NotFound("No feature with that id in that GIS layer of this project.")
    row = rows[0]
    matched = (
        ModelElementRef(element_type=row["element_type"], element_id=row["element_id"])
        if row["element_type"] in ELEMENT_TYPES and row["element_id"]
        else None
    )
    return SourceGisFeatureResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/gis/layers/{layer_key}/features/{source_fid}",
        queried_at=datetime.now(UTC),
        # Origin has no "GIS source" value yet (reported to the lead); closest is the network's own.
        origin="model_network",
        data=SourceGisFeature(
            layer=GisLayerInfo(
                layer_key=row["layer__layer_key"],
                name=row["layer__name"],
                geometry_type=row["layer__geometry_type"],
                source_crs=row["layer__source_crs"],
                source_name=_blank_to_none(row["layer__source_name"]),
                exported_at=row["layer__exported_at"],
            ),
            source_fid=row["source_fid"],
            properties=row["properties"],
            geometry_type=row["geometry_type"],
            bbox=_bbox(row),
            matched_element=matched,
        ),
    )
