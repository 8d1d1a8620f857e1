"""The binding API's rate limit per principal (issue 17 item 11): a token bucket in Redis.

Each principal (issuer, subject — hashed, never stored in clear) may bind ``TJWATER_BIND_RATE_PER_S``
contexts per second on average with bursts of ``TJWATER_BIND_BURST``; every worker process shares the
bucket, so the limit holds for the deployment, not per process. The bucket is refilled and taken in one
Lua script (atomic, one round trip) and uses Redis's own clock (``TIME``), so processes with skewed
clocks agree. A refused bind is ``RATE_LIMITED`` with the seconds until a token is available; Redis
unreachable refuses the bind as ``DATA_SOURCE_UNAVAILABLE`` (refuse by default: an unmetered binding
API is what the limit exists to prevent).
"""

from __future__ import annotations

import hashlib
import math

from django.conf import settings
from redis.exceptions import RedisError

from contexts.errors import DataSourceUnavailable, RateLimited
from contexts.redis_script import LazyScript

KEY_PREFIX = "tjwater:bind-rate:"

# KEYS[1] bucket; ARGV: rate per second, burst. Returns {allowed (0/1), milliseconds until a token}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
tokens = math.min(burst, tokens + (now - at) * rate / 1000)
local allowed = 0
local wait_ms = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait_ms}
"""

_take = LazyScript(_TAKE, timeout_s=1.0)


def reset() -> None:
    """Forget the process's client (tests that change ``REDIS_URL``)."""
    _take.reset()


def bucket_key(*, issuer: str, subject: str) -> str:
    digest = hashlib.sha256(f"{issuer}\x00{subject}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return KEY_PREFIX + digest


def take_bind_token(*, issuer: str, subject: str) -> None:
    """Take one bind from the principal's bucket or raise ``RateLimited`` (with ``retry_after_s``)."""
    rate = float(settings.TJWATER_BIND_RATE_PER_S)
    burst = int(settings.TJWATER_BIND_BURST)
    if rate <= 0:
        return  # the limit is switched off by configuration
    try:
        allowed, wait_ms = _take(keys=[bucket_key(issuer=issuer, subject=subject)], args=[rate, burst])
    except RedisError:
        raise DataSourceUnavailable("The rate limiter is unavailable; retry shortly.") from None
    if not int(allowed):
        retry_after = max(1, math.ceil(int(wait_ms) / 1000))
        raise RateLimited(
            f"Too many context bindings for this principal (at most {rate:g} per second, bursts of {burst}); "
            f"retry in {retry_after} s.",
            retry_after_s=retry_after,
        )
