"""Operator single sign-on for the Django admin (SPEC §0 "auth (admin)", issue 6).

mozilla-django-oidc runs the authorization code flow (PKCE S256 and a nonce, turned on in settings).
Three gaps of the library are closed here (SDK_NOTES "Auth pieces"):

- its id_token check skips ``aud`` and ``iss``: ``_verify_jws`` adds both (and ``exp``/``iat`` stay
  checked by PyJWT);
- anyone the provider knows would become a Django user: ``verify_claims`` admits only principals whose
  token carries the configured operator role (``TJWATER_OIDC_OPERATOR_ROLE`` at
  ``TJWATER_OIDC_ROLES_CLAIM``, Keycloak's ``realm_access.roles`` by default);
- a refused login would redirect back to ``/admin/``, which redirects to the provider again — a loop:
  the callback view answers a refused login with a plain 403 page instead of a redirect.

Users are matched by the provider's ``sub`` (stored as the username), never by e-mail, so an account
at the provider cannot take over a local account that happens to share an address.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

logger = logging.getLogger(__name__)

# Apps whose admin pages operators use (contexts holds the revoke action).
OPERATOR_APPS = ("contexts", "queries", "evidence")
OPERATOR_ACTIONS = ("view", "change")

REFUSAL_REASONS = {
    "not_operator": "Your account is not an operator of this service, so it cannot use the admin.",
    "provider_error": "The sign-in provider did not complete the sign-in.",
    "invalid_response": "The sign-in provider's answer could not be verified.",
    "no_user": "The sign-in did not complete.",
    "not_configured": "Admin sign-in needs the OpenID provider (OIDC_* settings); password sign-in is "
    "available only in development (DEBUG=True).",
}


def claim_at(claims: dict[str, Any], path: str) -> object:
    """The value at a dotted claim path (``realm_access.roles``), or None."""
    value: object = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def has_operator_role(claims: dict[str, Any]) -> bool:
    """Whether the claims carry the configured operator role at the configured claim path."""
    roles = claim_at(claims, settings.TJWATER_OIDC_ROLES_CLAIM)
    if isinstance(roles, str):
        roles = roles.split()
    return isinstance(roles, list) and settings.TJWATER_OIDC_OPERATOR_ROLE in roles


def operator_group() -> Group:
    """The group that gives operators view/change access to the product's admin pages. Permissions are
    (re)computed at each login so models added later are covered."""
    group, _ = Group.objects.get_or_create(name=settings.TJWATER_OIDC_OPERATOR_GROUP)
    codenames = [f"{action}_" for action in OPERATOR_ACTIONS]
    permissions = [
        permission
        for permission in Permission.objects.filter(content_type__app_label__in=OPERATOR_APPS).order_by("id")[:1000]
        if permission.codename.startswith(tuple(codenames))
    ]
    group.permissions.set(permissions)
    return group


class OperatorOIDCBackend(OIDCAuthenticationBackend):
    """Authenticates operators through the OpenID provider; everyone else is refused at
    ``verify_claims``. Operators become staff (never superusers) in the operator group."""

    def _verify_jws(self, payload: str | bytes, key: Any) -> dict[str, Any]:
        # The library decodes with verify_aud=False and no issuer: check both (OpenID Connect Core
        # §3.1.3.7 items 2-3), plus azp when present (item 5).
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation("unexpected id_token algorithm")
        try:
            claims: dict[str, Any] = jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_OP_ISSUER,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
                leeway=30,
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation("id_token verification failed") from exc
        if claims.get("azp", self.OIDC_RP_CLIENT_ID) != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("id_token was issued to another client")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        claims: dict[str, Any] = super().get_userinfo(access_token, id_token, payload)
        # OpenID Connect Core §5.3.2: the userinfo `sub` MUST equal the id_token's (the library skips it).
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo subject differs from the id_token subject")
        # Keycloak's realm-roles mapper may put the roles in the id_token and not in userinfo: the
        # verified id_token's role claim is used when userinfo has none.
        top = settings.TJWATER_OIDC_ROLES_CLAIM.split(".", 1)[0]
        if top not in claims and top in payload:
            claims[top] = payload[top]
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        if not claims.get("sub"):
            return False
        if not has_operator_role(claims):
            # Not an error of the flow: tell the callback view why, so it shows the refusal page.
            self.request.tjwater_oidc_refusal = "not_operator"  # type: ignore[attr-defined]
            logger.info("admin sign-in refused: operator role missing")
            return False
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[AbstractBaseUser]:
        return self.UserModel.objects.filter(username=self.get_username(claims))

    def get_username(self, claims: dict[str, Any]) -> str:
        return str(claims["sub"])

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> AbstractBaseUser:
        user = get_user_model().objects.create_user(self.get_username(claims))
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user: Any, claims: dict[str, Any]) -> AbstractBaseUser:
        user.email = str(claims.get("email") or "")
        user.first_name = str(claims.get("preferred_username") or claims.get("name") or "")[:150]
        user.is_staff = True  # verify_claims admitted only operators
        user.is_active = True
        user.set_unusable_password()
        user.save()
        user.groups.add(operator_group())
        return user


class OperatorCallbackView(OIDCAuthenticationCallbackView):
    """The OIDC callback: a refused or failed sign-in gets a 403 page, not a redirect to ``/admin/``
    (which would send the browser straight back to the provider)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            response: HttpResponse = super().get(request)
        except SuspiciousOperation:
            # State mismatch, bad id_token signature, issuer or audience: no details to the browser.
            logger.warning("admin sign-in rejected: the provider's response failed verification")
            request.tjwater_oidc_refusal = "invalid_response"  # type: ignore[attr-defined]
            return self.login_failure()
        return response

    def login_failure(self) -> HttpResponse:
        # A failed sign-in — including the periodic re-check (SessionRefresh, prompt=none) of an operator
        # whose role was removed or who was signed out at the provider — ends any admin session here.
        auth.logout(self.request)
        reason = getattr(self.request, "tjwater_oidc_refusal", None)
        if reason is None:
            reason = "provider_error" if self.request.GET.get("error") else "no_user"
        return render(
            self.request,
            "tjwater/oidc_refused.html",
            {"reason": reason, "message": REFUSAL_REASONS[reason]},
            status=403,
        )


def admin_login(request: HttpRequest) -> HttpResponse:
    """``/admin/login/`` when OIDC admin login is configured: send the browser to the provider.

    With ``DEBUG=True`` a local superuser can still use the password form at ``?local=1``; with
    ``DEBUG=False`` there is no local password login at all (the ModelBackend is not configured)."""
    from django.contrib import admin

    if settings.DEBUG and request.GET.get("local") == "1":
        return admin.site.login(request)
    next_url = request.GET.get("next") or reverse("admin:index")
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = reverse("admin:index")
    return HttpResponseRedirect(f"{reverse('oidc_authentication_init')}?{urlencode({'next': next_url})}")


def admin_login_disabled(request: HttpRequest) -> HttpResponse:
    """``/admin/login/`` with ``DEBUG=False`` and no OIDC configured: say so instead of showing a
    password form that can never succeed (no authentication backend is configured then)."""
    return render(
        request,
        "tjwater/oidc_refused.html",
        {"reason": "not_configured", "message": REFUSAL_REASONS["not_configured"]},
        status=403,
    )
