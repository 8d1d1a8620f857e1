"""The operator rules of the admin SSO backend (tjwater/oidc.py), in process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.exceptions import SuspiciousOperation
from django.test import override_settings
from django.urls import include, path

from tjwater.oidc import OperatorOIDCBackend, claim_at, has_operator_role, operator_group, sign_out, signed_out


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"realm_access": {"roles": ["tjwater-operator", "other"]}}, True),
        ({"realm_access": {"roles": ["other"]}}, False),
        ({"realm_access": {"roles": "tjwater-operator"}}, True),
        ({"realm_access": {}}, False),
        ({"realm_access": "tjwater-operator"}, False),
        ({"roles": ["tjwater-operator"]}, False),
        ({}, False),
    ],
)
def test_operator_role_is_read_at_the_configured_claim_path(claims: dict[str, object], expected: bool) -> None:
    assert has_operator_role(claims) is expected


@override_settings(TJWATER_OIDC_ROLES_CLAIM="resource_access.tjwater-admin.roles", TJWATER_OIDC_OPERATOR_ROLE="ops")
def test_operator_role_path_and_name_are_settings() -> None:
    assert has_operator_role({"resource_access": {"tjwater-admin": {"roles": ["ops"]}}})
    assert not has_operator_role({"realm_access": {"roles": ["ops", "tjwater-operator"]}})
    assert claim_at({"a": {"b": 1}}, "a.b.c") is None


@pytest.mark.django_db
def test_operator_group_can_view_and_change_the_product_apps_and_nothing_else() -> None:
    group = operator_group()
    codenames = set(group.permissions.values_list("content_type__app_label", "codename"))
    assert ("contexts", "view_querycontext") in codenames
    assert ("contexts", "change_membership") in codenames
    assert not {app for app, _ in codenames} - {"contexts", "queries", "evidence"}
    assert not {code for _, code in codenames if code.startswith(("add_", "delete_"))}
    assert not group.permissions.filter(content_type__app_label="auth").exists()
    # Idempotent: a second login recomputes the same set.
    assert set(operator_group().permissions.all()) == set(Permission.objects.filter(group=group))


ISSUER = "https://sso.example.org/realms/tjwater"
CLIENT = "tjwater-admin"


@pytest.fixture
def backend_and_key() -> Iterator[tuple[OperatorOIDCBackend, rsa.RSAPrivateKey]]:
    with override_settings(
        OIDC_RP_CLIENT_ID=CLIENT, OIDC_OP_ISSUER=ISSUER, OIDC_OP_JWKS_ENDPOINT=f"{ISSUER}/protocol/openid-connect/certs"
    ):
        yield OperatorOIDCBackend(), rsa.generate_private_key(public_exponent=65537, key_size=2048)


def id_token(key: rsa.RSAPrivateKey, **overrides: object) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": CLIENT, "sub": "s-1", "iat": now, "exp": now + 60, "nonce": "n", **overrides}
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256")


def test_id_token_with_our_issuer_and_audience_is_accepted(
    backend_and_key: tuple[OperatorOIDCBackend, rsa.RSAPrivateKey],
) -> None:
    backend, key = backend_and_key
    with override_settings(OIDC_OP_ISSUER=ISSUER):
        assert backend._verify_jws(id_token(key), key.public_key())["sub"] == "s-1"


@pytest.mark.parametrize(
    "overrides",
    [
        {"aud": "another-client"},
        {"iss": "https://evil.example.org/realms/tjwater"},
        {"azp": "another-client", "aud": [CLIENT, "another-client"]},
        {"exp": int(time.time()) - 3600},
        {"iss": None},
        {"aud": None},
    ],
)
def test_id_token_for_another_audience_or_issuer_is_refused(
    backend_and_key: tuple[OperatorOIDCBackend, rsa.RSAPrivateKey], overrides: dict[str, object]
) -> None:
    backend, key = backend_and_key
    with override_settings(OIDC_OP_ISSUER=ISSUER), pytest.raises(SuspiciousOperation):
        backend._verify_jws(id_token(key, **overrides), key.public_key())


def recheck_callback(error: str) -> tuple[object, object]:
    """The callback answering a re-check (prompt=none) with ``error``, for a signed-in operator."""
    from django.contrib.auth import SESSION_KEY, get_user_model
    from django.contrib.sessions.middleware import SessionMiddleware
    from django.test import RequestFactory

    from tjwater.oidc import OperatorCallbackView

    user = get_user_model().objects.create_user("op-recheck", is_staff=True)
    request = RequestFactory().get("/oidc/callback/", {"error": error, "state": "s"})
    SessionMiddleware(lambda r: None).process_request(request)
    request.session[SESSION_KEY] = str(user.pk)
    request.session["oidc_login_next"] = "/admin/contexts/project/"
    request.user = user
    return request, OperatorCallbackView.as_view()(request)


# The OIDC routes of tjwater/urls.py (present only when OIDC_* is configured), for the callback's links.
urlpatterns = [
    path("admin/", admin.site.urls),
    path("oidc/sign-out/", sign_out, name="tjwater_sign_out"),
    path("oidc/signed-out/", signed_out, name="tjwater_signed_out"),
    path("oidc/", include("mozilla_django_oidc.urls")),
]


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_refused_recheck_ends_the_admin_session_with_the_refusal_page() -> None:
    """SessionRefresh sends an operator's browser through prompt=none; when the provider refuses (here
    access_denied) the callback answers with the refusal page — and the admin session ends."""
    from django.contrib.auth import SESSION_KEY

    request, response = recheck_callback("access_denied")
    assert response.status_code == 403  # type: ignore[attr-defined]
    assert 'data-reason="provider_error"' in response.content.decode()  # type: ignore[attr-defined]
    assert SESSION_KEY not in request.session  # type: ignore[attr-defined]
    assert not request.user.is_authenticated  # type: ignore[attr-defined]


@pytest.mark.django_db
@pytest.mark.urls(__name__)
@pytest.mark.parametrize("error", ["login_required", "interaction_required"])
def test_a_recheck_finding_the_provider_session_ended_asks_to_sign_in_again(error: str) -> None:
    """Signed out at the provider is not "not an operator": the browser goes to the provider's login
    (interactive, no prompt=none), and comes back to the page the re-check interrupted."""
    from django.contrib.auth import SESSION_KEY

    request, response = recheck_callback(error)
    assert response.status_code == 302  # type: ignore[attr-defined]
    assert response["Location"] == "/oidc/authenticate/?next=%2Fadmin%2Fcontexts%2Fproject%2F"  # type: ignore[index]
    assert SESSION_KEY not in request.session  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_signing_in_again_keeps_the_session_auth_hash() -> None:
    """Every sign-in (the periodic re-check included) refreshes the profile; it must not rewrite the
    password hash, from which Django derives the session auth hash: that signed the operator out."""
    backend = OperatorOIDCBackend()
    claims = {"sub": "op-again", "name": "Olga Operator", "email": "olga@tjwater.test", "preferred_username": "olga"}
    user = backend.create_user(claims)
    first = (user.password, user.get_session_auth_hash())
    again = backend.update_user(user, {**claims, "email": "olga@utility.test"})
    again.refresh_from_db()
    assert (again.password, again.get_session_auth_hash()) == first
    profile = (again.get_full_name(), again.email, again.has_usable_password())
    assert profile == ("Olga Operator", "olga@utility.test", False)
