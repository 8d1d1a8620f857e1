"""Result data of the model-baseline family (query_model_baseline_series, get_model_baseline_at_time,
query_model_baseline_field).

Every value here is output of the hydraulic model of the imported network (origin
``model_baseline``), never a measurement.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import DataGap, Page, ResultEnvelope
from queries.units import BY_FIELD, declared

ElementType = Literal["junction", "pipe", "valve", "pump", "tank", "reservoir"]
BaselineField = Literal["pressure", "head", "demand", "quality", "flow", "velocity", "headloss", "status", "setting"]
#: A field's value: numbers; ``status`` is an integer (0 closed, 1 open, 2 active); ``setting`` may be null.
BaselineValue = float | int | None


class BaselinePoint(BaseModel):
    """One element at one baseline instant: the requested fields' values."""

    element_id: str
    time: datetime
    values: dict[str, BaselineValue] = Field(json_schema_extra=declared(BY_FIELD))


class BaselineSeriesPage(Page[BaselinePoint]):
    """Baseline points of the requested elements in the window, ordered by element id then time (the
    page is over these points)."""

    element_type: ElementType
    element_ids: list[str]
    fields: list[BaselineField]


class BaselineDataGap(DataGap):
    """A requested element with no baseline instant in the window (the model was not run there)."""

    element_id: str


class BaselineAtTime(BaseModel):
    """One element at the baseline instant at or nearest before ``requested_time``: ``time`` is that
    instant (the baseline is stepped, not interpolated)."""

    element_type: ElementType
    element_id: str
    requested_time: datetime
    time: datetime
    values: dict[str, BaselineValue] = Field(json_schema_extra=declared(BY_FIELD))


class BaselineFieldValue(BaseModel):
    element_id: str
    value: BaselineValue = Field(json_schema_extra=declared(BY_FIELD))


class BaselineFieldPage(Page[BaselineFieldValue]):
    """One field of every element of a type at one baseline instant, ordered by element id."""

    element_type: ElementType
    field: BaselineField
    requested_time: datetime
    time: datetime


class BaselineSeriesResult(ResultEnvelope[BaselineSeriesPage]):
    data_gaps: list[BaselineDataGap] = Field(default_factory=list)  # type: ignore[assignment]  # gaps name the element


class BaselineAtTimeResult(ResultEnvelope[BaselineAtTime]):
    pass


class BaselineFieldResult(ResultEnvelope[BaselineFieldPage]):
    pass
