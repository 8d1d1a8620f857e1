"""Result data of the topology family (get_connected_elements, trace_flow_path).

``get_connected_elements`` reads the network model only (origin ``model_network``). ``trace_flow_path``
follows the *model baseline's* flow directions at one instant (origin ``model_baseline``): it says where
water goes in the model, never what was measured.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.schemas.network import ElementType
from queries.units import Q_FLOW, declared

Direction = Literal["upstream", "downstream"]
#: Why a trace (or its dominant path) ended: a reservoir or tank was reached; downstream, a node water
#: does not leave (a demand end); no flow at the start or into/out of a node that is not a source; or
#: ``max_elements`` elements were listed before the trace was complete.
StopReason = Literal["source_reached", "demand_end", "no_flow", "max_elements"]


class ConnectedElement(BaseModel):
    """One element around the start: its type, id and ``hop`` (node-to-node steps from the start; the
    two end nodes of a start link are hop 0, a link is one hop further than the nearer of its nodes).
    Links also name their end nodes as the model draws them (``start_node_id`` → ``end_node_id``)."""

    element_type: ElementType
    element_id: str
    hop: int = Field(json_schema_extra=declared("count"))
    start_node_id: str | None = None
    end_node_id: str | None = None


class ConnectedPage(Page[ConnectedElement]):
    """The elements within ``depth`` of the start, ordered by hop, then element type, then id (the
    start element itself is not listed). ``total`` counts every element within ``depth``."""

    element_type: ElementType
    element_id: str
    depth: int = Field(json_schema_extra=declared("count"))


class TraceElement(BaseModel):
    """One element water passes through at ``time``. ``hop``: node-to-node steps from the start — along
    the dominant path for its elements, breadth first (the fewest) for the others; a start link and its
    first node are hop 0. Links carry the baseline flow (its magnitude, in the project's flow unit:
    ``units.flow``) and the direction water moves at that instant (``from_node`` → ``to_node``).
    ``dominant``: on the dominant path (from the start, the link with the largest flow at each step, ties
    by id)."""

    element_type: ElementType
    element_id: str
    hop: int = Field(json_schema_extra=declared("count"))
    dominant: bool
    flow: float | None = Field(default=None, json_schema_extra=declared(Q_FLOW))
    from_node: str | None = None
    to_node: str | None = None


class TraceEnd(BaseModel):
    """Where (part of) the trace ended, and why."""

    element_type: ElementType
    element_id: str
    reason: StopReason


class FlowTrace(BaseModel):
    """The upstream (or downstream) subgraph of the start at baseline instant ``time`` (at or nearest
    before ``requested_time``), at most ``max_elements`` elements: the dominant path first, in order from
    the start, then the other elements by hop, type and id. ``stop_reason`` says why the trace stopped
    (``max_elements`` when elements were left out, else how the dominant path ended); ``ends`` lists up to
    20 places where it stopped (``ends_total`` counts them all)."""

    element_type: ElementType
    element_id: str
    direction: Direction
    requested_time: datetime
    time: datetime
    max_elements: int = Field(json_schema_extra=declared("count"))
    items: list[TraceElement]
    complete: bool
    stop_reason: StopReason
    dominant_path_end: TraceEnd
    ends: list[TraceEnd]
    ends_total: int = Field(json_schema_extra=declared("count"))


class ConnectedElementsResult(ResultEnvelope[ConnectedPage]):
    pass


class FlowTraceResult(ResultEnvelope[FlowTrace]):
    pass
