"""Result data of get_workbench_runtime."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from queries.schemas.common import ResultEnvelope
from queries.units import declared


class DataSourceStatus(BaseModel):
    """How current one of the workbench's data sources is: when it last synced, its age in seconds at
    the snapshot, and the workbench's own verdict (``fresh``, ``stale``, …). Null when unknown."""

    name: str
    last_sync: datetime | None
    freshness_s: int | None = Field(json_schema_extra=declared("s"))
    status: str | None


class WorkbenchRuntime(BaseModel):
    """The project's workbench state at ``captured_at``: the simulation clock, the active scenario (null
    when none), the mode, and the data sources sorted by name (only the one asked for, if any)."""

    simulation_clock: datetime
    active_scenario: str | None
    mode: str
    captured_at: datetime
    data_sources: list[DataSourceStatus]


class WorkbenchRuntimeResult(ResultEnvelope[WorkbenchRuntime]):
    pass
