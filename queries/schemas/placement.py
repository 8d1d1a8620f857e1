"""Result data of the sensor placement family (list_sensor_placement_runs, get_sensor_placement_run)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from queries.schemas.analysis import RunStatusName
from queries.schemas.common import Page, ResultEnvelope
from queries.units import declared


class SensorPlacementRunSummary(BaseModel):
    """One sensor placement run as listed: what was optimised, how well, how many sensors it chose."""

    run_id: str
    status: RunStatusName
    title: str
    objective: str
    objective_value: float | None = Field(json_schema_extra=declared("fraction"))
    sensor_count: int = Field(json_schema_extra=declared("count"), description="How many sensors the run selected")
    parameters: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None


class SensorPlacementRunPage(Page[SensorPlacementRunSummary]):
    """Sensor placement runs of the project, newest first (ties by run id)."""


class SelectedSensor(BaseModel):
    """One chosen sensor location, in rank order, with the objective it added (greedy marginal gain)."""

    rank: int = Field(json_schema_extra=declared("index"))
    element_type: str
    element_id: str
    marginal_gain: float | None = Field(json_schema_extra=declared("fraction"))


class SensorPlacementRunDetail(Page[SelectedSensor]):
    """One run: its fields, its scalar scores, and one page of its selected sensors in rank order
    (``total`` = every selected sensor). Array-valued scores (per-sensor or per-candidate lists) are left
    out and named in ``omitted_scores``: the per-sensor values are on the sensors themselves."""

    run: SensorPlacementRunSummary
    scores: dict[str, Any]
    omitted_scores: list[str]


class SensorPlacementRunListResult(ResultEnvelope[SensorPlacementRunPage]):
    pass


class SensorPlacementRunResult(ResultEnvelope[SensorPlacementRunDetail]):
    pass
