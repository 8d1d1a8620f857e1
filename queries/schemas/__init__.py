"""Pydantic models of query results (SPEC §1 "queries"): the R-PAGE-6 envelope, the R-PAGE-1 page,
and one data model per tool family. Services return these; the MCP layer dumps them as
``structuredContent`` and publishes their JSON Schema as each tool's ``outputSchema``."""

from queries.schemas.common import (
    DataGap,
    Origin,
    Page,
    PageInfo,
    PageRequest,
    ResultEnvelope,
    TimeWindow,
)

__all__ = ["DataGap", "Origin", "Page", "PageInfo", "PageRequest", "ResultEnvelope", "TimeWindow"]
