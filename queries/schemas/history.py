"""Result data of query_element_history (R-PAGE-3): measured and cleaned SCADA readings of the devices
on the given elements, optionally beside the model baseline or an analysis run's series of those
elements — one globally ordered, paged list of points, each labelled with its origin."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.schemas.network import ElementType
from queries.units import BY_FIELD, DEVICE_UNIT, declared

HistoryMode = Literal["observed", "realtime_comparison", "analysis_comparison"]
PointOrigin = Literal["measured", "cleaned", "model_baseline", "analysis_run"]


class ElementKey(BaseModel):
    element_type: ElementType
    element_id: str


class HistoryDevice(BaseModel):
    """A SCADA device on one of the requested elements (its points are the measured/cleaned series)."""

    device_id: str
    quantity: str
    unit: str = Field(json_schema_extra=declared(DEVICE_UNIT))
    element_type: str
    element_id: str


class HistoryPoint(BaseModel):
    """One point of one series. ``origin`` says what it is: ``measured`` (what the device sent; null =
    nothing received), ``cleaned`` (null = withheld by cleaning, see ``quality``), ``model_baseline`` or
    ``analysis_run`` (model values, never measurements). ``quality`` is the SCADA flag (good, spike,
    stuck, gap); null for model points."""

    origin: PointOrigin
    device_id: str | None
    element_type: ElementType
    element_id: str
    field: str
    time: datetime
    value: float | None = Field(json_schema_extra=declared(BY_FIELD))
    quality: str | None


class ElementHistoryPage(Page[HistoryPoint]):
    """One page of the points of every series, in one global order: SCADA series by device id (measured
    before cleaned), then the model series by element type and element id, each series in time order.
    ``total`` is null (not counted); ``has_more`` says whether another page exists."""

    mode: HistoryMode
    run_id: str | None
    elements: list[ElementKey]
    devices: list[HistoryDevice]
    order: str = Field(
        default="device_id, measured before cleaned, then model series by element_type, element_id; then time"
    )


class ElementHistoryResult(ResultEnvelope[ElementHistoryPage]):
    pass
