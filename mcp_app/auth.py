"""The HTTP bearer layer of ``/mcp`` (SPEC R-AUTH-1..5).

Written here rather than taken from the SDK, whose middleware deviates from RFC 6750 (it sends
``error="invalid_token"`` when no credentials were sent, puts no ``scope=`` in the challenge, and checks
scopes per endpoint, not per method — SDK_NOTES "Auth pieces").

- No credentials → 401 with ``WWW-Authenticate: Bearer resource_metadata="…", scope="…"`` and *no*
  error code (RFC 6750 §3.1).
- A token that fails verification → 401 ``error="invalid_token"``; that includes a credential that is
  not a b64token or longer than ``contexts.tokens.MAX_TOKEN_CHARS``.
- A malformed request — two ``Authorization`` headers, control characters in it — → 400
  ``error="invalid_request"`` (RFC 6750 §3.1). The scheme is matched case-insensitively and the
  ``1*SP`` between scheme and token may be several spaces (RFC 6750 §2.1, RFC 7235 §2.1); the token is
  read from this header only, never from the URL (R-AUTH-2).
- A valid token without the scope the JSON-RPC method needs → 403 ``error="insufficient_scope"`` naming
  the needed scope (RFC 6750 §3.1).
- The issuer's keys unreachable → 503 with a retryable "authentication temporarily unavailable" body
  (R-AUTH-5), never 401, never data.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from contexts import access
from contexts.authentication import bearer_challenge
from contexts.token_errors import AuthUnavailable, MalformedRequest, MissingToken, TokenError
from contexts.tokens import VerifiedToken, bearer_from_authorization, cached_verification, verify_token

SCOPE_CATALOG = access.SCOPE_CATALOG
SCOPE_QUERY = access.SCOPE_QUERY
SCOPE_CONTEXT_BIND = access.SCOPE_CONTEXT_BIND
SCOPES_SUPPORTED = [SCOPE_CATALOG, SCOPE_QUERY, SCOPE_CONTEXT_BIND]
# Which scope opens which method is decided by ``contexts.access.METHOD_SCOPES`` (the one access module).
# What a client should ask for to use this endpoint at all (advertised in the no-credentials challenge).
DEFAULT_CHALLENGE_SCOPE = f"{SCOPE_CATALOG} {SCOPE_QUERY}"


def protected_resource_metadata() -> dict[str, Any]:
    """The RFC 9728 document for ``/mcp`` (R-AUTH-1)."""
    return {
        "resource": settings.TJWATER_MCP_RESOURCE_URI,
        "authorization_servers": [settings.TJWATER_OIDC_ISSUER],
        "scopes_supported": SCOPES_SUPPORTED,
        "bearer_methods_supported": ["header"],
        "resource_name": "tjwater-mcp",
    }


class AuthFailure(Exception):
    """An HTTP answer the bearer layer gives instead of passing the request on."""

    def __init__(self, status: int, body: dict[str, Any], www_authenticate: str | None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.www_authenticate = www_authenticate

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"cache-control", b"no-store")]
        if self.www_authenticate:
            headers.append((b"www-authenticate", self.www_authenticate.encode()))
        if self.status == 503:
            headers.append((b"retry-after", b"5"))
        return headers

    def payload(self) -> bytes:
        return json.dumps(self.body).encode()


def authenticate_if_cached(authorization: str | None) -> VerifiedToken | None:
    """The verified token of this header if its verification is cached, else None (then call
    ``authenticate`` in a worker thread). Never blocks, never raises: safe on the event loop."""
    try:
        return cached_verification(bearer_from_authorization(authorization))
    except TokenError:
        return None


def authenticate(authorization: str | None) -> VerifiedToken:
    """Verify the ``Authorization`` header value or raise ``AuthFailure`` with the right answer."""
    try:
        return verify_token(bearer_from_authorization(authorization))
    except AuthUnavailable:
        raise AuthFailure(
            503,
            {
                "error": "temporarily_unavailable",
                "message": "Authentication is temporarily unavailable; retry shortly.",
                "retryable": True,
            },
            None,
        ) from None
    except MalformedRequest:
        raise AuthFailure(
            400,
            {
                "error": "invalid_request",
                "message": "Send one bearer token in one Authorization header.",
            },
            bearer_challenge(
                "invalid_request", scope=DEFAULT_CHALLENGE_SCOPE, description="The Authorization header is malformed."
            ),
        ) from None
    except MissingToken:
        raise AuthFailure(
            401,
            {"error": "unauthorized", "message": "A valid bearer token is required."},
            bearer_challenge(None, scope=DEFAULT_CHALLENGE_SCOPE),
        ) from None
    except TokenError:
        raise AuthFailure(
            401,
            {"error": "invalid_token", "message": "A valid bearer token is required."},
            bearer_challenge(
                "invalid_token", scope=DEFAULT_CHALLENGE_SCOPE, description="The access token is not valid."
            ),
        ) from None


def authorize_method(token: VerifiedToken, method: str | None) -> None:
    """Raise a 403 ``insufficient_scope`` unless one of the token's scopes opens ``method`` (R-AUTH-3)."""
    needed = access.missing_method_scope(token.scopes, method)
    if needed is None:
        return
    raise AuthFailure(
        403,
        {"error": "insufficient_scope", "message": f"This method needs the scope {needed}."},
        bearer_challenge("insufficient_scope", scope=needed, description=f"The {needed} scope is required."),
    )
