"""Bearer-token verification for ``/mcp`` and the context REST API (SPEC R-AUTH-2).

A token is accepted only when every check passes: RS256/ES256 signature (never ``none`` or HMAC) with
a key from the one trusted issuer's JWKS, the fixed ``iss``, ``aud`` containing the configured
audience, ``exp``/``nbf`` with a 60 s clock-skew leeway, ``iat`` not more than 60 s in the future,
``azp`` in the client allowlist, a ``sub``, and — when present — a ``scope`` that is a space-delimited
string (RFC 9068 §2.2.3; a JSON list is a malformed token, not "no scopes"). Tokens longer than
``MAX_TOKEN_CHARS`` are refused before anything parses them.

The ``Authorization`` header (``bearer_from_authorization``) follows RFC 6750 §2.1
``"Bearer" 1*SP b64token`` with the scheme matched case-insensitively (RFC 7235 §2.1): ``bearer x``
and ``Bearer  x`` are accepted, because the grammar allows them. A header that carries several
credentials (two ``Authorization`` headers, which a server joins with a comma) or control characters is
a malformed *request* (``MalformedRequest``: 400 ``invalid_request``, RFC 6750 §3.1); a credential that
is not a b64token or is too long is a malformed *token* (401 ``invalid_token``). Tokens are read from
that header only, never from the URL.

Keys (issue 9 item 4: an issuer outage must be neither a full outage nor a stall):

- The parsed key set is swapped atomically; a verification with a known ``kid`` only reads it and never
  waits on a lock or on HTTP.
- A stale key set (older than ``cache_s``) is still used for ``grace_s`` more (the last good keys,
  ``TJWATER_OIDC_JWKS_GRACE_S``) while one background thread refreshes it — single flight, so an issuer
  that hangs costs one hung request, not one per verification.
- With no usable key set (cold start, or past the grace period) the one fetch in flight is waited for,
  bounded by the HTTP timeout; after a failed fetch no new attempt is made for ``failure_backoff_s``
  (negative cache) and verifications fail at once with the retryable ``AuthUnavailable`` (503).
- An unknown ``kid`` triggers one refetch from the issuer, no more often than ``refetch_cooldown_s``
  (forged kids cannot hammer the issuer), in the requesting thread; while another fetch is in flight it
  does not wait for it. Rotation is safe: a new key is picked up by the first token that uses it.
- A JWKS without a usable key, or an unreachable issuer, is a failed fetch: the last good keys stay.

Two cache levels: each process keeps the parsed keys in memory, and the JWKS document is shared through
Redis so that the Celery beat job ``contexts.refresh_issuer_keys`` can renew it ahead of expiry for
every process. Redis is also the broker and has no authentication by default, so write access to it
must not mean forging tokens (issue 9 item 5): a shared entry is HMAC-signed with ``SECRET_KEY``
(``django.core.signing``, salt naming the purpose and the issuer) and an unsigned, forged or
other-issuer entry is ignored with a warning (never its content). The JWKS location is taken only from
settings or the issuer's own discovery document over HTTP, never from the cache. Redis being down only
costs the sharing; the dev issuer's keys are local and never shared.

Verified tokens are cached per process (issue 10): keyed by the SHA-256 of the raw token, an entry lives
until the token's ``exp`` and at most ``TOKEN_CACHE_MAX_S`` (60 s), is used only while the key that
verified it is still the one the key set holds under its ``kid`` (a refetch that drops a key revokes its
cached tokens at once) and the key set is usable, and the cache holds at most ``TOKEN_CACHE_SIZE``
entries (oldest first out). Refusals are never cached. The hit path takes no lock.

It lives in ``contexts`` (not ``mcp_app``) because both the MCP endpoint and the context REST API
verify tokens, and nothing may import ``mcp_app`` (SPEC §0 dependency direction). Raw tokens are never
logged, stored or put into exception messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import string
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx2
import jwt
import redis
from django.conf import settings
from django.core import signing
from redis.exceptions import RedisError

from tjwater import metrics

logger = logging.getLogger(__name__)

ALLOWED_ALGORITHMS = ("RS256", "ES256")
SHARED_JWKS_KEY_PREFIX = "tjwater:oidc:jwks:"
# The purpose part of the signing salt of shared JWKS entries; the issuer is appended.
SHARED_JWKS_SALT = "tjwater.oidc.shared-jwks"
CLOCK_SKEW_S = 60
# Longest accepted token (characters of the compact JWS). Keycloak access tokens are 1–2 KiB; 8 KiB
# leaves room for rich claims and refuses anything larger before base64 or JSON parsing.
MAX_TOKEN_CHARS = 8192
# Verified-token cache: an entry never outlives the token's exp nor this many seconds, and the cache
# holds at most this many entries.
TOKEN_CACHE_MAX_S = 60.0
TOKEN_CACHE_SIZE = 10_000
_KEY_TYPE_FOR_ALG = {"RS256": "RSA", "ES256": "EC"}
# RFC 6750 §2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" — checked by
# deleting these bytes (bytes.translate is a table lookup per byte; a regex is ten times slower).
_B64TOKEN_CHARS = (string.ascii_letters + string.digits + "-._~+/").encode()
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """The claims of a token that passed every check. Never carries the raw token. ``claims`` is a
    read-only mapping: one instance is shared by every request that presents the same token."""

    issuer: str
    subject: str
    client_id: str  # the `azp` claim
    scopes: frozenset[str]
    audience: tuple[str, ...]
    expires_at: int
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)


class TokenError(Exception):
    """Base of token failures; ``www_authenticate_error`` is the RFC 6750 error code or None."""

    www_authenticate_error: str | None = "invalid_token"


class MissingToken(TokenError):
    """No credentials were sent: RFC 6750 §3.1 says the challenge carries no error code."""

    www_authenticate_error = None


class InvalidToken(TokenError):
    """Bad signature, issuer, audience, client, time claims or algorithm (→ 401 invalid_token)."""


class MalformedRequest(InvalidToken):
    """The request itself is malformed — several credentials (repeated ``Authorization`` headers) or
    control characters in the header: RFC 6750 §3.1 ``invalid_request``, answered 400 by ``/mcp``.
    A subclass of ``InvalidToken`` so that a caller that does not distinguish it still refuses (401)."""

    www_authenticate_error = "invalid_request"


class AuthUnavailable(TokenError):
    """The issuer's keys could not be fetched: retryable, never a 401 and never data (R-AUTH-5)."""

    www_authenticate_error = None


def bearer_from_authorization(header_value: str | None) -> str:
    """Extract the token from an ``Authorization: Bearer …`` header value or raise ``MissingToken``/
    ``MalformedRequest``/``InvalidToken`` (see the module docstring for the grammar)."""
    if header_value is None:
        raise MissingToken("no Authorization header")
    scheme, _, credentials = header_value.strip(" ").partition(" ")
    token = credentials.lstrip(" ")  # 1*SP
    if (
        scheme.lower() == "bearer"
        and 0 < len(token) <= MAX_TOKEN_CHARS
        and token.isascii()
        and (body := token.rstrip("="))
        and not body.encode().translate(None, _B64TOKEN_CHARS)
    ):
        return token  # a well-formed credential; the checks below only classify refusals
    if not header_value.strip(" "):
        raise MissingToken("no Authorization header")
    if _CONTROL.search(header_value):
        # Includes the marker mcp_app.asgi passes for a repeated header.
        raise MalformedRequest("control characters or several Authorization headers")
    if scheme.lower() != "bearer":
        # Another scheme is "no bearer credentials" for this resource (RFC 6750 §3.1).
        raise MissingToken("not a Bearer authorization")
    if "," in credentials:
        # Two Authorization headers arrive joined by a comma (RFC 9110 §5.3); no b64token has one.
        raise MalformedRequest("several credentials")
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken("token too large")
    raise InvalidToken("malformed Bearer credentials")


JwksLoader = Callable[[], dict[str, Any]]


@dataclass
class ValidatorConfig:
    """What a validator trusts. ``jwks_loader`` replaces HTTP fetching (the dev issuer reads its key
    file); otherwise keys come from ``jwks_url`` or the issuer's discovery document."""

    issuer: str
    audience: str
    allowed_clients: Sequence[str]
    jwks_url: str = ""
    jwks_loader: JwksLoader | None = None
    cache_s: float = 300.0
    # How long past ``cache_s`` the last good keys keep serving while the issuer is unreachable.
    grace_s: float = 3600.0
    refetch_cooldown_s: float = 30.0
    # After a failed fetch, no new attempt for this long (a down issuer is asked once per interval).
    failure_backoff_s: float = 5.0
    http_timeout_s: float = 3.0
    clock: Callable[[], float] = time.time
    # Redis URL of the JWKS cache shared by every process (empty: this process's memory only), and the
    # key its entries are signed with (SECRET_KEY; without one nothing is shared).
    shared_cache_url: str = ""
    shared_cache_secret: str = ""
    shared_cache_fallback_secrets: Sequence[str] = ()
    token_cache_size: int = TOKEN_CACHE_SIZE
    token_cache_max_s: float = TOKEN_CACHE_MAX_S


@dataclass(frozen=True, slots=True)
class KeysRefreshed:
    """What ``refresh_issuer_keys`` did: the issuer, the key ids now trusted, where they came from
    (``"issuer"`` over HTTP, ``"local"`` for the dev issuer's key file) and whether the shared cache was
    written."""

    issuer: str
    kids: tuple[str, ...]
    source: str
    shared: bool


@dataclass(frozen=True, slots=True)
class _KeySet:
    """One parsed JWKS; replaced as a whole, never mutated. ``fetched_at`` is on the monotonic clock."""

    keys: Mapping[str, jwt.PyJWK]
    entries: Mapping[str, dict[str, Any]]  # the JWK objects as published, to keep unchanged keys' identity
    fetched_at: float


@dataclass(frozen=True, slots=True)
class _Loaded:
    keyset: _KeySet
    jwks: dict[str, Any]
    source: str


@dataclass(frozen=True, slots=True)
class _Cached:
    token: VerifiedToken
    kid: str
    key: jwt.PyJWK
    until: float  # on the validator's clock


class TokenValidator:
    """Verifies bearer JWTs against one issuer. Thread-safe; one per process (``verify_token``)."""

    def __init__(self, config: ValidatorConfig) -> None:
        if not config.issuer:
            raise ValueError("a token validator needs the trusted issuer (TJWATER_OIDC_ISSUER)")
        self.config = config
        self._keyset: _KeySet | None = None
        # Guards the fetch bookkeeping below; held only for a few assignments, never during I/O.
        self._state_lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self._last_attempt = float("-inf")
        self._last_failure = float("-inf")
        self._last_failed = False
        self._jwks_url: str = config.jwks_url
        self._shared: redis.Redis | None = None
        if config.shared_cache_url and config.shared_cache_secret and config.jwks_loader is None:
            self._shared = redis.Redis.from_url(config.shared_cache_url, socket_connect_timeout=1.0, socket_timeout=1.0)
        digest = hashlib.sha256(config.issuer.encode()).hexdigest()[:32]
        self.shared_cache_key = SHARED_JWKS_KEY_PREFIX + digest
        self._verified: dict[bytes, _Cached] = {}
        self._verified_lock = threading.Lock()  # writers only; the hit path reads without it
        self.full_verifications = 0  # verifications that did not come from the cache (diagnostics, tests)

    # --- key set state --------------------------------------------------------------------------
    def _usable_until(self, keyset: _KeySet) -> float:
        return keyset.fetched_at + self.config.cache_s + self.config.grace_s

    def _usable(self, keyset: _KeySet | None, now: float) -> bool:
        return keyset is not None and bool(keyset.keys) and now < self._usable_until(keyset)

    def _fresh(self, keyset: _KeySet, now: float) -> bool:
        return now - keyset.fetched_at < self.config.cache_s

    def _begin_fetch(self, *, unknown_kid: bool = False) -> tuple[threading.Event | None, bool]:
        """Join or start the one fetch of this process: (event of the fetch in flight, whether the
        caller must run it). (None, False) when the negative cache or the refetch cooldown says no."""
        with self._state_lock:
            if self._inflight is not None:
                return self._inflight, False
            now = time.monotonic()
            if now - self._last_failure < self.config.failure_backoff_s:
                return None, False
            if unknown_kid and now - self._last_attempt < self.config.refetch_cooldown_s:
                return None, False
            self._inflight = threading.Event()
            self._last_attempt = now
            return self._inflight, True

    def _run_fetch(
        self, event: threading.Event, *, allow_shared: bool, timeout_s: float | None = None, rediscover: bool = False
    ) -> _Loaded | None:
        """Run the fetch started by ``_begin_fetch``: load, install on success, record a failure
        otherwise; always releases the waiters. No lock is held while loading."""
        loaded: _Loaded | None = None
        try:
            loaded = self._load(allow_shared=allow_shared, timeout_s=timeout_s, rediscover=rediscover)
        finally:
            with self._state_lock:
                now = time.monotonic()
                if loaded is not None:
                    self._keyset = loaded.keyset
                    self._last_failed = False
                else:
                    self._last_failure = now
                    self._last_failed = True
                self._inflight = None
            event.set()
        return loaded

    def _refresh_in_background(self) -> None:
        """Renew a stale but usable key set without making any request wait for it."""
        event, mine = self._begin_fetch()
        if not mine or event is None:
            return

        def run() -> None:
            try:
                self._after_load(self._run_fetch(event, allow_shared=True))
            except AuthUnavailable:
                keyset = self._keyset
                age_s = time.monotonic() - keyset.fetched_at if keyset is not None else -1.0
                logger.warning("serving the last good issuer keys age_s=%.0f", age_s)

        threading.Thread(target=run, name="jwks-refresh", daemon=True).start()

    def _wait_for_keys(self, timeout_s: float | None = None) -> _KeySet:
        """A usable key set, fetching (or waiting for the fetch in flight) when there is none; raises
        ``AuthUnavailable`` at once within the negative-cache window."""
        keyset = self._keyset
        now = time.monotonic()
        if self._usable(keyset, now):
            assert keyset is not None
            if not self._fresh(keyset, now):
                self._refresh_in_background()
            return keyset
        event, mine = self._begin_fetch()
        if event is None:
            raise AuthUnavailable("authentication temporarily unavailable")
        if mine:
            self._after_load(self._run_fetch(event, allow_shared=True, timeout_s=timeout_s))
        else:
            event.wait(self._fetch_bound_s(timeout_s))
        keyset = self._keyset
        if not self._usable(keyset, time.monotonic()):
            raise AuthUnavailable("authentication temporarily unavailable")
        assert keyset is not None
        return keyset

    def _fetch_bound_s(self, timeout_s: float | None) -> float:
        # A fetch makes at most two requests (discovery, JWKS), each bounded by the timeout.
        per_request = self.config.http_timeout_s if timeout_s is None else min(timeout_s, self.config.http_timeout_s)
        return 2 * per_request + 0.5

    # --- loading --------------------------------------------------------------------------------
    def _http_get_json(self, url: str, timeout_s: float) -> dict[str, Any]:
        response = httpx2.get(url, timeout=timeout_s, follow_redirects=False)
        response.raise_for_status()
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        return body

    def _resolve_jwks_url(self, timeout_s: float) -> str:
        """The JWKS location: from settings, else the issuer's own discovery document over HTTP."""
        url = self._jwks_url
        if not url:
            issuer = self.config.issuer.rstrip("/")
            document = self._http_get_json(f"{issuer}/.well-known/openid-configuration", timeout_s)
            if document.get("issuer") != self.config.issuer or not isinstance(document.get("jwks_uri"), str):
                raise ValueError("discovery document does not describe the configured issuer")
            url = self._jwks_url = document["jwks_uri"]
        return url

    def _parse(self, jwks: dict[str, Any], *, fetched_at: float) -> _KeySet:
        """The usable signing keys of a JWKS document; a key whose JWK is unchanged keeps its parsed
        object (so tokens it verified stay cached across refreshes)."""
        previous = self._keyset
        keys: dict[str, jwt.PyJWK] = {}
        entries: dict[str, dict[str, Any]] = {}
        for entry in jwks.get("keys", []) if isinstance(jwks.get("keys"), list) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            kid = entry.get("kid")
            if entry.get("kty") not in ("RSA", "EC") or not isinstance(kid, str) or not kid:
                continue
            if previous is not None and previous.entries.get(kid) == entry:
                keys[kid] = previous.keys[kid]
            else:
                try:
                    keys[kid] = jwt.PyJWK(entry)
                except jwt.PyJWTError:
                    continue  # an unusable key is skipped, never trusted
            entries[kid] = entry
        return _KeySet(keys=MappingProxyType(keys), entries=MappingProxyType(entries), fetched_at=fetched_at)

    def _load(self, *, allow_shared: bool, timeout_s: float | None, rediscover: bool) -> _Loaded:
        """A key set from the shared cache (when allowed, fresh, and newer than ours), else from the
        issuer (or the local loader). Raises ``AuthUnavailable``; a JWKS without a usable key is a
        failure, never installed."""
        timeout_s = self.config.http_timeout_s if timeout_s is None else min(timeout_s, self.config.http_timeout_s)
        if allow_shared:
            shared = self._read_shared()
            if shared is not None:
                return shared
        try:
            if self.config.jwks_loader is not None:
                jwks = self.config.jwks_loader()
                source = "local"
            else:
                if rediscover:
                    self._jwks_url = self.config.jwks_url
                jwks = self._http_get_json(self._resolve_jwks_url(timeout_s), timeout_s)
                source = "issuer"
        except (httpx2.HTTPError, ValueError, OSError) as exc:
            logger.warning("JWKS fetch failed error_class=%s", type(exc).__name__)
            metrics.JWKS_REFRESH_FAILURES.inc()
            raise AuthUnavailable("authentication temporarily unavailable") from None
        keyset = self._parse(jwks, fetched_at=time.monotonic())
        if not keyset.keys:
            logger.warning("JWKS fetch failed: the issuer publishes no usable signing key")
            metrics.JWKS_REFRESH_FAILURES.inc()
            raise AuthUnavailable("the issuer publishes no usable signing key")
        return _Loaded(keyset=keyset, jwks=jwks, source=source)

    def _after_load(self, loaded: _Loaded | None) -> bool:
        """Publish a key set fetched from the issuer to the shared cache (outside every lock)."""
        if loaded is None or loaded.source != "issuer":
            return False
        return self._write_shared(loaded.jwks)

    # --- the shared cache -------------------------------------------------------------------------
    def _signer(self) -> signing.Signer:
        return signing.Signer(
            key=self.config.shared_cache_secret,
            fallback_keys=list(self.config.shared_cache_fallback_secrets),
            salt=f"{SHARED_JWKS_SALT}:{self.config.issuer}",
        )

    @staticmethod
    def _canonical(issuer: str, fetched_at: float, jwks: dict[str, Any]) -> str:
        payload = {"issuer": issuer, "fetched_at": fetched_at, "jwks": jwks}
        return json.dumps(payload, sort_keys=True, separators=(",", ":"))

    def _read_shared(self) -> _Loaded | None:
        """The shared key set if its signature is ours, it names our issuer, another process (or the
        beat job) fetched it recently enough, and it is newer than what this process holds."""
        if self._shared is None:
            return None
        try:
            raw = self._shared.get(self.shared_cache_key)
        except RedisError as exc:
            logger.warning("shared JWKS cache unreadable error_class=%s", type(exc).__name__)
            return None
        if raw is None:
            return None
        try:
            entry = json.loads(raw)
            jwks, issuer, fetched_at, signature = (
                entry["jwks"],
                entry["issuer"],
                float(entry["fetched_at"]),
                entry["signature"],
            )
            if not isinstance(jwks, dict) or not isinstance(issuer, str) or not isinstance(signature, str):
                raise TypeError("wrong types")
            self._signer().unsign(f"{self._canonical(issuer, fetched_at, jwks)}:{signature}")
            if issuer != self.config.issuer:
                raise signing.BadSignature("another issuer")
        except (ValueError, KeyError, TypeError, signing.BadSignature):
            # Unsigned (an older format), forged, damaged, or copied from another issuer's entry:
            # never trusted. Its content is not logged.
            logger.warning("shared JWKS cache entry ignored: it does not authenticate")
            return None
        age_s = time.time() - fetched_at
        if not -CLOCK_SKEW_S <= age_s < self.config.cache_s:
            return None
        fetched_mono = time.monotonic() - max(0.0, age_s)
        current = self._keyset
        if current is not None and current.fetched_at >= fetched_mono:
            return None  # ours is at least as recent: go to the issuer instead
        keyset = self._parse(jwks, fetched_at=fetched_mono)
        if not keyset.keys:
            return None
        return _Loaded(keyset=keyset, jwks=jwks, source="shared")

    def _write_shared(self, jwks: dict[str, Any]) -> bool:
        if self._shared is None:
            return False
        fetched_at = time.time()
        canonical = self._canonical(self.config.issuer, fetched_at, jwks)
        entry = json.dumps(
            {
                "issuer": self.config.issuer,
                "fetched_at": fetched_at,
                "jwks": jwks,
                "signature": self._signer().signature(canonical),
            }
        )
        try:
            self._shared.set(self.shared_cache_key, entry, ex=max(1, math.ceil(self.config.cache_s)))
        except RedisError as exc:
            logger.warning("shared JWKS cache unwritable error_class=%s", type(exc).__name__)
            return False
        return True

    # --- public key operations --------------------------------------------------------------------
    def ensure_keys(self, *, timeout_s: float | None = None) -> None:
        """Make sure a usable key set is cached (from memory, the shared cache, or the issuer), or raise
        ``AuthUnavailable``. The readiness probe calls this: the last good keys within the grace period
        count as ready (they serve requests), with a background refresh started."""
        self._wait_for_keys(timeout_s)

    def refresh(self) -> KeysRefreshed:
        """Re-read the issuer's metadata and JWKS now, whatever the caches hold, and publish them to the
        shared cache (the background renewal, SPEC §9). Raises ``AuthUnavailable`` when unreachable
        (the keys held stay)."""
        loaded = self._load(allow_shared=False, timeout_s=None, rediscover=True)
        with self._state_lock:
            self._keyset = loaded.keyset
            self._last_failed = False
        shared = self._after_load(loaded)
        return KeysRefreshed(
            issuer=self.config.issuer, kids=tuple(sorted(loaded.keyset.keys)), source=loaded.source, shared=shared
        )

    def cached_kids(self) -> tuple[str, ...]:
        """The key ids in this process's memory (for tests and diagnostics)."""
        keyset = self._keyset
        return tuple(sorted(keyset.keys)) if keyset is not None else ()

    def _key_for(self, kid: str) -> jwt.PyJWK:
        keyset = self._wait_for_keys()
        key = keyset.keys.get(kid)
        if key is not None:
            return key
        # Unknown kid: the issuer may have rotated. Refetch from the issuer itself — rate-limited by the
        # cooldown, and without waiting for a fetch someone else has in flight (a flood of forged kids
        # must hold no threads).
        event, mine = self._begin_fetch(unknown_kid=True)
        if mine and event is not None:
            try:
                self._after_load(self._run_fetch(event, allow_shared=False))
            except AuthUnavailable:
                pass  # the last good keys stay; decided below
            refreshed = self._keyset
            key = refreshed.keys.get(kid) if refreshed is not None else None
            if key is not None:
                return key
        if self._last_failed:
            # The issuer could not be asked: this kid may be a newly published key (R-AUTH-5).
            raise AuthUnavailable("authentication temporarily unavailable")
        raise InvalidToken("unknown signing key")

    # --- verification ---------------------------------------------------------------------------
    def cached(self, raw_token: str) -> VerifiedToken | None:
        """The cached verification of ``raw_token`` if there is a valid one, else None. Never blocks and
        never does I/O (an event loop may call it)."""
        if len(raw_token) > MAX_TOKEN_CHARS or not raw_token.isascii():
            return None
        hit = self._verified.get(hashlib.sha256(raw_token.encode()).digest())
        if hit is None or hit.until <= self.config.clock():
            return None
        keyset = self._keyset
        if keyset is None or keyset.keys.get(hit.kid) is not hit.key:
            return None
        metrics.TOKEN_CACHE_HIT.inc()
        return hit.token

    def verify(self, raw_token: str) -> VerifiedToken:
        if len(raw_token) > MAX_TOKEN_CHARS:
            raise InvalidToken("token too large")  # before any parsing
        if not raw_token.isascii():
            raise InvalidToken("malformed token")
        digest = hashlib.sha256(raw_token.encode()).digest()
        hit = self._verified.get(digest)
        if hit is not None and hit.until > self.config.clock():
            keyset = self._keyset
            if keyset is not None and keyset.keys.get(hit.kid) is hit.key:
                metrics.TOKEN_CACHE_HIT.inc()
                return hit.token
        verified, kid, key = self._verify_uncached(raw_token)
        self._remember(digest, verified, kid, key)
        return verified

    def _remember(self, digest: bytes, verified: VerifiedToken, kid: str, key: jwt.PyJWK) -> None:
        keyset = self._keyset
        if keyset is None or keyset.keys.get(kid) is not key:
            return  # the key set changed meanwhile: do not cache against a key no longer held
        now = self.config.clock()
        usable_for_s = self._usable_until(keyset) - time.monotonic()
        until = min(float(verified.expires_at), now + self.config.token_cache_max_s, now + usable_for_s)
        if until <= now or self.config.token_cache_size <= 0:
            return
        with self._verified_lock:
            cache = self._verified
            while len(cache) >= self.config.token_cache_size:
                del cache[next(iter(cache))]  # oldest first (dicts keep insertion order)
            cache[digest] = _Cached(token=verified, kid=kid, key=key, until=until)

    def token_cache_size(self) -> int:
        return len(self._verified)

    def _verify_uncached(self, raw_token: str) -> tuple[VerifiedToken, str, jwt.PyJWK]:
        self.full_verifications += 1
        metrics.TOKEN_CACHE_MISS.inc()
        try:
            header = jwt.get_unverified_header(raw_token)
        except jwt.PyJWTError:
            raise InvalidToken("malformed token") from None
        alg = header.get("alg")
        if alg not in ALLOWED_ALGORITHMS:
            raise InvalidToken("signing algorithm not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("token names no signing key")
        key = self._key_for(kid)
        if key.key_type != _KEY_TYPE_FOR_ALG[alg] or (key.algorithm_name and key.algorithm_name != alg):
            raise InvalidToken("key does not match the signing algorithm")
        now = self.config.clock()
        try:
            claims = jwt.decode(
                raw_token,
                key.key,
                algorithms=[alg],
                audience=self.config.audience,
                issuer=self.config.issuer,
                leeway=CLOCK_SKEW_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"], "verify_iat": False},
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(type(exc).__name__) from None
        self._check_times(claims, now)
        azp = claims.get("azp")
        if not isinstance(azp, str) or azp not in self.config.allowed_clients:
            raise InvalidToken("client not allowed")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise InvalidToken("no subject")
        scope = claims.get("scope", "")
        if not isinstance(scope, str):
            raise InvalidToken("scope is not a space-delimited string")  # RFC 9068 §2.2.3
        aud = claims["aud"]
        audience = (aud,) if isinstance(aud, str) else tuple(str(a) for a in aud)
        verified = VerifiedToken(
            issuer=claims["iss"],
            subject=subject,
            client_id=azp,
            scopes=frozenset(scope.split()),
            audience=audience,
            expires_at=int(claims["exp"]),
            claims=MappingProxyType(claims),
        )
        return verified, kid, key

    @staticmethod
    def _check_times(claims: dict[str, Any], now: float) -> None:
        for name in ("exp", "iat", "nbf"):
            if name in claims and (isinstance(claims[name], bool) or not isinstance(claims[name], int | float)):
                raise InvalidToken(f"{name} is not a number")
        if claims["exp"] <= now - CLOCK_SKEW_S:
            raise InvalidToken("expired")
        if "nbf" in claims and claims["nbf"] > now + CLOCK_SKEW_S:
            raise InvalidToken("not yet valid")
        if claims["iat"] > now + CLOCK_SKEW_S:
            raise InvalidToken("issued in the future")


def config_from_settings() -> ValidatorConfig:
    """The validator configuration of this deployment (SPEC §12 names)."""
    jwks_loader: JwksLoader | None = None
    if settings.TJWATER_DEV_ISSUER and settings.TJWATER_OIDC_ISSUER == settings.TJWATER_DEV_ISSUER_ID:
        from contexts import dev_issuer

        jwks_loader = dev_issuer.public_jwks  # read locally: no HTTP request to ourselves
    return ValidatorConfig(
        issuer=settings.TJWATER_OIDC_ISSUER,
        audience=settings.TJWATER_MCP_AUDIENCE,
        allowed_clients=tuple(settings.TJWATER_MCP_ALLOWED_CLIENTS),
        jwks_url=settings.TJWATER_OIDC_JWKS_URL,
        jwks_loader=jwks_loader,
        cache_s=settings.TJWATER_OIDC_JWKS_CACHE_S,
        grace_s=settings.TJWATER_OIDC_JWKS_GRACE_S,
        refetch_cooldown_s=settings.TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S,
        http_timeout_s=settings.TJWATER_OIDC_HTTP_TIMEOUT_S,
        shared_cache_url=settings.REDIS_URL,
        shared_cache_secret=settings.SECRET_KEY,
        shared_cache_fallback_secrets=tuple(settings.SECRET_KEY_FALLBACKS),
    )


_validator: TokenValidator | None = None
_validator_lock = threading.Lock()


def get_validator() -> TokenValidator:
    validator = _validator  # the hot path reads the global without the lock
    if validator is not None:
        return validator
    return _create_validator()


def _create_validator() -> TokenValidator:
    global _validator
    with _validator_lock:
        if _validator is None:
            _validator = TokenValidator(config_from_settings())
        return _validator


def reset_validator() -> None:
    """Forget the process-wide validator (tests change settings)."""
    global _validator
    with _validator_lock:
        _validator = None


def keys_age_s() -> float | None:
    """Seconds since this process's issuer key set was fetched (None: no key set, or no validator yet)."""
    validator = _validator
    keyset = validator._keyset if validator is not None else None
    return time.monotonic() - keyset.fetched_at if keyset is not None else None


def verify_token(raw_token: str) -> VerifiedToken:
    """Verify a raw bearer token with the process-wide validator (cached keys, cached verifications)."""
    return get_validator().verify(raw_token)


def cached_verification(raw_token: str) -> VerifiedToken | None:
    """A still-valid cached verification of ``raw_token`` or None; never blocks (see
    ``TokenValidator.cached``), so an event loop can try it before handing off to a thread."""
    return get_validator().cached(raw_token)


def refresh_issuer_keys() -> KeysRefreshed:
    """Renew the trusted issuer's metadata and JWKS ahead of expiry (SPEC §9, the Celery beat job
    ``contexts.refresh_issuer_keys`` and ``manage.py contexts_maintenance --refresh-issuer-keys``).

    Fetches the discovery document and the JWKS from the issuer now, replaces this process's key cache
    and writes the shared cache every server process reads when its own copy goes stale — so requests
    do not pay for the fetch and a new signing key is known before tokens signed with it arrive. With
    the dev issuer the key is local: it is re-read, nothing is shared. Raises ``AuthUnavailable`` when
    the issuer cannot be reached (the caches keep what they had)."""
    result = get_validator().refresh()
    logger.info("issuer keys refreshed source=%s keys=%d shared=%s", result.source, len(result.kids), result.shared)
    return result
