"""Issue 10: the per-process cache of verified tokens (contexts.tokens.TokenValidator).

Keyed by the SHA-256 of the raw token; an entry never outlives the token's ``exp`` nor
``TOKEN_CACHE_MAX_S``, is used only while the key that verified it is still held, the cache is bounded,
and refusals are never cached. The issuer is the real in-process HTTP issuer of the token tests; the
validator's clock is a settable one so expiry is tested without sleeping.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from contexts.issuer_keys import TOKEN_CACHE_MAX_S
from contexts.token_errors import InvalidToken
from tests.support.tokens import Issuer


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_a_verified_token_is_served_from_the_cache(issuer: Issuer) -> None:
    validator = issuer.validator()
    raw = issuer.token()
    first = validator.verify(raw)
    assert validator.verify(raw) is first
    assert validator.cached(raw) is first
    assert validator.full_verifications == 1
    assert validator.token_cache_size() == 1


def test_an_entry_expires_at_the_tokens_exp(issuer: Issuer) -> None:
    clock = Clock()
    validator = issuer.validator(clock=clock)
    exp = int(clock.now) + 30
    raw = issuer.token(exp=exp)
    validator.verify(raw)
    clock.now = exp - 0.5
    validator.verify(raw)
    assert validator.full_verifications == 1  # still cached just before exp
    clock.now = exp
    assert validator.cached(raw) is None
    validator.verify(raw)  # at exp the entry is gone: verified again (the skew leeway still admits it)
    assert validator.full_verifications == 2


def test_an_entry_lives_at_most_the_cap(issuer: Issuer) -> None:
    clock = Clock()
    validator = issuer.validator(clock=clock)
    raw = issuer.token(exp=int(clock.now) + 3600)
    start = clock.now
    validator.verify(raw)
    clock.now = start + TOKEN_CACHE_MAX_S - 1
    validator.verify(raw)
    assert validator.full_verifications == 1
    clock.now = start + TOKEN_CACHE_MAX_S
    validator.verify(raw)
    assert validator.full_verifications == 2


def test_the_cache_is_bounded_and_drops_the_oldest_first(issuer: Issuer) -> None:
    validator = issuer.validator(token_cache_size=3)
    raws = [issuer.token(jti=str(i)) for i in range(5)]
    for raw in raws:
        validator.verify(raw)
    assert validator.token_cache_size() == 3
    assert validator.full_verifications == 5
    validator.verify(raws[4])  # among the newest: cached
    assert validator.full_verifications == 5
    validator.verify(raws[0])  # the oldest was dropped: verified again
    assert validator.full_verifications == 6
    assert validator.token_cache_size() == 3


def test_a_refused_token_is_verified_again_every_time(issuer: Issuer) -> None:
    validator = issuer.validator()
    refused = issuer.token(aud=["account"])
    for _ in range(3):
        with pytest.raises(InvalidToken):
            validator.verify(refused)
    assert validator.full_verifications == 3
    assert validator.token_cache_size() == 0
    assert validator.cached(refused) is None


def test_a_dropped_key_revokes_its_cached_tokens_at_once(issuer: Issuer) -> None:
    validator = issuer.validator(refetch_cooldown_s=0.0)
    old = issuer.token(kid="k1")
    validator.verify(old)
    issuer.add_key("k2")  # the issuer rotates and drops k1
    issuer.published.remove("k1")
    validator.verify(issuer.token(kid="k2"))  # unknown kid: the refetch replaces the key set
    assert validator.cached(old) is None
    with pytest.raises(InvalidToken):
        validator.verify(old)


def test_cached_tokens_survive_a_refresh_that_keeps_their_key(issuer: Issuer) -> None:
    validator = issuer.validator()
    raw = issuer.token()
    first = validator.verify(raw)
    validator.refresh()  # the same JWK again: the parsed key keeps its identity
    assert validator.verify(raw) is first
    assert validator.full_verifications == 1


def test_cached_claims_are_read_only(issuer: Issuer) -> None:
    verified = issuer.validator().verify(issuer.token())
    with pytest.raises(TypeError):
        verified.claims["sub"] = "mallory"  # type: ignore[index]  # the mapping is read-only


def test_concurrent_verifications_keep_the_bound(issuer: Issuer) -> None:
    validator = issuer.validator(token_cache_size=20)
    raws = [issuer.token(jti=str(i)) for i in range(60)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        subjects = list(pool.map(validator.verify, raws * 5))
    assert {verified.subject for verified in subjects} == {"alice"}
    assert validator.token_cache_size() <= 20
