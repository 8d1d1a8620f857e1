"""Declarations of the network family: element properties, element pages, network options, schemas."""

from __future__ import annotations

from queries.registry import (
    ELEMENT_ID,
    ELEMENT_TYPE,
    ELEMENT_TYPES,
    WEBGIS_VIEW,
    ToolLimits,
    ToolSpec,
    input_object,
    page_from,
    page_properties,
)
from queries.schemas.common import MAX_LIMIT
from queries.schemas.network import (
    ElementListResult,
    ElementPropertiesResult,
    NetworkOptionsResult,
    NetworkSchemaResult,
)
from queries.services import network

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_element_properties",
        title="Element properties",
        description="Properties of one network element (junction, pipe, valve, pump, tank or reservoir) of "
        "the context's project, in SI units.",
        input_schema=input_object(
            {"element_type": ELEMENT_TYPE, "element_id": ELEMENT_ID}, ["element_type", "element_id"]
        ),
        output_model=ElementPropertiesResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        invoke=lambda scope, a: network.get_element_properties.plan(
            scope=scope, element_type=a["element_type"], element_id=a["element_id"]
        ),
        summarize=lambda r: f"{r.data.element_type} {r.data.element_id}: {len(r.data.properties)} properties.",
        rest="<element_types:element_type>/properties",
        examples=(
            {"element_type": "pipe", "element_id": "LINK-0"},
            {"element_type": "junction", "element_id": "JUNCTION-10"},
            {"element_type": "pipe", "element_id": "no-such-pipe"},
            {"element_type": "pipe", "element_id": "LINK-1523"},
        ),
    ),
    ToolSpec(
        name="list_elements",
        title="List elements",
        description="One page of the project's network elements of a type, ordered by id, with the total "
        "count. Never the whole network: page with limit/offset.",
        input_schema=input_object({"element_type": ELEMENT_TYPE, **page_properties()}, ["element_type"]),
        output_model=ElementListResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        limits=ToolLimits(max_page=MAX_LIMIT),
        invoke=lambda scope, a: network.list_elements.plan(
            scope=scope, element_type=a["element_type"], page=page_from(a)
        ),
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} elements from offset {r.data.offset}"
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="<element_types:element_type>",
        examples=(
            {"element_type": "junction", "limit": 5, "offset": 0},
            {"element_type": "junction", "limit": 3, "offset": 7},
            {"element_type": "pump"},
            {"element_type": "tank", "limit": 5, "offset": 3},
        ),
    ),
    ToolSpec(
        name="get_network_options",
        title="Network options",
        description="The project's network options of one kind: hydraulic, time, energy, or pump_energy "
        "(which needs pump_id).",
        input_schema=input_object(
            {
                "kind": {"type": "string", "enum": ["hydraulic", "time", "energy", "pump_energy"]},
                "pump_id": {"type": "string", "minLength": 1, "maxLength": 64},
            },
            ["kind"],
        ),
        output_model=NetworkOptionsResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        invoke=lambda scope, a: network.get_network_options.plan(scope=scope, kind=a["kind"], pump_id=a.get("pump_id")),
        summarize=lambda r: f"{r.data.kind} options: {len(r.data.values)} values.",
        rest="network-options/<str:kind>",
        examples=(
            {"kind": "hydraulic"},
            {"kind": "time"},
            {"kind": "pump_energy"},
        ),
    ),
    ToolSpec(
        name="get_network_schema",
        title="Network schema",
        description="What the properties of one kind mean (type, unit, allowed values): an element type, "
        "scada-device, or an option kind.",
        input_schema=input_object(
            {
                "kind": {
                    "type": "string",
                    "enum": [*ELEMENT_TYPES, "scada-device", "hydraulic", "time", "energy", "pump_energy"],
                }
            },
            ["kind"],
        ),
        output_model=NetworkSchemaResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        invoke=lambda scope, a: network.get_network_schema.plan(scope=scope, kind=a["kind"]),
        summarize=lambda r: f"Schema of {r.data.kind}: {len(r.data.properties)} properties.",
        rest="network-schemas/<str:kind>",
        examples=(
            {"kind": "pipe"},
            {"kind": "scada-device"},
        ),
    ),
]
