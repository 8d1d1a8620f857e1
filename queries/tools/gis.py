"""Declarations of the GIS family: register attributes of a model element, raw source GIS features."""

from __future__ import annotations

from queries.models.gis import LAYER_KEY_PATTERN
from queries.registry import ELEMENT_ID, ELEMENT_TYPE, WEBGIS_VIEW, ToolSpec, input_object
from queries.schemas.gis import ElementGisPropertiesResult, SourceGisFeatureResult
from queries.services import gis

LAYER_KEY = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": LAYER_KEY_PATTERN,
    "description": "The source GIS layer's key (e.g. water_mains, isolation_valves).",
}
SOURCE_FID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "The GIS system's own feature id in that layer (e.g. WM-200003) — not a model element id.",
}

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_element_gis_properties",
        title="Element GIS attributes",
        description="The asset register's GIS attributes of one model network element: material, install "
        "year, diameter class, district, road and the register's other fields.",
        input_schema=input_object(
            {"element_type": ELEMENT_TYPE, "element_id": ELEMENT_ID}, ["element_type", "element_id"]
        ),
        output_model=ElementGisPropertiesResult,
        permissions=(WEBGIS_VIEW,),
        source=gis.SOURCE,
        semantics="model_network",
        invoke=lambda scope, a: gis.get_element_gis_properties.plan(
            scope=scope, element_type=a["element_type"], element_id=a["element_id"]
        ),
        item_parts=True,
        summarize=lambda r: (
            f"GIS attributes of {r.data.element_type} {r.data.element_id}: material {r.data.material or '-'}, "
            f"installed {r.data.install_year or '-'}, district {r.data.district or '-'}."
        ),
        rest="gis/elements/<str:element_type>/<str:element_id>",
        examples=(
            {"element_type": "pipe", "element_id": "LINK-922"},
            {"element_type": "junction", "element_id": "JUNCTION-1"},
        ),
    ),
    ToolSpec(
        name="get_source_gis_properties",
        title="Source GIS feature",
        description="One raw feature of a source GIS layer as the GIS department delivered it (its own "
        "feature id and attributes, the layer's CRS and export time, the model element it was matched "
        "to if any) — not the model element.",
        input_schema=input_object({"layer_key": LAYER_KEY, "source_fid": SOURCE_FID}, ["layer_key", "source_fid"]),
        output_model=SourceGisFeatureResult,
        permissions=(WEBGIS_VIEW,),
        source=gis.SOURCE,
        semantics="model_network",
        invoke=lambda scope, a: gis.get_source_gis_properties.plan(
            scope=scope, layer_key=a["layer_key"], source_fid=a["source_fid"]
        ),
        item_parts=True,
        summarize=lambda r: (
            f"Feature {r.data.source_fid} of layer {r.data.layer.layer_key}: {len(r.data.properties)} attributes"
            + (
                f", matched to {r.data.matched_element.element_type} {r.data.matched_element.element_id}."
                if r.data.matched_element
                else ", not matched to a model element."
            )
        ),
        rest="gis/layers/<str:layer_key>/features/<str:source_fid>",
        examples=({"layer_key": "water_mains", "source_fid": "WM-200003"},),
    ),
]
