"""Operator single sign-on for the Django admin (SPEC §0 "auth (admin)", issue 6).

mozilla-django-oidc runs the authorization code flow (PKCE S256 and a nonce, turned on in settings).
Gaps of the library are closed here (SDK_NOTES "Auth pieces"):

- its id_token check skips ``aud`` and ``iss``: ``_verify_jws`` adds both (and ``exp``/``iat`` stay
  checked by PyJWT);
- anyone the provider knows would become a Django user: ``verify_claims`` admits only principals whose
  token carries the configured operator role (``TJWATER_OIDC_OPERATOR_ROLE`` at
  ``TJWATER_OIDC_ROLES_CLAIM``, Keycloak's ``realm_access.roles`` by default);
- a refused login would redirect back to ``/admin/``, which redirects to the provider again — a loop:
  the callback view answers a refused login with a plain 403 page instead of a redirect; a re-check that
  found the provider session ended (``login_required``) sends the browser to the provider's login instead,
  since that operator needs to sign in again, not the operator role;
- signing out ended only the Django session: ``sign_out`` also ends the provider's (RP-initiated logout).

The operator's profile is refreshed at every sign-in without touching the password hash (it feeds the
session auth hash: changing it signed the operator out at every re-check).

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
from django.contrib.auth.models import AbstractBaseUser, Group, Permission, User
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST
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
            self.request.tjwater_oidc_refusal = "not_operator"
            logger.info("admin sign-in refused: operator role missing")
            return False
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[AbstractBaseUser]:
        users: QuerySet[AbstractBaseUser] = self.UserModel.objects.filter(username=self.get_username(claims))
        return users

    def get_username(self, claims: dict[str, Any]) -> str:
        return str(claims["sub"])

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> AbstractBaseUser:
        user = get_user_model().objects.create_user(self.get_username(claims))
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user: User, claims: dict[str, Any]) -> AbstractBaseUser:
        """Refresh the operator's profile from the claims — at first sign-in and at every re-check.

        The password hash is touched only when the account still has a usable password: every call of
        ``set_unusable_password()`` writes a new random hash, and Django's session auth hash is derived
        from it, so doing it on each sign-in ended every other session of the operator (the re-check's
        own session included: ~10 redirects, then "403 CSRF verification failed" in an open form)."""
        name = str(claims.get("name") or "")
        first, _, last = name.partition(" ")
        fields = {
            "email": str(claims.get("email") or ""),
            "first_name": (first or str(claims.get("preferred_username") or ""))[:150],
            "last_name": last[:150],
            "is_staff": True,  # verify_claims admitted only operators
            "is_active": True,
        }
        changed = [field for field, value in fields.items() if getattr(user, field) != value]
        for field in changed:
            setattr(user, field, fields[field])
        if user.has_usable_password():
            user.set_unusable_password()
            changed.append("password")
        if changed:
            user.save(update_fields=changed)
        user.groups.add(operator_group())
        return user


# Errors a provider answers to a silent (prompt=none) authorization when it would have to ask the user
# something — above all that its own session is gone (OpenID Connect Core §3.1.2.6). The periodic
# re-check gets them when the operator was signed out at the provider: that calls for signing in again,
# not for the "not an operator" refusal.
SIGN_IN_AGAIN_ERRORS = frozenset(
    {"login_required", "interaction_required", "consent_required", "account_selection_required"}
)


OIDC_BACKEND = "tjwater.oidc.OperatorOIDCBackend"


class OperatorCallbackView(OIDCAuthenticationCallbackView):
    """The OIDC callback. A refused or failed sign-in gets a 403 page, not a redirect to ``/admin/`` (which
    would send the browser straight back to the provider); a re-check that found the provider session
    ended sends the browser to the provider's login form, back to the page the operator was on."""

    def get(self, request: HttpRequest) -> HttpResponse:
        # The page the re-check interrupted: the library's error path flushes the session before
        # login_failure() runs.
        self.next_url = request.session.get("oidc_login_next") or reverse("admin:index")
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
        if reason is None and self.request.GET.get("error") in SIGN_IN_AGAIN_ERRORS:
            logger.info("admin session re-check: the provider session has ended; asking to sign in again")
            return HttpResponseRedirect(sign_in_url(self.next_url))
        if reason is None:
            reason = "provider_error" if self.request.GET.get("error") else "no_user"
        # The provider still has this account's session: offer to end it, so another account can sign in.
        context = {"reason": reason, "message": REFUSAL_REASONS[reason], "sign_out_url": reverse("tjwater_sign_out")}
        return admin_page(self.request, "tjwater/oidc_refused.html", context, status=403)


def admin_page(request: HttpRequest, template: str, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
    """A page of ours in the admin's look (its stylesheet, header and branding), for someone who is not
    signed in: not ``each_context`` (its app list asks the authentication backends, and production
    without OIDC has none)."""
    from django.contrib import admin

    site = admin.site
    branding = {"site_header": site.site_header, "site_title": site.site_title, "site_url": site.site_url}
    return render(request, template, {**branding, "has_permission": False, **context}, status=status)


def sign_in_url(next_url: str) -> str:
    """The interactive sign-in at the provider (never prompt=none), coming back to ``next_url``."""
    return f"{reverse('oidc_authentication_init')}?{urlencode({'next': next_url})}"


def end_session_url(request: HttpRequest) -> str:
    """Where signing out sends the browser: the provider's end-session endpoint (OpenID Connect
    RP-Initiated Logout 1.0 §2) with the session's id_token as ``id_token_hint`` when there is one, else
    our ``client_id`` (the provider then asks the user to confirm), and /oidc/signed-out/ as the
    ``post_logout_redirect_uri``. Without an end-session endpoint: /oidc/signed-out/ directly."""
    signed_out = reverse("tjwater_signed_out")
    endpoint = settings.OIDC_OP_END_SESSION_ENDPOINT
    if not endpoint:
        return signed_out
    params = {"post_logout_redirect_uri": request.build_absolute_uri(signed_out)}
    id_token = request.session.get("oidc_id_token")
    if id_token:
        params["id_token_hint"] = str(id_token)
    else:
        params["client_id"] = settings.OIDC_RP_CLIENT_ID
    return f"{endpoint}?{urlencode(params)}"


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    """``POST /admin/logout/`` (the admin's "Log out") and ``POST /oidc/sign-out/`` (the refusal page's
    "Sign out"): end the admin session here, then the provider's session (RP-initiated logout), so that
    "sign in again" on a shared control-room PC asks for a password. A POST with the CSRF token, like
    Django's own logout: a link elsewhere cannot sign an operator out."""
    # A local superuser's session (DEBUG only) has no provider session to end.
    local = request.user.is_authenticated and request.session.get(auth.BACKEND_SESSION_KEY) != OIDC_BACKEND
    target = reverse("tjwater_signed_out") if local else end_session_url(request)  # before the flush
    auth.logout(request)
    return HttpResponseRedirect(target)


def signed_out(request: HttpRequest) -> HttpResponse:
    """Where the provider sends the browser back after signing out: says so, and offers to sign in."""
    context = {"sign_in_url": reverse("admin:index"), "provider_sign_out": bool(settings.OIDC_OP_END_SESSION_ENDPOINT)}
    return admin_page(request, "tjwater/signed_out.html", context)


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
    return HttpResponseRedirect(sign_in_url(next_url))


def admin_login_disabled(request: HttpRequest) -> HttpResponse:
    """``/admin/login/`` with ``DEBUG=False`` and no OIDC configured: say so instead of showing a
    password form that can never succeed (no authentication backend is configured then)."""
    context = {"reason": "not_configured", "message": REFUSAL_REASONS["not_configured"]}
    return admin_page(request, "tjwater/oidc_refused.html", context, status=403)
