"""The refusals of bearer-token verification (``contexts.tokens``, ``contexts.issuer_keys``)."""

from __future__ import annotations


class TokenError(Exception):
    """Base of token failures; ``www_authenticate_error`` is the RFC 6750 error code or None."""

    www_authenticate_error: str | None = "invalid_token"


class MissingToken(TokenError):
    """No credentials were sent: RFC 6750 §3.1 says the challenge carries no error code."""

    www_authenticate_error = None


class InvalidToken(TokenError):
    """Bad signature, issuer, audience, client, time claims or algorithm (→ 401 invalid_token)."""


class MalformedRequest(InvalidToken):
    """The request itself is malformed — several credentials (repeated ``Authorization`` headers) or
    control characters in the header: RFC 6750 §3.1 ``invalid_request``, answered 400 by ``/mcp``.
    A subclass of ``InvalidToken`` so that a caller that does not distinguish it still refuses (401)."""

    www_authenticate_error = "invalid_request"


class AuthUnavailable(TokenError):
    """The issuer's keys could not be fetched: retryable, never a 401 and never data (R-AUTH-5)."""

    www_authenticate_error = None
