"""Errors of investigation evidence (SPEC §8, R-EVID; the base classes are in ``contexts.errors``)."""

from __future__ import annotations

from contexts.errors import ApplicationError, InvalidParameter


class RequestKeyRequired(InvalidParameter):
    """A task-purpose call without ``_meta["cn.tjwater/requestKey"]`` (or with an unusable one). The MCP
    edge answers it as a JSON-RPC -32602 naming the key (a protocol-level client error, not a result)."""

    code = "REQUEST_KEY_REQUIRED"
    meta_key = "cn.tjwater/requestKey"
    default_message = 'Calls in an investigation context need _meta["cn.tjwater/requestKey"] (1-200 characters).'


class RequestKeyReused(ApplicationError):
    """The request key was already used in this session and run for a different tool or parameters
    (R-EVID-2): a retry must repeat the call exactly; a new call needs a new key."""

    code = "REQUEST_KEY_REUSED"
    http_status = 409
    default_message = "This request key was already used for a different call; use a new request key."


class RequestInProgress(ApplicationError):
    """Another call with the same request key is still running and did not finish while this one
    waited; retrying the same call later returns its saved evidence."""

    code = "REQUEST_IN_PROGRESS"
    http_status = 409
    retryable = True
    default_message = "A call with this request key is still running; retry the same call shortly."


class EvidenceNotSaved(ApplicationError):
    """Saving the evidence failed, so the call failed (R-EVID-1: never "success now, evidence later").
    The receipt is released: the same call with the same request key may be retried."""

    code = "EVIDENCE_NOT_SAVED"
    http_status = 503
    retryable = True
    default_message = "The result could not be saved as evidence, so it is not returned; retry the same call."
