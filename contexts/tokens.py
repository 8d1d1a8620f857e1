"""Bearer-token verification for ``/mcp`` and the context REST API (SPEC R-AUTH-2).

INTERFACE STUB — implemented by the MCP-endpoint work (issue 4). The names below are the contract
other modules code against; keep them.

It lives in ``contexts`` (not ``mcp_app``) because both the MCP endpoint and the context REST API
verify tokens, and nothing may import ``mcp_app`` (SPEC §0 dependency direction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """The claims of a token that passed every check. Never carries the raw token."""

    issuer: str
    subject: str
    client_id: str  # the `azp` claim
    scopes: frozenset[str]
    audience: tuple[str, ...]
    expires_at: int
    claims: dict[str, Any] = field(default_factory=dict, repr=False)


class TokenError(Exception):
    """Base of token failures; ``www_authenticate_error`` is the RFC 6750 error code or None."""

    www_authenticate_error: str | None = "invalid_token"


class MissingToken(TokenError):
    """No credentials were sent: RFC 6750 §3.1 says the challenge carries no error code."""

    www_authenticate_error = None


class InvalidToken(TokenError):
    """Bad signature, issuer, audience, client, time claims or algorithm (→ 401 invalid_token)."""


class AuthUnavailable(TokenError):
    """The issuer's keys could not be fetched: retryable, never a 401 and never data (R-AUTH-5)."""

    www_authenticate_error = None


def bearer_from_authorization(header_value: str | None) -> str:
    """Extract the token from an ``Authorization: Bearer …`` header value or raise ``MissingToken``/
    ``InvalidToken``."""
    raise NotImplementedError


def verify_token(raw_token: str) -> VerifiedToken:
    """Verify a raw bearer token with the process-wide validator (cached JWKS)."""
    raise NotImplementedError
