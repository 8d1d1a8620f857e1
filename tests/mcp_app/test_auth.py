"""``mcp_app.auth``, the bearer layer of ``/mcp`` (R-AUTH-1..5, RFC 6750), in-process with real tokens of
the development issuer: the answer for no credentials, a malformed header, a bad or oversized token, a
missing scope, and the RFC 9728 metadata. The same answers over HTTP are in tests/e2e/test_protocol.py."""

from __future__ import annotations

import pytest
from django.conf import settings

from contexts.tokens import MAX_TOKEN_CHARS
from mcp_app import auth
from tests.support.tokens import dev_token

pytestmark = pytest.mark.django_db


def _refusal(header: str | None) -> auth.AuthFailure:
    with pytest.raises(auth.AuthFailure) as refused:
        auth.authenticate(header)
    return refused.value


def test_no_credentials_is_a_challenge_without_an_error_code() -> None:
    for header in (None, "", "   ", "Basic dXNlcjpwYXNz"):  # another scheme is no bearer credentials
        failure = _refusal(header)
        assert failure.status == 401 and failure.body["error"] == "unauthorized"
        challenge = failure.www_authenticate or ""
        assert challenge.startswith("Bearer resource_metadata=")
        assert f'scope="{auth.DEFAULT_CHALLENGE_SCOPE}"' in challenge and "error=" not in challenge
        assert (b"cache-control", b"no-store") in failure.headers()


def test_a_valid_token_is_verified_whatever_the_scheme_case_and_spacing() -> None:
    token = dev_token("auth-unit", scopes=("mcp.query",))
    for header in (f"Bearer {token}", f"bearer {token}", f"BEARER    {token}"):
        verified = auth.authenticate(header)
        assert verified.subject == "auth-unit" and verified.scopes == frozenset({"mcp.query"})


def test_a_cached_verification_is_answered_without_verifying_again() -> None:
    token = dev_token("auth-cache")
    assert auth.authenticate_if_cached(f"Bearer {token}") is None  # never verified in this process
    verified = auth.authenticate(f"Bearer {token}")
    assert auth.authenticate_if_cached(f"Bearer {token}") == verified
    assert auth.authenticate_if_cached(None) is None and auth.authenticate_if_cached("Bearer a b") is None


@pytest.mark.parametrize(
    "header",
    [
        "Bearer abc\x01def",  # a control character
        "Bearer abc\ndef",
        "Bearer aaa.bbb.ccc, Bearer ddd.eee.fff",  # two Authorization headers joined by a comma
    ],
)
def test_a_malformed_header_is_400_invalid_request(header: str) -> None:
    failure = _refusal(header)
    assert failure.status == 400 and failure.body["error"] == "invalid_request"
    assert 'error="invalid_request"' in (failure.www_authenticate or "")


@pytest.mark.parametrize(
    "header",
    [
        "Bearer not a b64token",
        "Bearer ünïcode",
        "Bearer " + "a" * (MAX_TOKEN_CHARS + 1),  # refused before any parsing
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl",  # well formed, not ours
    ],
)
def test_a_bad_token_is_401_invalid_token(header: str) -> None:
    failure = _refusal(header)
    assert failure.status == 401 and failure.body["error"] == "invalid_token"
    assert 'error="invalid_token"' in (failure.www_authenticate or "")
    assert "eyJ" not in failure.payload().decode()  # the credential is never echoed


def test_a_method_needs_one_of_its_scopes() -> None:
    catalog_only = auth.authenticate(f"Bearer {dev_token('auth-scope', scopes=('mcp.catalog.read',))}")
    auth.authorize_method(catalog_only, "tools/list")  # opened by the catalog scope
    with pytest.raises(auth.AuthFailure) as refused:
        auth.authorize_method(catalog_only, "tools/call")
    failure = refused.value
    assert failure.status == 403 and failure.body["error"] == "insufficient_scope"
    assert 'error="insufficient_scope"' in (failure.www_authenticate or "")
    assert 'scope="mcp.query"' in (failure.www_authenticate or "")
    querying = auth.authenticate(f"Bearer {dev_token('auth-scope', scopes=('mcp.query',))}")
    auth.authorize_method(querying, "tools/call")


def test_a_503_answer_carries_retry_after_and_no_challenge() -> None:
    failure = auth.AuthFailure(503, {"error": "temporarily_unavailable", "retryable": True}, None)
    assert (b"retry-after", b"5") in failure.headers()
    assert not any(name == b"www-authenticate" for name, _ in failure.headers())


def test_the_protected_resource_metadata() -> None:
    document = auth.protected_resource_metadata()
    assert document["resource"] == settings.TJWATER_MCP_RESOURCE_URI
    assert document["authorization_servers"] == [settings.TJWATER_OIDC_ISSUER]
    assert document["bearer_methods_supported"] == ["header"]  # never a token in the URL (R-AUTH-2)
    assert set(document["scopes_supported"]) == {"mcp.catalog.read", "mcp.query", "mcp.context.bind"}
