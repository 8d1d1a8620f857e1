"""Result data of the ranking family (rank_model_baseline, rank_scada_deviation).

``rank_model_baseline`` ranks model output (origin ``model_baseline``). ``rank_scada_deviation`` compares
*cleaned* readings (origin ``cleaned``) with the model baseline at the device's element: the ranking is
of the difference, and says how much of each series it could compare.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from queries.schemas.baseline import BaselineField, BaselineValue, ElementType
from queries.schemas.common import Page, ResultEnvelope
from queries.units import BY_DEVICE_DELTA, BY_FIELD, DEVICE_UNIT, declared

Quantity = Literal["pressure", "flow", "level"]


class RankedValue(BaseModel):
    element_id: str
    value: BaselineValue = Field(json_schema_extra=declared(BY_FIELD))


class BaselineRanking(Page[RankedValue]):
    """The ``limit`` lowest (``order=asc``) or highest (``desc``) values of ``field`` among the elements of
    a type (in ``area`` when given) at baseline instant ``time`` (at or nearest before
    ``requested_time``); ties by element id. ``total`` counts the elements ranked (with a value)."""

    element_type: ElementType
    field: BaselineField
    order: Literal["asc", "desc"]
    requested_time: datetime
    time: datetime
    area: dict[str, Any] | None


class DeviceDeviation(BaseModel):
    """One device: how far its cleaned readings depart from the model baseline at its element (linearly
    interpolated at each reading's time), over the readings inside the baseline's coverage.
    ``mean_abs_diff`` / ``max_abs_diff`` (at ``max_abs_diff_at``) and ``mean_diff`` (reading − model) are
    in ``unit``. Coverage: ``readings`` cleaned values in the window out of ``expected_readings`` slots;
    ``compared`` of them inside the baseline's coverage (``baseline_start`` … ``baseline_end``)."""

    device_id: str
    element_type: str
    element_id: str
    unit: str = Field(json_schema_extra=declared(DEVICE_UNIT))
    mean_abs_diff: float = Field(json_schema_extra=declared(BY_DEVICE_DELTA))
    max_abs_diff: float = Field(json_schema_extra=declared(BY_DEVICE_DELTA))
    max_abs_diff_at: datetime
    mean_diff: float = Field(json_schema_extra=declared(BY_DEVICE_DELTA))
    readings: int = Field(json_schema_extra=declared("count"))
    expected_readings: int = Field(json_schema_extra=declared("count"))
    compared: int = Field(json_schema_extra=declared("count"))
    baseline_start: datetime
    baseline_end: datetime


class UnrankedDevice(BaseModel):
    """A device of the quantity (in the area) that could not be compared, and why — never ranked as
    "no deviation"."""

    device_id: str
    readings: int = Field(json_schema_extra=declared("count"))
    reason: Literal["no cleaned readings in the window", "no model baseline at the readings' times"]


class DeviationRanking(Page[DeviceDeviation]):
    """Devices measuring ``quantity`` (in ``area`` when given), ranked by mean absolute difference,
    descending, ties by device id; ``total`` counts the devices compared. ``unranked`` lists (up to 20 of
    ``unranked_total``) the devices without anything to compare."""

    quantity: Quantity
    area: dict[str, Any] | None
    devices: int = Field(json_schema_extra=declared("count"))
    unranked: list[UnrankedDevice]
    unranked_total: int = Field(json_schema_extra=declared("count"))


class BaselineRankingResult(ResultEnvelope[BaselineRanking]):
    pass


class DeviationRankingResult(ResultEnvelope[DeviationRanking]):
    pass
