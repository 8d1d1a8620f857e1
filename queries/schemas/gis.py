"""Result data of the GIS family (get_element_gis_properties, get_source_gis_properties)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from queries.schemas.common import ResultEnvelope
from queries.schemas.network import ElementType, Scalar
from queries.units import declared

#: GIS attribute values as delivered (JSON scalars; nested values are kept as they are).
GisValue = Scalar | list[object] | dict[str, object]


class ElementGisAttributes(BaseModel):
    """The asset register's attributes of one model element. Blank register fields are null."""

    element_type: ElementType
    element_id: str
    material: str | None
    install_year: int | None = Field(json_schema_extra=declared("year"))
    diameter_class: str | None
    district: str | None
    road: str | None
    properties: dict[str, GisValue] = Field(json_schema_extra=declared("as_imported"))


class GisLayerInfo(BaseModel):
    """The source layer a feature comes from, as the GIS department delivered it."""

    layer_key: str
    name: str
    geometry_type: str
    source_crs: str
    source_name: str | None
    exported_at: datetime | None


class ModelElementRef(BaseModel):
    element_type: ElementType
    element_id: str


class SourceGisFeature(BaseModel):
    """One raw feature of a source GIS layer: the GIS system's own feature id and attributes (not the
    model element). ``matched_element`` names the model element it was matched to, null when
    unmatched; ``bbox`` is the feature geometry's extent [min lon, min lat, max lon, max lat] in
    EPSG:4326, null without geometry."""

    layer: GisLayerInfo
    source_fid: str
    properties: dict[str, GisValue] = Field(json_schema_extra=declared("as_imported"))
    geometry_type: str | None
    bbox: list[float] | None = Field(json_schema_extra=declared("degree"), default=None, min_length=4, max_length=4)
    matched_element: ModelElementRef | None


class ElementGisPropertiesResult(ResultEnvelope[ElementGisAttributes]):
    pass


class SourceGisFeatureResult(ResultEnvelope[SourceGisFeature]):
    pass
