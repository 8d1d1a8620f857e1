"""The analyses' refusals: stable codes, a sentence, and whether trying again can help."""

from __future__ import annotations

from contexts.errors import ApplicationError, InvalidParameter


class CostLimit(ApplicationError):
    """The run would cost more than the project allows (per run, or what is left of today): the estimate
    is in the details. Not retryable as asked (a smaller window or fewer elements may pass)."""

    code = "COST_LIMIT"
    http_status = 422
    retryable = False


class ComputeOff(ApplicationError):
    """Analyses are off for this project (the default): ``project_compute SLUG --enable`` turns them on."""

    code = "COMPUTE_NOT_ENABLED"
    http_status = 409
    retryable = False


class StorageLimit(ApplicationError):
    """The run's series would exceed the project's stored-series cap (details: the rows and the cap)."""

    code = "STORAGE_LIMIT"
    http_status = 422
    retryable = False


class InvalidArgument(InvalidParameter):
    """A submission's argument is wrong (an unknown id, a value out of range, a time outside the window):
    the message and ``details["field"]`` name it; nothing is queued. Issue 42 names this code for the
    analyses; it is an ``InvalidParameter`` to every edge (400, not retryable)."""

    code = "INVALID_ARGUMENT"
