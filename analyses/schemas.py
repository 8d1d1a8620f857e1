"""The answers of the analysis tools: the job answer of a submit (the same body on MCP and REST) and of a
cancel."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.analysis import AnalysisRunDetail
from queries.schemas.common import ResultEnvelope
from queries.units import declared


class RunEstimate(BaseModel):
    """What the run is estimated to cost before it runs (``queries.runs.cost``, calibrated on this machine)."""

    cpu_seconds: float = Field(json_schema_extra=declared("s"))
    peak_memory_mb: float = Field(json_schema_extra=declared("own_unit"), description="MiB")
    scenarios: int = Field(json_schema_extra=declared("count"))
    hydraulic_steps: int = Field(json_schema_extra=declared("count"))
    quality_steps: int = Field(json_schema_extra=declared("count"))
    calibrated_at: str


class RunAccepted(BaseModel):
    """A run accepted (or the earlier run of the same question, ``created: false``): follow it with
    ``get_analysis_run`` every ``poll_after_ms`` and read its results with the analysis tools."""

    run_id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    estimate: RunEstimate
    poll_after_ms: int = Field(json_schema_extra=declared("count"), description="milliseconds")
    created: bool


class RunAcceptedResult(ResultEnvelope[RunAccepted | AnalysisRunDetail]):
    """A ``run_*`` tool's result: the acceptance on a plain call; for a client that follows the call as an MCP
    task (``mcp_app.tasks_extension``) the task's result is the finished run inlined, ``get_analysis_run``'s
    answer — so the tool's outputSchema admits both and a client validating the task's result passes."""


class RunCancelled(BaseModel):
    """The run after the cancel: ``cancelled`` (it was queued) or still ``running`` until it stops at
    its next check, within seconds; it writes nothing either way."""

    run_id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    status_message: str


class RunCancelledResult(ResultEnvelope[RunCancelled]):
    pass
