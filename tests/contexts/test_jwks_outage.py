"""Issue 9 item 4: an issuer outage is neither a full outage nor a stall.

A real issuer over HTTP (the in-process ``http.server`` of the token tests) that can be slow, answer
503, publish no usable key, or hang — accept the connection and never answer. The assertions are about
who waited on what, observed from the issuer's side (requests received, requests held open), not about
elapsed time; the ``timeout=`` of each ``result()`` only bounds a broken run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from contexts.token_errors import AuthUnavailable, InvalidToken
from contexts.tokens import TokenValidator
from tests.support.mcp_http import mcp_request
from tests.support.servers import ServerProcess
from tests.support.tokens import Issuer
from tests.support.tokens import with_kid as _with_kid


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=24)
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


def wait_until(condition: Callable[[], bool], bound_s: float = 10.0) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def verify_all(pool: ThreadPoolExecutor, validator: TokenValidator, raws: list[str]) -> list[Future[Any]]:
    return [pool.submit(validator.verify, raw) for raw in raws]


def distinct_tokens(issuer: Issuer, n: int, **claims: Any) -> list[str]:
    """Tokens that differ (a jti each), so none is answered by the verified-token cache."""
    return [issuer.token(jti=f"t{i}-{time.monotonic_ns()}", **claims) for i in range(n)]


def test_stale_keys_serve_every_verification_while_the_issuer_hangs(issuer: Issuer, pool: ThreadPoolExecutor) -> None:
    validator = issuer.validator(cache_s=0.2, grace_s=60.0, http_timeout_s=5.0)
    assert validator.verify(issuer.token()).subject == "alice"
    time.sleep(0.3)  # the key set is stale now: the next verification starts a refresh
    issuer.hang()
    assert validator.verify(distinct_tokens(issuer, 1)[0]).subject == "alice"  # not waiting for it
    wait_until(lambda: issuer.waiting == 1)  # the refresh reached the issuer, which does not answer
    requests = issuer.requests

    futures = verify_all(pool, validator, distinct_tokens(issuer, 20))

    assert [f.result(timeout=4).subject for f in futures] == ["alice"] * 20
    # All 20 completed with the last good keys while the one refresh is still held open by the
    # issuer: nobody queued behind it, and nobody started another (single flight).
    assert issuer.waiting == 1
    assert issuer.requests == requests


def test_past_the_grace_period_a_fast_503_and_no_new_attempt(issuer: Issuer, pool: ThreadPoolExecutor) -> None:
    validator = issuer.validator(cache_s=0.2, grace_s=0.2, failure_backoff_s=60.0)
    assert validator.verify(issuer.token()).subject == "alice"
    issuer.down = True
    time.sleep(0.5)  # past cache_s + grace_s: the last good keys are no longer trusted
    with pytest.raises(AuthUnavailable):
        validator.verify(distinct_tokens(issuer, 1)[0])
    attempts = issuer.requests

    futures = verify_all(pool, validator, distinct_tokens(issuer, 20))

    for future in futures:
        with pytest.raises(AuthUnavailable):
            future.result(timeout=4)
    assert issuer.requests == attempts  # the negative cache: no HTTP attempt within the backoff


def test_a_failed_fetch_is_retried_after_the_backoff_and_the_validator_recovers(issuer: Issuer) -> None:
    validator = issuer.validator(failure_backoff_s=2.0)
    issuer.down = True
    with pytest.raises(AuthUnavailable):
        validator.verify(issuer.token())
    attempts = issuer.requests
    with pytest.raises(AuthUnavailable):
        validator.verify(issuer.token())
    assert issuer.requests == attempts
    issuer.down = False
    time.sleep(2.1)
    assert validator.verify(issuer.token()).subject == "alice"


def test_grace_keeps_the_last_good_keys_while_the_issuer_is_down(issuer: Issuer) -> None:
    validator = issuer.validator(cache_s=0.2, grace_s=60.0, failure_backoff_s=0.1)
    assert validator.verify(issuer.token()).subject == "alice"
    issuer.down = True
    time.sleep(0.3)
    for raw in distinct_tokens(issuer, 5):
        assert validator.verify(raw).subject == "alice"
        time.sleep(0.12)  # let background refreshes run and fail
    assert issuer.requests >= 2  # it kept trying in the background
    validator.ensure_keys()  # readiness: the last good keys serve, so the process is ready
    fetches = issuer.jwks_fetches
    issuer.down = False
    # Back up: a later verification's background refresh gets the keys again.
    wait_until(
        lambda: validator.verify(distinct_tokens(issuer, 1)[0]).subject == "alice" and issuer.jwks_fetches > fetches
    )


def test_an_unknown_kid_refetch_never_blocks_known_kids(issuer: Issuer, pool: ThreadPoolExecutor) -> None:
    validator = issuer.validator(refetch_cooldown_s=0.0, http_timeout_s=5.0)
    assert validator.verify(issuer.token()).subject == "alice"
    issuer.hang()
    unknown = pool.submit(validator.verify, _with_kid(issuer, "rotated"))
    wait_until(lambda: issuer.waiting == 1)  # its refetch is held open by the issuer

    known = verify_all(pool, validator, distinct_tokens(issuer, 10))
    assert [f.result(timeout=4).subject for f in known] == ["alice"] * 10
    # Another unknown kid does not wait for the refetch in flight either (forged kids hold no threads).
    with pytest.raises(InvalidToken):
        pool.submit(validator.verify, _with_kid(issuer, "forged")).result(timeout=4)
    assert not unknown.done()
    assert issuer.waiting == 1

    issuer.release()  # the issuer closes the connection without an answer: the kid stays unknown
    with pytest.raises((InvalidToken, AuthUnavailable)):
        unknown.result(timeout=10)


def test_a_jwks_without_a_usable_key_is_not_cached_as_success(issuer: Issuer) -> None:
    issuer.published = []
    validator = issuer.validator(failure_backoff_s=0.2)
    with pytest.raises(AuthUnavailable):  # not 401: the issuer's key set is broken, not the token
        validator.verify(issuer.token())
    issuer.published = ["k1"]
    time.sleep(0.3)
    assert validator.verify(issuer.token()).subject == "alice"


def test_an_empty_jwks_does_not_replace_the_last_good_keys(issuer: Issuer) -> None:
    validator = issuer.validator(cache_s=0.2)
    assert validator.verify(issuer.token()).subject == "alice"
    issuer.published = []
    time.sleep(0.3)
    assert validator.verify(distinct_tokens(issuer, 1)[0]).subject == "alice"
    wait_until(lambda: issuer.jwks_fetches == 2)  # the background refresh got a JWKS without a key
    time.sleep(0.1)  # and has handled it
    assert validator.cached_kids() == ("k1",)
    assert validator.verify(distinct_tokens(issuer, 1)[0]).subject == "alice"


def test_a_cold_start_burst_makes_one_fetch(issuer: Issuer, pool: ThreadPoolExecutor) -> None:
    issuer.delay_s = 0.3  # a slow issuer: every verification arrives while the first fetch runs
    validator = issuer.validator()
    futures = verify_all(pool, validator, distinct_tokens(issuer, 20))
    assert [f.result(timeout=10).subject for f in futures] == ["alice"] * 20
    assert issuer.jwks_fetches == 1


@pytest.mark.e2e
def test_server_keeps_serving_while_the_issuer_hangs_and_past_grace_answers_a_fast_503(
    start_server: Callable[..., ServerProcess], issuer: Issuer, pool: ThreadPoolExecutor
) -> None:
    """The outage as a client sees it, over real HTTP against real uvicorn processes: one server within
    the grace period, one without grace (the state of any server once the grace period is over)."""
    env = {
        "TJWATER_OIDC_ISSUER": issuer.url,
        "TJWATER_DEV_ISSUER": "0",
        "TJWATER_OIDC_JWKS_CACHE_S": "1",
        "TJWATER_OIDC_HTTP_TIMEOUT_S": "1",
    }
    graced = f"{start_server(**env, TJWATER_OIDC_JWKS_GRACE_S='600').url}/mcp"
    ungraced_server = start_server(**env, TJWATER_OIDC_JWKS_GRACE_S="0")
    ungraced = f"{ungraced_server.url}/mcp"
    for mcp in (graced, ungraced):
        assert mcp_request(mcp, issuer.token(), "tools/list").status == 200
    issuer.hang()
    time.sleep(1.5)  # both key sets are stale: the next call starts a refresh the issuer never answers

    answers = [pool.submit(mcp_request, graced, raw, "tools/list") for raw in distinct_tokens(issuer, 20)]
    assert [a.result(timeout=10).status for a in answers] == [200] * 20
    assert issuer.waiting >= 1

    first = mcp_request(ungraced, distinct_tokens(issuer, 1)[0], "tools/list")  # waits for one fetch
    answers = [pool.submit(mcp_request, ungraced, raw, "tools/list") for raw in distinct_tokens(issuer, 20)]
    for answer in [first, *(a.result(timeout=10) for a in answers)]:
        assert answer.status == 503
        assert answer.headers["retry-after"]
        assert answer.message is not None and answer.message["retryable"] is True
        assert "invalid_token" not in answer.headers.get("www-authenticate", "")
    assert "JWKS fetch failed" in ungraced_server.log()

    issuer.release()  # the issuer is back: both recover by themselves
    deadline = time.monotonic() + 20
    for mcp in (graced, ungraced):
        while mcp_request(mcp, distinct_tokens(issuer, 1)[0], "tools/list").status != 200:
            assert time.monotonic() < deadline, "no recovery after the issuer came back"
            time.sleep(0.2)
