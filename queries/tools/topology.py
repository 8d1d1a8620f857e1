"""Declarations of the topology family: the elements around an element (network model), and the path
water takes at one instant (model baseline flow directions)."""

from __future__ import annotations

from queries.registry import ELEMENT_ID, ELEMENT_TYPE, SIMULATION_VIEW, WEBGIS_VIEW, ToolLimits, ToolSpec, input_object
from queries.schemas.common import MAX_OFFSET
from queries.schemas.topology import ConnectedElementsResult, FlowTraceResult
from queries.services import topology
from queries.tools.scada import TIME, parse_time


def _trace_summary(r: FlowTraceResult) -> str:
    d = r.data
    end = d.dominant_path_end
    dominant = sum(1 for e in d.items if e.dominant)
    return (
        f"{d.direction.capitalize()} trace of {d.element_type} {d.element_id} at {d.time.isoformat()}: "
        f"{len(d.items)} elements ({dominant} on the dominant path, which ends at {end.element_type} "
        f"{end.element_id}: {end.reason}); stopped: {d.stop_reason}."
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_connected_elements",
        title="Connected elements",
        description="NETWORK MODEL topology: the links and nodes within depth (1–3) node-to-node steps of an "
        "element, each with its type, id and hop (links also name their end nodes). From a node, depth 1 "
        "is its links and their other end nodes; from a link, its two end nodes and every link that meets "
        "them. Ordered by hop, type, id; pages of limit (default 100, max 500) with the total.",
        input_schema=input_object(
            {
                "element_type": ELEMENT_TYPE,
                "element_id": ELEMENT_ID,
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": topology.MAX_DEPTH,
                    "default": 1,
                    "description": "Node-to-node steps from the element (1–3).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": topology.MAX_CONNECTED_LIMIT,
                    "default": topology.DEFAULT_CONNECTED_LIMIT,
                },
                "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
            },
            ["element_type", "element_id"],
        ),
        output_model=ConnectedElementsResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        limits=ToolLimits(max_page=topology.MAX_CONNECTED_LIMIT),
        invoke=lambda scope, a: topology.get_connected_elements.plan(
            scope=scope,
            element_type=a["element_type"],
            element_id=a["element_id"],
            depth=a.get("depth", 1),
            page=topology.connected_page(
                limit=a.get("limit", topology.DEFAULT_CONNECTED_LIMIT), offset=a.get("offset", 0)
            ),
        ),
        summarize=lambda r: (
            f"{len(r.data.items)} of {r.data.total} elements within {r.data.depth} step(s) of "
            f"{r.data.element_type} {r.data.element_id} from offset {r.data.offset}"
            + ("; more available." if r.data.has_more else ".")
        ),
        rest="<element_types:element_type>/connected",
        examples=(
            {"element_type": "pipe", "element_id": "LINK-1523"},
            {"element_type": "junction", "element_id": "JUNCTION-1304", "depth": 3, "limit": 7, "offset": 5},
            {"element_type": "junction", "element_id": "JUNCTION-1304", "depth": 1, "offset": 50},
            {"element_type": "valve", "element_id": "no-such-valve"},
            {"element_type": "pipe", "element_id": "LINK-1523", "depth": 2, "limit": 15},
        ),
    ),
    ToolSpec(
        name="trace_flow_path",
        title="Trace flow path",
        description="MODEL BASELINE flow directions (simulation output, not measurements) at the baseline "
        "instant at or nearest before time: the elements water passes through upstream of an element (to "
        "its sources: reservoirs, tanks) or downstream (to the demand ends). Links carry |flow| (m³/s) and "
        "from_node → to_node, nodes their hop count; the dominant path (largest flow at each step, ties by "
        "id) comes first and is marked. At most max_elements (default 60, max 500); says where and why "
        "it stopped (source_reached, demand_end, no_flow, max_elements).",
        input_schema=input_object(
            {
                "element_type": ELEMENT_TYPE,
                "element_id": ELEMENT_ID,
                "direction": {"type": "string", "enum": list(topology.DIRECTIONS)},
                "time": TIME,
                "max_elements": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": topology.MAX_TRACE_ELEMENTS,
                    "default": topology.DEFAULT_TRACE_ELEMENTS,
                    "description": "Most elements to return (the dominant path first).",
                },
            },
            ["element_type", "element_id", "direction", "time"],
        ),
        output_model=FlowTraceResult,
        permissions=(WEBGIS_VIEW, SIMULATION_VIEW),
        source="model_baseline",
        semantics="model_baseline",
        limits=ToolLimits(max_page=topology.MAX_TRACE_ELEMENTS),
        invoke=lambda scope, a: topology.trace_flow_path.plan(
            scope=scope,
            element_type=a["element_type"],
            element_id=a["element_id"],
            direction=a["direction"],
            time=parse_time(a["time"], "time"),
            max_elements=a.get("max_elements", topology.DEFAULT_TRACE_ELEMENTS),
        ),
        item_parts=True,
        summarize=_trace_summary,
        rest="<element_types:element_type>/flow-path",
        examples=(
            {
                "element_type": "junction",
                "element_id": "JUNCTION-1304",
                "direction": "upstream",
                "time": "2026-11-01T09:00:00Z",
            },
            {
                "element_type": "pipe",
                "element_id": "LINK-1523",
                "direction": "downstream",
                "time": "2026-11-01T09:07:00Z",
                "max_elements": 30,
            },
            {
                "element_type": "junction",
                "element_id": "JUNCTION-1304",
                "direction": "upstream",
                "time": "2030-01-01T00:00:00Z",
            },
            {
                "element_type": "junction",
                "element_id": "JUNCTION-1304",
                "direction": "upstream",
                "time": "2026-11-01T08:30:00Z",
                "max_elements": 40,
            },
        ),
    ),
]
