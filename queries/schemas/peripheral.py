"""Result data of query_peripheral_data: points, work orders, observations and lab tests.

Every item carries ``synthetic`` (seed 001 "保留 synthetic") and a ``record`` tag naming its kind, so
one page type serves the four sources and its ``outputSchema`` says exactly what each item holds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.schemas.network import ElementType
from queries.units import declared

PeripheralSource = Literal["points", "work_orders", "observations", "test_data"]
JsonScalar = str | float | int | bool | None


class PeripheralPointItem(BaseModel):
    """A point of interest (hydrant, sampling point, customer meter, …) and the model element it sits
    at (null when not matched)."""

    record: Literal["point"] = "point"
    point_id: str
    name: str
    kind: str
    longitude: float = Field(json_schema_extra=declared("degree"))
    latitude: float = Field(json_schema_extra=declared("degree"))
    element_type: ElementType | None
    element_id: str | None
    properties: dict[str, JsonScalar | list[object] | dict[str, object]] = Field(
        json_schema_extra=declared("as_imported")
    )
    synthetic: bool


class WorkOrderItem(BaseModel):
    """A maintenance work order at a point, opened at ``recorded_at`` (closed_at null while open)."""

    record: Literal["work_order"] = "work_order"
    order_id: str
    point_id: str
    kind: str
    status: str
    priority: str
    recorded_at: datetime
    closed_at: datetime | None
    description: str
    synthetic: bool


class ObservationItem(BaseModel):
    """A field observation at a point (value null for a purely visual check)."""

    record: Literal["observation"] = "observation"
    point_id: str
    recorded_at: datetime
    quantity: str
    value: float | None = Field(json_schema_extra=declared("own_unit"))
    unit: str
    note: str
    observer: str
    synthetic: bool


class TestDataItem(BaseModel):
    """One parameter of a lab or field test of a sample taken at a point."""

    __test__ = False  # not a pytest test class despite the name

    record: Literal["test_data"] = "test_data"
    sample_id: str
    point_id: str
    recorded_at: datetime
    parameter: str
    value: float = Field(json_schema_extra=declared("own_unit"))
    unit: str
    method: str
    lab: str
    synthetic: bool


PeripheralItem = Annotated[
    PeripheralPointItem | WorkOrderItem | ObservationItem | TestDataItem, Field(discriminator="record")
]


class PeripheralPage(Page[PeripheralItem]):
    """One page of one peripheral source, in its stable order (points by id; the others by
    ``recorded_at`` then their own key), optionally for one point and a time range."""

    source: PeripheralSource
    point_id: str | None


class PeripheralDataResult(ResultEnvelope[PeripheralPage]):
    pass
