"""The query layer's application errors (STYLE "errors"; the base classes are in ``contexts.errors``)."""

from __future__ import annotations

from contexts.errors import ApplicationError


class QueryTimeout(ApplicationError):
    code = "QUERY_TIMEOUT"
    http_status = 504
    retryable = True
    default_message = "The query exceeded its time budget; narrow it and try again."


class CapabilityGap(ApplicationError):
    """A legacy feature this server does not provide, answered explicitly rather than as empty data."""

    code = "CAPABILITY_NOT_AVAILABLE"
    default_message = "This capability is not available on this server."


class AnalysisRunWithoutSeries(ApplicationError):
    """The analysis run has no series to read (it failed, or has not finished): answered explicitly, so
    an empty result never reads as "the scenario had no effect"."""

    code = "ANALYSIS_RUN_HAS_NO_SERIES"
    http_status = 409
    default_message = "This analysis run has no series; get_analysis_run shows its status."
