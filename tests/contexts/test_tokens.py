"""The token claim matrix (R-AUTH-2) against a real in-process issuer over HTTP: discovery document and
JWKS served by ``http.server``, keys rotated at will."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contexts.tokens import (
    AuthUnavailable,
    InvalidToken,
    MissingToken,
    TokenValidator,
    ValidatorConfig,
    bearer_from_authorization,
)

AUDIENCE = "tjwater-mcp"
CLIENT = "tjwater-agent-mcp"


class Issuer:
    """A tiny OpenID issuer: a discovery document, a JWKS, and a counter of JWKS fetches."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.jwks_fetches = 0
        self.down = False
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if issuer.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path == "/realm/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.base}/realm/certs"}
                elif self.path == "/realm/certs":
                    issuer.jwks_fetches += 1
                    body = {"keys": [issuer.public_jwk(kid) for kid in issuer.published]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.base}/realm"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def add_key(self, kid: str, kind: str = "RSA", publish: bool = True) -> None:
        self.keys[kid] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
        if publish:
            self.published.append(kid)

    def public_jwk(self, kid: str) -> dict[str, Any]:
        key = self.keys[kid]
        algo = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
        return {**algo.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}

    def token(self, kid: str = "k1", alg: str | None = None, **overrides: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": "alice",
            "aud": [AUDIENCE, "account"],
            "azp": CLIENT,
            "scope": "mcp.catalog.read mcp.query",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
        }
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})

    def validator(self, **config: Any) -> TokenValidator:
        return TokenValidator(
            ValidatorConfig(
                issuer=self.url,
                audience=AUDIENCE,
                allowed_clients=[CLIENT],
                http_timeout_s=2.0,
                **{"refetch_cooldown_s": 0.0, **config},
            )
        )


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    server.add_key("k1")
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_valid_token_yields_claims(issuer: Issuer) -> None:
    verified = issuer.validator().verify(issuer.token())
    assert verified.subject == "alice"
    assert verified.client_id == CLIENT
    assert verified.scopes == frozenset({"mcp.catalog.read", "mcp.query"})
    assert AUDIENCE in verified.audience
    assert verified.issuer == issuer.url


def test_es256_is_accepted(issuer: Issuer) -> None:
    issuer.add_key("ec1", kind="EC")
    assert issuer.validator().verify(issuer.token(kid="ec1")).subject == "alice"


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"iss": "http://evil.example/realm"}, id="wrong-issuer"),
        pytest.param({"aud": ["account"]}, id="audience-missing"),
        pytest.param({"aud": None}, id="no-aud"),
        pytest.param({"azp": "someone-else"}, id="client-not-allowed"),
        pytest.param({"azp": None}, id="no-azp"),
        pytest.param({"exp": int(time.time()) - 120}, id="expired"),
        pytest.param({"exp": None}, id="no-exp"),
        pytest.param({"nbf": int(time.time()) + 600}, id="not-yet-valid"),
        pytest.param({"iat": int(time.time()) + 600}, id="issued-in-future"),
        pytest.param({"iat": None}, id="no-iat"),
        pytest.param({"sub": None}, id="no-sub"),
    ],
)
def test_claim_rejections(issuer: Issuer, overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidToken):
        issuer.validator().verify(issuer.token(**overrides))


def test_clock_skew_within_60s_is_tolerated(issuer: Issuer) -> None:
    now = int(time.time())
    validator = issuer.validator()
    assert validator.verify(issuer.token(iat=now + 30, nbf=now + 30)).subject == "alice"
    assert validator.verify(issuer.token(exp=now - 30)).subject == "alice"
    with pytest.raises(InvalidToken):
        validator.verify(issuer.token(iat=now + 90))
    with pytest.raises(InvalidToken):
        validator.verify(issuer.token(exp=now - 90))


def test_bad_signature_is_rejected(issuer: Issuer) -> None:
    issuer.add_key("k2", publish=False)
    forged = issuer.token(kid="k2")
    # Same kid as the published key, signed with another private key.
    header, payload, signature = forged.split(".")
    good_header = issuer.token().split(".")[0]
    with pytest.raises(InvalidToken):
        issuer.validator().verify(f"{good_header}.{payload}.{signature}")


def test_none_and_hmac_algorithms_are_refused(issuer: Issuer) -> None:
    validator = issuer.validator()
    claims = jwt.decode(issuer.token(), options={"verify_signature": False})
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})
    with pytest.raises(InvalidToken):
        validator.verify(unsigned)
    # HMAC keyed with the public key (the classic algorithm-confusion attack).
    public_pem = issuer.public_jwk("k1")["n"].encode()
    hmac = jwt.encode(claims, public_pem, algorithm="HS256", headers={"kid": "k1"})
    with pytest.raises(InvalidToken):
        validator.verify(hmac)


def test_alg_must_match_key_type(issuer: Issuer) -> None:
    issuer.add_key("ec1", kind="EC")
    rsa_token = issuer.token(kid="k1")
    header = json.dumps({"alg": "ES256", "kid": "k1", "typ": "JWT"}).encode()
    swapped = jwt.utils.base64url_encode(header).decode() + "." + rsa_token.split(".", 1)[1]
    with pytest.raises(InvalidToken):
        issuer.validator().verify(swapped)


def test_key_rotation_picks_up_new_key_on_unknown_kid(issuer: Issuer) -> None:
    validator = issuer.validator()
    validator.verify(issuer.token(kid="k1"))
    assert issuer.jwks_fetches == 1
    issuer.add_key("k2")  # the issuer rotates: publishes k2, then drops k1
    issuer.published.remove("k1")
    assert validator.verify(issuer.token(kid="k2")).subject == "alice"
    assert issuer.jwks_fetches == 2
    with pytest.raises(InvalidToken):
        validator.verify(issuer.token(kid="k1"))  # k1 is gone after the refetch


def test_unknown_kid_refetch_is_rate_limited(issuer: Issuer) -> None:
    validator = issuer.validator(refetch_cooldown_s=60.0)
    validator.verify(issuer.token())
    for _ in range(5):
        with pytest.raises(InvalidToken):
            validator.verify(_with_kid(issuer, "nope"))
    assert issuer.jwks_fetches == 1  # forged kids did not hammer the issuer


def _with_kid(issuer: Issuer, kid: str) -> str:
    token = issuer.token()
    header = json.dumps({"alg": "RS256", "kid": kid, "typ": "JWT"}).encode()
    return jwt.utils.base64url_encode(header).decode() + "." + token.split(".", 1)[1]


def test_unknown_kid_after_cooldown_refetches(issuer: Issuer) -> None:
    issuer.add_key("k2", publish=False)  # generated up front: key generation must not eat the cooldown
    validator = issuer.validator(refetch_cooldown_s=1.0)
    validator.verify(issuer.token())
    issuer.published.append("k2")
    with pytest.raises(InvalidToken):  # within the cooldown: no refetch, unknown key
        validator.verify(issuer.token(kid="k2"))
    time.sleep(1.05)
    assert validator.verify(issuer.token(kid="k2")).subject == "alice"


def test_jwks_unreachable_is_auth_unavailable(issuer: Issuer) -> None:
    issuer.down = True
    with pytest.raises(AuthUnavailable):
        issuer.validator().verify(issuer.token())


def test_explicit_jwks_url_skips_discovery(issuer: Issuer) -> None:
    validator = issuer.validator(jwks_url=f"{issuer.base}/realm/certs")
    assert validator.verify(issuer.token()).subject == "alice"


def test_malformed_tokens(issuer: Issuer) -> None:
    validator = issuer.validator()
    for raw in ("not-a-jwt", "a.b.c", ""):
        with pytest.raises(InvalidToken):
            validator.verify(raw)


def test_bearer_from_authorization() -> None:
    assert bearer_from_authorization("Bearer abc.def.ghi") == "abc.def.ghi"
    assert bearer_from_authorization("bearer abc") == "abc"
    for missing in (None, "", "Basic dXNlcjpwdw=="):
        with pytest.raises(MissingToken):
            bearer_from_authorization(missing)
    with pytest.raises(InvalidToken):
        bearer_from_authorization("Bearer ")


def test_shared_jwks_copy_serves_other_processes_until_it_expires(issuer: Issuer) -> None:
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        first = issuer.validator(shared_cache_url=settings.REDIS_URL, cache_s=1.0)
        first.verify(issuer.token())
        assert issuer.jwks_fetches == 1
        # Another process (a validator with an empty memory) takes the fresh shared copy...
        second = issuer.validator(shared_cache_url=settings.REDIS_URL, cache_s=1.0)
        assert second.verify(issuer.token()).subject == "alice"
        assert issuer.jwks_fetches == 1
        # ...but not a stale one: after the cache lifetime it goes to the issuer again.
        time.sleep(1.1)
        third = issuer.validator(shared_cache_url=settings.REDIS_URL, cache_s=1.0)
        third.verify(issuer.token())
        assert issuer.jwks_fetches == 2
    finally:
        client.delete(issuer.validator().shared_cache_key)
        client.close()


def test_shared_cache_down_falls_back_to_the_issuer(issuer: Issuer) -> None:
    from tests.conftest import free_port

    validator = issuer.validator(shared_cache_url=f"redis://127.0.0.1:{free_port()}/0")
    assert validator.verify(issuer.token()).subject == "alice"
    assert issuer.jwks_fetches == 1
