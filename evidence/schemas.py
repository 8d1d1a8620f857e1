"""Result models of the task tools (``get_task_context``, ``get_task_evidence``): the R-PAGE-6 envelope
around one page of a JSON document selected by ``data_path`` (R-PAGE-4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from queries.schemas.common import ResultEnvelope
from queries.units import declared

JsonKind = Literal["object", "array", "string", "number", "boolean", "null"]


class JsonPage(BaseModel):
    """One page of the JSON value at ``data_path``, cut inside PostgreSQL (R-PAGE-4): an array by index
    order (``items`` are elements), an object by key in C collation (``items`` are ``{key, value}``), a
    string by Unicode character (``text``); a number, boolean or null whole (``value``). ``total`` counts
    elements, keys or characters (null for a scalar); ``offset``/``limit`` are in the same unit."""

    data_path: list[str]
    kind: JsonKind
    total: int | None = Field(json_schema_extra=declared("count"))
    offset: int = Field(json_schema_extra=declared("index"))
    limit: int = Field(json_schema_extra=declared("count"))
    has_more: bool
    page_bytes: int = Field(
        json_schema_extra=declared("byte"),
        description="Size of this page's JSON text in bytes (the 8 MiB ceiling applies).",
    )
    items: list[Any] | None = None
    text: str | None = None
    value: Any = None


class EvidencePage(JsonPage):
    """A page of a saved evidence snapshot, with what identifies the whole document."""

    evidence_id: str
    evidence_uri: str
    tool: str
    snapshot_source: str
    run_id: int = Field(json_schema_extra=declared("index"))
    created_at: datetime
    byte_size: int = Field(
        json_schema_extra=declared("byte"), description="Size of the whole document in its RFC 8785 form."
    )
    sha256: str = Field(description="SHA-256 (hex) of the whole document's RFC 8785 form.")


class TaskEvidenceResult(ResultEnvelope[EvidencePage]):
    pass


class RunSummary(BaseModel):
    run_id: int = Field(json_schema_extra=declared("index"))
    sequence: int = Field(json_schema_extra=declared("index"))
    status: str
    lease_expires_at: datetime | None


class RevisionSummary(BaseModel):
    revision: int = Field(json_schema_extra=declared("index"))
    created_at: datetime


class TaskContextData(BaseModel):
    """The bound task: a fixed summary, plus (with ``section``) one page of one section of one report
    revision. ``is_full_report`` is always false: this is a preview, never the full report."""

    task_id: int = Field(json_schema_extra=declared("index"))
    title: str
    status: str
    bound_run_id: int = Field(json_schema_extra=declared("index"))
    current_run: RunSummary | None
    report_revisions: list[RevisionSummary]
    report_revisions_total: int = Field(json_schema_extra=declared("count"))
    report_revision: int | None = Field(
        json_schema_extra=declared("index"), description="The revision this answer reads (null: none bound)."
    )
    revision_source: Literal["pinned", "bound_to_context", "none"]
    sections: list[str]
    section: str | None = None
    page: JsonPage | None = None
    is_full_report: Literal[False] = False
    note: str


class TaskContextResult(ResultEnvelope[TaskContextData]):
    pass
