"""Result data of the ranking family (rank_model_baseline, rank_scada_deviation).

``rank_model_baseline`` ranks model output (origin ``model_baseline``). ``rank_scada_deviation`` compares
*cleaned* readings (origin ``cleaned``) with the model baseline at the device's element: the ranking is
of the difference, and says how much of each series it could compare.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from queries.schemas.baseline import BaselineField, BaselineValue, ElementType
from queries.schemas.common import Page, ResultEnvelope

Quantity = Literal["pressure", "flow", "level"]


class RankedValue(BaseModel):
    element_id: str
    value: BaselineValue


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
    unit: str
    mean_abs_diff: float
    max_abs_diff: float
    max_abs_diff_at: datetime
    mean_diff: float
    readings: int
    expected_readings: int
    compared: int
    baseline_start: datetime
    baseline_end: datetime


class UnrankedDevice(BaseModel):
    """A device of the quantity (in the area) that could not be compared, and why — never ranked as
    "no deviation"."""

    device_id: str
    readings: int
    reason: Literal["no cleaned readings in the window", "no model baseline at the readings' times"]


class DeviationRanking(Page[DeviceDeviation]):
    """Devices measuring ``quantity`` (in ``area`` when given), ranked by mean absolute difference,
    descending, ties by device id; ``total`` counts the devices compared. ``unranked`` lists (up to 20 of
    ``unranked_total``) the devices without anything to compare."""

    quantity: Quantity
    area: dict[str, Any] | None
    devices: int
    unranked: list[UnrankedDevice]
    unranked_total: int


class BaselineRankingResult(ResultEnvelope[BaselineRanking]):
    pass


class DeviationRankingResult(ResultEnvelope[DeviationRanking]):
    pass
