"""Who is asking on the REST data API (``/api/v1/projects/{project}/…``, SPEC acceptance 8).

The REST edge has no context handles: a bearer JWT for the API audience (``TJWATER_API_AUDIENCE``,
same issuer, same validator class and key cache sharing as ``/mcp``) names the principal, and the live
membership of that principal in the project named by the URL gives the permissions — re-read on every
request, so a revoked membership stops the next request. The resulting ``QueryScope`` is what the query
services receive, exactly as on ``/mcp``; which tools it may use is decided by ``contexts.access``.
"""

from __future__ import annotations

import dataclasses
import threading

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.request import Request

from contexts.authentication import (
    AuthenticationUnavailable,
    BearerTokenAuthentication,
    InvalidTokenFailed,
    TokenRequired,
    TokenUser,
)
from contexts.errors import NotFound
from contexts.models import Membership
from contexts.scope import QueryScope
from contexts.token_errors import AuthUnavailable, InvalidToken, MissingToken
from contexts.tokens import TokenValidator, VerifiedToken, bearer_from_authorization, config_from_settings

#: The ``purpose`` of a REST scope (never a context purpose: REST reads no task or evidence).
REST_PURPOSE = "rest"

_validator: TokenValidator | None = None
_lock = threading.Lock()


def api_validator() -> TokenValidator:
    """The process's validator for API tokens: the MCP validator's configuration with the API audience
    and client allowlist."""
    global _validator
    with _lock:
        if _validator is None:
            config = dataclasses.replace(
                config_from_settings(),
                audience=settings.TJWATER_API_AUDIENCE,
                allowed_clients=tuple(settings.TJWATER_API_ALLOWED_CLIENTS),
            )
            _validator = TokenValidator(config)
        return _validator


def reset_api_validator() -> None:
    global _validator
    with _lock:
        _validator = None


class ApiBearerAuthentication(BearerTokenAuthentication):
    """DRF authentication of the data API: like the context API's, for the API audience."""

    def authenticate(self, request: Request) -> tuple[TokenUser, VerifiedToken]:
        try:
            token = api_validator().verify(bearer_from_authorization(request.META.get("HTTP_AUTHORIZATION")))
        except MissingToken as exc:
            raise TokenRequired() from exc
        except AuthUnavailable as exc:
            raise AuthenticationUnavailable() from exc
        except InvalidToken as exc:
            raise InvalidTokenFailed() from exc
        return TokenUser(token=token), token


def member_scope(*, token: VerifiedToken, project_slug: str) -> QueryScope:
    """The scope of a REST request: the token's principal and its active membership in the project (one
    query). An unknown project, an unknown principal and no active membership are the same ``NotFound``,
    so a project's existence never leaks."""
    membership = (
        Membership.objects.select_related("project")
        .filter(
            principal__issuer=token.issuer,
            principal__subject=token.subject,
            project__slug=project_slug,
            revoked_at__isnull=True,
        )
        .only(
            "principal_id",
            "project_id",
            "permissions",
            "project__slug",
            "project__unit_system",
            "project__timezone",
            "project__quality_type",
            "project__headloss_formula",
        )
        .first()
    )
    if membership is None:
        raise NotFound("No such project.")
    return QueryScope(
        principal_id=membership.principal_id,
        issuer=token.issuer,
        subject=token.subject,
        client_id=token.client_id,
        project_id=membership.project_id,
        project_slug=membership.project.slug,
        permissions=frozenset(membership.permissions),
        purpose=REST_PURPOSE,
        unit_system=membership.project.unit_system,
        timezone=membership.project.timezone or "UTC",
        quality_type=membership.project.quality_type,
        headloss_formula=membership.project.headloss_formula,
    )


# drf-spectacular's OpenApiExtension.__init_subclass__ has no annotations (third-party, untyped).
class BearerJwtScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """OpenAPI security scheme of the REST API: a bearer JWT from the trusted issuer (RFC 6750)."""

    target_class = "contexts.rest.ApiBearerAuthentication"
    name = "apiBearer"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


class ContextBearerJwtScheme(BearerJwtScheme):  # type: ignore[no-untyped-call]  # as BearerJwtScheme
    """The context API's bearer JWT (the MCP audience, scope ``mcp.context.bind``)."""

    target_class = "contexts.authentication.BearerTokenAuthentication"
    name = "mcpBearer"
