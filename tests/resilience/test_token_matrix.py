"""The token matrix of the resilience suite (issue 9): every way a bearer credential can be wrong, sent
over real HTTP to a real uvicorn server, each refused with the right status and RFC 6750 error.

The server trusts the embedded dev issuer (the default test settings); the valid baseline is a token the
dev issuer signs, forgeries are signed with keys of our own. Expected answers (RFC 6750 §3.1):

- no credentials (none, another scheme, a token only in the URL) → 401, a challenge without ``error``;
- a token that fails any check → 401 ``error="invalid_token"``;
- a malformed request (two Authorization headers, control characters) → 400 ``error="invalid_request"``;
- a valid token without the scope the method needs → 403 ``error="insufficient_scope"``.

Accepted on purpose, because the grammar allows them: a lowercase or uppercase scheme (RFC 7235 §2.1,
case-insensitive) and several spaces after it (RFC 6750 §2.1 ``"Bearer" 1*SP b64token``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

from contexts import dev_issuer
from tests.support.mcp_http import PROTOCOL_VERSION, envelope

pytestmark = pytest.mark.e2e

CLIENT = "tjwater-agent-mcp"
SCOPES = "mcp.catalog.read mcp.query"
_OWN_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(**overrides: Any) -> dict[str, Any]:
    """The claims of a valid dev-issuer token, with ``overrides`` (None removes a claim)."""
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": settings.TJWATER_DEV_ISSUER_ID,
        "sub": "matrix-subject",
        "aud": [settings.TJWATER_MCP_AUDIENCE],
        "azp": CLIENT,
        "scope": SCOPES,
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "jti": secrets.token_urlsafe(8),
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def dev_kid() -> str:
    return dev_issuer.public_jwk()["kid"]


def signed(claim_set: dict[str, Any], *, key: Any = None, kid: str | None = None, alg: str = "RS256") -> str:
    """A compact JWS signed with the dev issuer's key (default) or ``key``."""
    return jwt.encode(
        claim_set, key or dev_issuer.private_key(), algorithm=alg, headers={"kid": kid or dev_kid(), "typ": "JWT"}
    )


def unsigned(claim_set: dict[str, Any]) -> str:
    """``alg: none`` with an empty signature."""
    header = b64url(json.dumps({"alg": "none", "kid": dev_kid(), "typ": "JWT"}).encode())
    return f"{header}.{b64url(json.dumps(claim_set).encode())}."


def hs256_with_public_key(claim_set: dict[str, Any]) -> str:
    """The algorithm-confusion forgery: HMAC-SHA256 keyed with the issuer's public key (PEM)."""
    public_pem = (
        dev_issuer.private_key()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = b64url(json.dumps({"alg": "HS256", "kid": dev_kid(), "typ": "JWT"}).encode())
    payload = b64url(json.dumps(claim_set).encode())
    signature = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64url(signature)}"


def es256_header_on_rsa_signature(claim_set: dict[str, Any]) -> str:
    """A genuine RS256 token whose header claims ES256 (key type / algorithm mismatch)."""
    genuine = signed(claim_set)
    header = b64url(json.dumps({"alg": "ES256", "kid": dev_kid(), "typ": "JWT"}).encode())
    return header + "." + genuine.split(".", 1)[1]


def tampered_payload(claim_set: dict[str, Any]) -> str:
    """A genuine signature over other claims (the subject rewritten after signing)."""
    header, _, signature = signed(claim_set).split(".")
    return f"{header}.{b64url(json.dumps({**claim_set, 'sub': 'someone-else'}).encode())}.{signature}"


@dataclass
class Answer:
    status: int
    headers: httpx2.Headers
    text: str

    def challenge(self) -> str:
        return self.headers.get("www-authenticate", "")


def post(
    url: str,
    authorization: list[str],
    *,
    method: str = "tools/list",
    query: str = "",
) -> Answer:
    """One MCP POST with exactly the given Authorization header values (0, 1 or several)."""
    params: dict[str, Any] = {"_meta": envelope()}
    headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", PROTOCOL_VERSION),
        ("mcp-method", method),
    ]
    if method == "tools/call":
        params.update({"name": "list_elements", "arguments": {"element_type": "pipe", "context_handle": "x" * 43}})
        headers.append(("mcp-name", "list_elements"))
    headers += [("authorization", value) for value in authorization]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = httpx2.post(f"{url}/mcp{query}", headers=headers, content=body, timeout=15)
    return Answer(status=response.status_code, headers=response.headers, text=response.text)


def bearer(token: str) -> list[str]:
    return [f"Bearer {token}"]


@dataclass(frozen=True)
class Case:
    """One row: how the request is made, and the answer it must get (status, RFC 6750 error or None)."""

    request: Callable[[str], Answer]
    status: int
    error: str | None


REFUSED: dict[str, Case] = {
    "no-credentials": Case(lambda url: post(url, []), 401, None),
    "basic-scheme": Case(lambda url: post(url, ["Basic dXNlcjpwYXNz"]), 401, None),
    "token-in-query-string": Case(lambda url: post(url, [], query=f"?access_token={signed(claims())}"), 401, None),
    "alg-none": Case(lambda url: post(url, bearer(unsigned(claims()))), 401, "invalid_token"),
    "hs256-signed-with-public-key": Case(
        lambda url: post(url, bearer(hs256_with_public_key(claims()))), 401, "invalid_token"
    ),
    "es256-header-on-rsa-key": Case(
        lambda url: post(url, bearer(es256_header_on_rsa_signature(claims()))), 401, "invalid_token"
    ),
    "unknown-kid": Case(
        lambda url: post(url, bearer(signed(claims(), key=_OWN_KEY, kid="unknown-kid"))), 401, "invalid_token"
    ),
    "untrusted-issuer-key-with-matching-kid": Case(
        lambda url: post(url, bearer(signed(claims(), key=_OWN_KEY))), 401, "invalid_token"
    ),
    "payload-changed-after-signing": Case(
        lambda url: post(url, bearer(tampered_payload(claims()))), 401, "invalid_token"
    ),
    "expired": Case(lambda url: post(url, bearer(signed(claims(exp=int(time.time()) - 120)))), 401, "invalid_token"),
    "no-exp": Case(lambda url: post(url, bearer(signed(claims(exp=None)))), 401, "invalid_token"),
    "exp-not-a-number": Case(
        lambda url: post(url, bearer(signed(claims(exp=str(int(time.time()) + 300))))), 401, "invalid_token"
    ),
    "nbf-in-the-future": Case(
        lambda url: post(url, bearer(signed(claims(nbf=int(time.time()) + 600)))), 401, "invalid_token"
    ),
    "iat-in-the-future": Case(
        lambda url: post(url, bearer(signed(claims(iat=int(time.time()) + 600)))), 401, "invalid_token"
    ),
    "wrong-iss": Case(
        lambda url: post(url, bearer(signed(claims(iss="https://evil.example/realm")))), 401, "invalid_token"
    ),
    "wrong-aud": Case(lambda url: post(url, bearer(signed(claims(aud="account")))), 401, "invalid_token"),
    "aud-array-without-ours": Case(
        lambda url: post(url, bearer(signed(claims(aud=["account", "other-api"])))), 401, "invalid_token"
    ),
    "missing-azp": Case(lambda url: post(url, bearer(signed(claims(azp=None)))), 401, "invalid_token"),
    "unlisted-azp": Case(lambda url: post(url, bearer(signed(claims(azp="some-other-client")))), 401, "invalid_token"),
    "missing-sub": Case(lambda url: post(url, bearer(signed(claims(sub=None)))), 401, "invalid_token"),
    "scope-as-json-list": Case(
        lambda url: post(url, bearer(signed(claims(scope=["mcp.catalog.read", "mcp.query"])))), 401, "invalid_token"
    ),
    "oversize-token": Case(lambda url: post(url, bearer(signed(claims(padding="x" * 9000)))), 401, "invalid_token"),
    "not-a-jwt": Case(lambda url: post(url, bearer("not-a-jwt")), 401, "invalid_token"),
    "bearer-without-token": Case(lambda url: post(url, ["Bearer"]), 401, "invalid_token"),
    "two-tokens-in-one-header": Case(
        lambda url: post(url, [f"Bearer {signed(claims())} {signed(claims())}"]), 401, "invalid_token"
    ),
    "two-authorization-headers": Case(
        lambda url: post(url, [f"Bearer {signed(claims())}", f"Bearer {signed(claims())}"]), 400, "invalid_request"
    ),
    "tab-after-scheme": Case(lambda url: post(url, [f"Bearer\t{signed(claims())}"]), 400, "invalid_request"),
    "missing-scope-on-tools-call": Case(
        lambda url: post(url, bearer(signed(claims(scope=None))), method="tools/call"), 403, "insufficient_scope"
    ),
    "catalog-scope-on-tools-call": Case(
        lambda url: post(url, bearer(signed(claims(scope="mcp.catalog.read"))), method="tools/call"),
        403,
        "insufficient_scope",
    ),
    "no-scope-on-tools-list": Case(lambda url: post(url, bearer(signed(claims(scope="")))), 403, "insufficient_scope"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused(live_server_url: str, name: str) -> None:
    case = REFUSED[name]
    answer = case.request(live_server_url)
    assert answer.status == case.status, (answer.status, answer.text)
    challenge = answer.challenge()
    assert challenge.startswith("Bearer "), challenge
    assert 'resource_metadata="' in challenge
    if case.error is None:
        assert "error=" not in challenge  # RFC 6750 §3.1: no error code without credentials
    else:
        assert f'error="{case.error}"' in challenge
        assert json.loads(answer.text)["error"] == case.error
    assert answer.headers.get("cache-control") == "no-store"
    assert '"result"' not in answer.text and "tools" not in answer.text
    assert "eyJ" not in answer.text and "eyJ" not in challenge  # no token echoed back


def test_matrix_is_at_least_twenty_refusals() -> None:
    assert len(REFUSED) >= 20


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param("Bearer {}", id="baseline"),
        pytest.param("bearer {}", id="lowercase-scheme"),
        pytest.param("BEARER {}", id="uppercase-scheme"),
        pytest.param("Bearer  {}", id="two-spaces"),
    ],
)
def test_accepted(live_server_url: str, authorization: str) -> None:
    answer = post(live_server_url, [authorization.format(signed(claims()))])
    assert answer.status == 200, answer.text
    assert "list_elements" in answer.text


def test_a_valid_token_in_the_url_next_to_the_header_is_not_what_authenticates(live_server_url: str) -> None:
    # The header decides: a forged token in the query string never authenticates, a valid one there
    # never stands in for a missing or bad header.
    good = signed(claims())
    assert post(live_server_url, bearer("not-a-jwt"), query=f"?access_token={good}").status == 401
    assert post(live_server_url, [], query=f"?access_token={good}&token={good}").status == 401
