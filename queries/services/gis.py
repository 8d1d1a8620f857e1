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

from django.contrib.gis.geos import GEOSGeometry

from contexts.errors import NotFound
from contexts.scope import QueryScope
from queries.models import ELEMENT_TYPES, ElementGisProperties, GisFeature
from queries.plan import Plan, service
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


@service
def get_element_gis_properties(
    *, scope: QueryScope, element_type: str, element_id: str
) -> Plan[ElementGisPropertiesResult]:
    """The register attributes of one element of the caller's project (one query)."""
    _check_type(element_type)
    rows = yield ElementGisProperties.objects.filter(
        project_id=scope.project_id, element_type=element_type, element_id=element_id
    ).values(*REGISTER_FIELDS, "properties")[:1]
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


def _bbox(geom: GEOSGeometry | None) -> list[float] | None:
    if geom is None or geom.empty:
        return None
    return [round(v, 7) for v in geom.extent]


@service
def get_source_gis_properties(*, scope: QueryScope, layer_key: str, source_fid: str) -> Plan[SourceGisFeatureResult]:
    """One raw feature of a source GIS layer of the caller's project, with its layer (one query)."""
    rows = yield GisFeature.objects.filter(
        layer__project_id=scope.project_id, layer__layer_key=layer_key, source_fid=source_fid
    ).values(
        "source_fid",
        "properties",
        "geom",
        "element_type",
        "element_id",
        "layer__layer_key",
        "layer__name",
        "layer__geometry_type",
        "layer__source_crs",
        "layer__source_name",
        "layer__exported_at",
    )[:1]
    if not rows:
        raise NotFound("No feature with that id in that GIS layer of this project.")
    row = rows[0]
    geom: GEOSGeometry | None = row["geom"]
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
            geometry_type=None if geom is None else geom.geom_type,
            bbox=_bbox(geom),
            matched_element=matched,
        ),
    )
