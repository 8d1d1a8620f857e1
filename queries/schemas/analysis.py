"""Result data of the analysis family (list_analysis_runs, get_analysis_run, list_analysis_results,
query_analysis_series, query_analysis_values).

Runs are what was computed and how it ended; their series are scenario values of the run (origin
``analysis_run``) — neither measurements nor the model baseline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.schemas.network import ElementType
from queries.schemas.result_payloads import page_schema
from queries.units import BY_FIELD, declared

RunStatusName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
NodeField = Literal["pressure", "head", "demand", "quality", "leak_demand"]
LinkField = Literal["flow", "velocity", "headloss", "status", "setting"]


class AnalysisRunSummary(BaseModel):
    """One analysis run as listed: what kind, how it ended, when."""

    run_id: str
    kind: str
    status: RunStatusName
    title: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_code: str | None = Field(description="EPANET's or the engine's code when the run failed")


class AnalysisRunPage(Page[AnalysisRunSummary]):
    """Runs of the project, newest first (ties by run id)."""


class ResultTypeCount(BaseModel):
    result_type: str
    count: int = Field(json_schema_extra=declared("count"))


class ModelVersionRef(BaseModel):
    """The model version a run computed on: its number in the project, the SHA-256 of its .inp text and
    the file it was imported from."""

    version: int = Field(json_schema_extra=declared("index"))
    sha256: str
    file_name: str


class RunCost(BaseModel):
    """A run's cost: estimated before it was queued, or measured once it ended (null fields: not known)."""

    cpu_seconds: float | None = Field(default=None, json_schema_extra=declared("s"))
    peak_memory_mb: float | None = Field(default=None, json_schema_extra=declared("own_unit"), description="MiB")
    peak_rss_mb: float | None = Field(default=None, json_schema_extra=declared("own_unit"), description="MiB")
    wall_seconds: float | None = Field(default=None, json_schema_extra=declared("s"))
    series_rows: int | None = Field(default=None, json_schema_extra=declared("count"))
    write_seconds: float | None = Field(default=None, json_schema_extra=declared("s"),
                                        description="estimated: the writing of its series rows")  # fmt: skip


class AnalysisRunDetail(AnalysisRunSummary):
    """One run whole: its parameters and summary, why it failed (if it did), which result types it has
    and whether it has node/link series to query; what it computed from (the model version, the engine,
    the hash of its canonical inputs: null for a run no engine computed, such as the demo's) and, while it
    runs, its progress."""

    parameters: dict[str, Any]
    summary: dict[str, Any]
    error_message: str | None
    result_types: list[ResultTypeCount]
    has_series: bool
    model_version: ModelVersionRef | None
    engine: str | None = Field(description="the engine and its version, e.g. EPANET 2.2.0 (WNTR 1.5.0)")
    input_sha256: str | None = Field(description="SHA-256 of the run's canonical inputs (RFC 8785 JSON)")
    progress: float | None = Field(json_schema_extra=declared("fraction"), description="0–1 while it runs")
    status_message: str | None
    estimate: RunCost | None = Field(default=None, description="the cost estimated before it was queued")
    cost: RunCost | None = Field(default=None, description="what it cost (once it ended)")


class ElementRef(BaseModel):
    element_type: str
    element_id: str


class AnalysisResultItem(BaseModel):
    """One result of a run, typed by ``result_type`` (e.g. ``leak``, ``affected_nodes``,
    ``isolation_segment``) with its payload and the elements it refers to. The page's schema says what
    each kind's payload of each result type holds (``queries.schemas.result_payloads``); every quantity
    in a payload is in the project's units, named in the payload's ``units``."""

    sequence: int = Field(json_schema_extra=declared("index"))
    result_type: str
    payload: dict[str, Any]
    element_refs: list[ElementRef]


class AnalysisResultPage(Page[AnalysisResultItem]):
    """Results of one run in sequence order, optionally of one ``result_type`` only; ``kind`` is the run's
    (its results' payloads are typed by kind and result type)."""

    model_config = ConfigDict(json_schema_extra=page_schema)

    run_id: str
    kind: str
    result_type: str | None


class SeriesPoint(BaseModel):
    time: datetime
    value: float | None = Field(json_schema_extra=declared(BY_FIELD))


class AnalysisSeriesData(BaseModel):
    """One field of one element over a time window, as the run computed it (every reported instant in
    ``[start, end)``)."""

    run_id: str
    run_status: RunStatusName
    element_type: ElementType
    element_id: str
    field: str
    points: list[SeriesPoint]


class ElementValue(BaseModel):
    element_id: str
    value: float | None = Field(json_schema_extra=declared(BY_FIELD))


class AnalysisValuesPage(Page[ElementValue]):
    """One field of every element of a type at one reported instant of the run (``time``: the run's
    instant at or before ``requested_time``), ordered by element id."""

    run_id: str
    element_type: ElementType
    field: str
    requested_time: datetime
    time: datetime | None


class AnalysisRunListResult(ResultEnvelope[AnalysisRunPage]):
    pass


class AnalysisRunResult(ResultEnvelope[AnalysisRunDetail]):
    pass


class AnalysisResultListResult(ResultEnvelope[AnalysisResultPage]):
    pass


class AnalysisSeriesResult(ResultEnvelope[AnalysisSeriesData]):
    pass


class AnalysisValuesResult(ResultEnvelope[AnalysisValuesPage]):
    pass
