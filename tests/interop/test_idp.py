"""The test provider has Keycloak's shape (devtools/idp/provider.mjs): what the other interop tests rely on.

Tokens are verified here with PyJWT against the provider's published JWKS, independently of our server.
"""

from __future__ import annotations

from typing import Any

import httpx2
import jwt
import pytest

from tests.support.idp import AGENT_CLIENT_ID, USERS, IdentityProvider

ALICE_SUB, _ = USERS["alice"]


def decode(idp: IdentityProvider, token: str, audience: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of a token whose RS256 signature, issuer and audience check out."""
    key = jwt.PyJWKClient(idp.jwks_url).get_signing_key_from_jwt(token)
    claims = jwt.decode(token, key, algorithms=["RS256"], audience=audience, issuer=idp.issuer)
    return jwt.get_unverified_header(token), claims


def test_discovery_uses_keycloak_realm_paths(idp: IdentityProvider) -> None:
    document = httpx2.get(f"{idp.issuer}/.well-known/openid-configuration", timeout=10).json()
    assert idp.issuer.endswith("/realms/tjwater")
    assert document["issuer"] == idp.issuer
    for key, name in [
        ("authorization_endpoint", "auth"),
        ("token_endpoint", "token"),
        ("jwks_uri", "certs"),
        ("userinfo_endpoint", "userinfo"),
        ("end_session_endpoint", "logout"),
    ]:
        assert document[key] == idp.endpoint(name)
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in document["grant_types_supported"]
    assert document["code_challenge_methods_supported"] == ["S256"]


def test_client_credentials_token_is_a_keycloak_style_catalog_token(idp: IdentityProvider) -> None:
    # Asking for more than the catalog scope does not get it: a service identity only lists tools.
    token = idp.client_credentials_token(scope="mcp.catalog.read mcp.query")
    header, claims = decode(idp, token, "tjwater-mcp")
    assert (header["alg"], header["typ"]) == ("RS256", "JWT")
    assert claims["azp"] == AGENT_CLIENT_ID
    assert claims["scope"] == "mcp.catalog.read"


def test_token_exchange_keeps_the_user_and_changes_client_audience_and_scope(idp: IdentityProvider) -> None:
    user_token = idp.user_token("alice")
    _, user = decode(idp, user_token, "urn:tjwater:host")
    assert (user["sub"], user["azp"]) == (ALICE_SUB, "tjwater-host")
    assert user["realm_access"]["roles"] == ["tjwater-operator"]

    header, exchanged = decode(idp, idp.exchange(user_token), "tjwater-mcp")
    assert header["typ"] == "JWT"
    assert (exchanged["sub"], exchanged["azp"], exchanged["aud"]) == (ALICE_SUB, AGENT_CLIENT_ID, "tjwater-mcp")
    assert set(exchanged["scope"].split()) == {"mcp.query", "mcp.context.bind"}


def test_resource_indicator_becomes_the_audience(idp: IdentityProvider) -> None:
    _, mcp = decode(idp, idp.client_credentials_token(resource="http://127.0.0.1:9/mcp"), "tjwater-mcp")
    assert mcp["aud"] == "tjwater-mcp"
    _, other = decode(
        idp, idp.client_credentials_token(resource="https://other.example/api"), "https://other.example/api"
    )
    assert other["aud"] == "https://other.example/api"


def test_exchange_refuses_a_token_that_is_not_from_this_realm(idp: IdentityProvider) -> None:
    forged = jwt.encode(
        {"sub": ALICE_SUB, "iss": idp.issuer}, "not-the-realm-key-but-long-enough-for-hs256", algorithm="HS256"
    )
    with pytest.raises(httpx2.HTTPStatusError) as refused:
        idp.exchange(forged)
    assert refused.value.response.status_code == 400
    assert refused.value.response.json()["error"] == "invalid_grant"


def test_admin_endpoints_need_the_shared_secret(idp: IdentityProvider) -> None:
    response = httpx2.post(f"http://127.0.0.1:{idp.port}/admin/rotate", timeout=10)
    assert response.status_code == 404
    wrong = httpx2.post(
        f"http://127.0.0.1:{idp.port}/admin/rotate", headers={"Authorization": "Bearer wrong"}, timeout=10
    )
    assert wrong.status_code == 404
