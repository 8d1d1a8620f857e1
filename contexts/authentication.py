"""Bearer authentication for the context REST API with the same validator as ``/mcp`` (R-AUTH-2).

It is used per view (there is no global REST authenticator): it verifies the ``Authorization: Bearer``
token with ``contexts.tokens`` and answers RFC 6750 challenges — 401 without an error code when no
credentials were sent (§3.1), 401 ``invalid_token`` for a bad token, 403 ``insufficient_scope`` with
the missing scope, and a retryable 503 when the issuer's keys cannot be fetched (R-AUTH-5). Tokens
are never logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from contexts.access import REST_ANALYSIS_SCOPE, REST_READ_SCOPE, SCOPE_CONTEXT_BIND
from contexts.token_errors import AuthUnavailable, InvalidToken, MissingToken
from contexts.tokens import VerifiedToken, bearer_from_authorization, verify_token

BIND_SCOPE = SCOPE_CONTEXT_BIND


@dataclass(frozen=True, slots=True)
class TokenUser:
    """The DRF ``request.user`` of a bearer-authenticated request: just the verified token."""

    token: VerifiedToken
    is_authenticated: bool = True
    is_anonymous: bool = False


def resource_metadata_url() -> str:
    """The RFC 9728 §3.1 metadata URL of the protected resource (the well-known path inserted between
    host and the resource's path), named in every challenge so a client can discover the issuer.
    Shared by the context API and ``/mcp`` (mcp_app.auth)."""
    resource_uri: str = settings.TJWATER_MCP_RESOURCE_URI
    parts = urlsplit(resource_uri)
    path = parts.path if parts.path != "/" else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-protected-resource{path}", "", ""))


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bearer_challenge(error: str | None = None, *, scope: str | None = None, description: str | None = None) -> str:
    """An RFC 6750 §3 ``WWW-Authenticate: Bearer`` challenge. No ``error`` when no credentials were
    sent (§3.1); ``scope`` names what the client should ask for."""
    params = [f"resource_metadata={_quote(resource_metadata_url())}"]
    if scope:
        params.append(f"scope={_quote(scope)}")
    if error:
        params.append(f"error={_quote(error)}")
        if description:
            params.append(f"error_description={_quote(description)}")
    return "Bearer " + ", ".join(params)


class AuthenticationUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "AUTH_UNAVAILABLE"
    default_detail = "Authentication is temporarily unavailable; retry shortly."


class InvalidTokenFailed(exceptions.AuthenticationFailed):
    default_code = "INVALID_TOKEN"
    default_detail = "The bearer token is not valid."


class TokenRequired(exceptions.NotAuthenticated):
    default_code = "AUTHENTICATION_REQUIRED"
    default_detail = "A bearer token is required."


class InsufficientScope(exceptions.PermissionDenied):
    default_code = "INSUFFICIENT_SCOPE"
    default_detail = "The bearer token lacks the scope this operation needs."

    def __init__(self, scope: str) -> None:
        super().__init__()
        self.scope = scope


class BearerTokenAuthentication(BaseAuthentication):
    """DRF authentication through the MCP token validator. A missing token raises (there is no
    anonymous access to these views), so the challenge never depends on a later permission check."""

    def authenticate(self, request: Request) -> tuple[TokenUser, VerifiedToken]:
        header = request.META.get("HTTP_AUTHORIZATION")
        try:
            raw = bearer_from_authorization(header)
            token = verify_token(raw)
        except MissingToken as exc:
            raise TokenRequired() from exc
        except InvalidToken as exc:
            raise InvalidTokenFailed() from exc
        except AuthUnavailable as exc:
            raise AuthenticationUnavailable() from exc
        return TokenUser(token=token), token

    def authenticate_header(self, request: Request) -> str:
        return bearer_challenge()


class HasBindScope(BasePermission):
    """The token carries ``mcp.context.bind`` (R-AUTH-3); otherwise 403 ``insufficient_scope``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        token = request.auth
        if not isinstance(token, VerifiedToken):
            raise TokenRequired()
        if BIND_SCOPE not in token.scopes:
            raise InsufficientScope(BIND_SCOPE)
        return True


class HasApiReadScope(BasePermission):
    """The REST data API needs an API-audience token with ``api.read`` (``contexts.access.REST_READ_SCOPE``):
    a token with an empty scope reads nothing; otherwise 403 ``insufficient_scope``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        token = request.auth
        if not isinstance(token, VerifiedToken):
            raise TokenRequired()
        if REST_READ_SCOPE not in token.scopes:
            raise InsufficientScope(REST_READ_SCOPE)
        return True


class HasAnalysisRunScope(BasePermission):
    """The REST POSTs that start or cancel analysis runs need ``api.analysis.run``
    (``contexts.access.REST_ANALYSIS_SCOPE``) on an API-audience token; otherwise 403 ``insufficient_scope``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        token = request.auth
        if not isinstance(token, VerifiedToken):
            raise TokenRequired()
        if REST_ANALYSIS_SCOPE not in token.scopes:
            raise InsufficientScope(REST_ANALYSIS_SCOPE)
        return True
