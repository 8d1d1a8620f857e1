"""The token claim matrix (R-AUTH-2) against a real in-process issuer over HTTP: discovery document and
JWKS served by ``http.server``, keys rotated at will."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa

from contexts.token_errors import AuthUnavailable, InvalidToken, MalformedRequest, MissingToken
from contexts.tokens import MAX_TOKEN_CHARS, TokenValidator, bearer_from_authorization
from tests.support.mcp_http import mcp_request
from tests.support.servers import ServerProcess
from tests.support.tokens import AUDIENCE, CLIENT, Issuer
from tests.support.tokens import with_kid as _with_kid


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


#: A marker time for the parametrized claims below (see ``test_claim_rejections``).
NOW = 2_000_000_000


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"iss": "http://evil.example/realm"}, id="wrong-issuer"),
        pytest.param({"aud": ["account"]}, id="audience-missing"),
        pytest.param({"aud": None}, id="no-aud"),
        pytest.param({"azp": "someone-else"}, id="client-not-allowed"),
        pytest.param({"azp": None}, id="no-azp"),
        pytest.param({"exp": NOW - 120}, id="expired"),
        pytest.param({"exp": None}, id="no-exp"),
        pytest.param({"nbf": NOW + 600}, id="not-yet-valid"),
        pytest.param({"iat": NOW + 600}, id="issued-in-future"),
        pytest.param({"iat": None}, id="no-iat"),
        pytest.param({"sub": None}, id="no-sub"),
    ],
)
def test_claim_rejections(issuer: Issuer, overrides: dict[str, Any]) -> None:
    # Times are written relative to NOW and shifted to the moment the test runs: the parameters are built
    # at collection, and a long suite reaches this test minutes later.
    now = int(time.time())
    claims = {k: (v - NOW + now if isinstance(v, int) and abs(v - NOW) <= 3600 else v) for k, v in overrides.items()}
    with pytest.raises(InvalidToken):
        issuer.validator().verify(issuer.token(**claims))


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
    # RFC 7235 §2.1: the scheme is case-insensitive; RFC 6750 §2.1: "Bearer" 1*SP b64token.
    assert bearer_from_authorization("bearer abc") == "abc"
    assert bearer_from_authorization("BEARER abc") == "abc"
    assert bearer_from_authorization("Bearer  abc") == "abc"
    assert bearer_from_authorization("Bearer a-b_c~d+e/f.g==") == "a-b_c~d+e/f.g=="
    for missing in (None, "", "   ", "Basic dXNlcjpwdw==", "Bearerabc"):
        with pytest.raises(MissingToken):
            bearer_from_authorization(missing)
    for malformed_request in ("Bearer a,Bearer b", "Bearer a, b", "\x00duplicate", "Bearer\tabc", "Bearer abc\r\n"):
        with pytest.raises(MalformedRequest):
            bearer_from_authorization(malformed_request)
    for malformed_token in (
        "Bearer ",
        "Bearer",
        "Bearer a b",
        "Bearer a=b",
        "Bearer ==",
        "Bearer ab\u00e9",
        "Bearer " + "a" * 8193,
    ):
        with pytest.raises(InvalidToken) as raised:
            bearer_from_authorization(malformed_token)
        assert not isinstance(raised.value, MalformedRequest)
    assert bearer_from_authorization("Bearer " + "a" * 8192) == "a" * 8192


def test_scope_must_be_a_space_delimited_string(issuer: Issuer) -> None:
    validator = issuer.validator()
    with pytest.raises(InvalidToken):
        validator.verify(issuer.token(scope=["mcp.query"]))
    assert validator.verify(issuer.token(scope=None)).scopes == frozenset()  # no scope claim: no scopes


def test_oversize_token_is_refused_before_parsing(issuer: Issuer) -> None:
    validator = issuer.validator()
    big = issuer.token(padding="x" * 9000)  # validly signed, but longer than MAX_TOKEN_CHARS
    assert len(big) > MAX_TOKEN_CHARS
    with pytest.raises(InvalidToken, match="too large"):
        validator.verify(big)
    assert issuer.jwks_fetches == 0  # refused before looking at its header or keys


def shared_validator(issuer: Issuer, **config: Any) -> TokenValidator:
    """A validator that shares its JWKS through the test Redis, signed with the test SECRET_KEY."""
    from django.conf import settings

    return issuer.validator(shared_cache_url=settings.REDIS_URL, shared_cache_secret=settings.SECRET_KEY, **config)


def test_shared_jwks_copy_serves_other_processes_until_it_expires(issuer: Issuer) -> None:
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        first = shared_validator(issuer, cache_s=1.0)
        first.verify(issuer.token())
        assert issuer.jwks_fetches == 1
        # Another process (a validator with an empty memory) takes the fresh shared copy...
        second = shared_validator(issuer, cache_s=1.0)
        assert second.verify(issuer.token()).subject == "alice"
        assert issuer.jwks_fetches == 1
        # ...but not a stale one: after the cache lifetime it goes to the issuer again.
        time.sleep(1.1)
        third = shared_validator(issuer, cache_s=1.0)
        third.verify(issuer.token())
        assert issuer.jwks_fetches == 2
    finally:
        client.delete(issuer.validator().shared_cache_key)
        client.close()


def test_shared_cache_down_falls_back_to_the_issuer(issuer: Issuer) -> None:
    from django.conf import settings

    from tests.support.servers import free_port

    validator = issuer.validator(
        shared_cache_url=f"redis://127.0.0.1:{free_port()}/0", shared_cache_secret=settings.SECRET_KEY
    )
    assert validator.verify(issuer.token()).subject == "alice"
    assert issuer.jwks_fetches == 1


# --- issue 9 item 5: the shared cache is authenticated, and never says where the keys live -----------


class Planter:
    """An attacker with write access to Redis: their own RSA key and a JWKS server of their own (which
    must never be asked)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.evil = Issuer()  # only its request counter matters
        self.jwk = {**jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True), "kid": "evil"}

    def token(self, issuer: Issuer) -> str:
        now = int(time.time())
        claims = {
            "iss": issuer.url,
            "sub": "mallory",
            "aud": [AUDIENCE],
            "azp": CLIENT,
            "scope": "mcp.catalog.read mcp.query",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
        }
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "evil"})

    def old_format_entry(self) -> str:
        """The entry format before issue 9: unauthenticated, with a jwks_uri that was adopted."""
        return json.dumps(
            {"jwks": {"keys": [self.jwk]}, "jwks_uri": f"{self.evil.base}/realm/certs", "fetched_at": time.time()}
        )

    def forged_entry(self, issuer: Issuer) -> str:
        """The signed format with a signature made without the secret key."""
        return json.dumps(
            {"issuer": issuer.url, "fetched_at": time.time(), "jwks": {"keys": [self.jwk]}, "signature": "x" * 43}
        )

    def close(self) -> None:
        self.evil.close()


@pytest.fixture
def planter() -> Iterator[Planter]:
    attacker = Planter()
    yield attacker
    attacker.close()


@pytest.mark.parametrize("variant", ["old-format", "forged-signature"])
def test_planted_shared_entry_is_ignored(
    issuer: Issuer, planter: Planter, test_redis: redis.Redis, variant: str, caplog: pytest.LogCaptureFixture
) -> None:
    validator = shared_validator(issuer, refetch_cooldown_s=60.0)
    entry = planter.old_format_entry() if variant == "old-format" else planter.forged_entry(issuer)
    test_redis.set(validator.shared_cache_key, entry)
    with caplog.at_level("WARNING", logger="contexts.tokens"), pytest.raises(InvalidToken):
        validator.verify(planter.token(issuer))
    assert validator.cached_kids() == ("k1",)  # the issuer's own keys, fetched over HTTP
    assert issuer.jwks_fetches == 1
    assert planter.evil.requests == 0  # the planted jwks_uri was never used
    assert validator.verify(issuer.token()).subject == "alice"
    assert "shared JWKS cache entry ignored" in caplog.text
    assert planter.jwk["n"][:16] not in caplog.text  # the entry's content is not logged


def test_entry_signed_for_another_issuer_is_not_replayed(issuer: Issuer, test_redis: redis.Redis) -> None:
    other = Issuer()
    try:
        other.add_key("k1")  # same kid, another key
        shared_validator(other).verify(other.token())  # writes a correctly signed entry for `other`
        replayed = test_redis.get(shared_validator(other).shared_cache_key)
        assert replayed is not None
        validator = shared_validator(issuer, refetch_cooldown_s=60.0)
        test_redis.set(validator.shared_cache_key, replayed)
        with pytest.raises(InvalidToken):
            validator.verify(other.token(iss=issuer.url))  # signed by `other`'s k1, claiming our issuer
        assert issuer.jwks_fetches == 1
    finally:
        other.close()


def test_signed_entry_of_our_issuer_is_taken_without_a_fetch(issuer: Issuer, test_redis: redis.Redis) -> None:
    shared_validator(issuer).verify(issuer.token())
    entry = json.loads(test_redis.get(shared_validator(issuer).shared_cache_key) or b"{}")
    assert set(entry) == {"issuer", "fetched_at", "jwks", "signature"}  # no jwks_uri
    assert shared_validator(issuer).verify(issuer.token()).subject == "alice"
    assert issuer.jwks_fetches == 1
    # A changed byte anywhere in the signed content voids it: here, one more key.
    entry["jwks"]["keys"].append(Planter().jwk)
    test_redis.set(shared_validator(issuer).shared_cache_key, json.dumps(entry))
    assert shared_validator(issuer).verify(issuer.token()).subject == "alice"
    assert issuer.jwks_fetches == 2


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["old-format", "forged-signature"])
def test_server_ignores_a_jwk_planted_in_redis_before_it_starts(
    start_server: Callable[..., ServerProcess], issuer: Issuer, planter: Planter, test_redis: redis.Redis, variant: str
) -> None:
    """Issue 9 item 5 as reproduced: a JWK planted under the shared key before the server starts made it
    accept a token signed by the planter's own key (tools/list → 200)."""
    from django.conf import settings

    key = shared_validator(issuer).shared_cache_key
    test_redis.set(key, planter.old_format_entry() if variant == "old-format" else planter.forged_entry(issuer))
    server = start_server(TJWATER_OIDC_ISSUER=issuer.url, TJWATER_DEV_ISSUER="0", REDIS_URL=settings.REDIS_URL)

    forged = mcp_request(f"{server.url}/mcp", planter.token(issuer), "tools/list")
    assert forged.status == 401, forged.message
    assert 'error="invalid_token"' in forged.headers["www-authenticate"]
    assert mcp_request(f"{server.url}/mcp", issuer.token(), "tools/list").status == 200
    assert planter.evil.requests == 0
    assert "shared JWKS cache entry ignored" in server.log()
    assert planter.jwk["n"][:16] not in server.log()
