"""The trusted issuer's signing keys (``IssuerKeys``): its JWKS, fetched single-flight, kept through an
issuer outage, renewed in the background, and shared between processes through a signed Redis entry. How
and why: ``contexts.tokens``' module docstring ("Keys"); ``TokenValidator`` verifies tokens with them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx2
import jwt
import redis
from django.core import signing
from redis.exceptions import RedisError

from contexts.token_errors import AuthUnavailable, InvalidToken
from tjwater import metrics

logger = logging.getLogger("contexts.tokens")

SHARED_JWKS_KEY_PREFIX = "tjwater:oidc:jwks:"
# The purpose part of the signing salt of shared JWKS entries; the issuer is appended.
SHARED_JWKS_SALT = "tjwater.oidc.shared-jwks"
CLOCK_SKEW_S = 60

# Verified-token cache: an entry never outlives the token's exp nor this many seconds, and the cache
# holds at most this many entries.
TOKEN_CACHE_MAX_S = 60.0
TOKEN_CACHE_SIZE = 10_000

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
    shared_cache_fallback_secrets: Sequence[str | bytes] = ()
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
class KeySet:
    """One parsed JWKS; replaced as a whole, never mutated. ``fetched_at`` is on the monotonic clock."""

    keys: Mapping[str, jwt.PyJWK]
    entries: Mapping[str, dict[str, Any]]  # the JWK objects as published, to keep unchanged keys' identity
    fetched_at: float


@dataclass(frozen=True, slots=True)
class _Loaded:
    keyset: KeySet
    jwks: dict[str, Any]
    source: str


class IssuerKeys:
    """The one trusted issuer's keys for one process. Thread-safe."""

    def __init__(self, config: ValidatorConfig) -> None:
        self.config = config
        self._keyset: KeySet | None = None
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

    @property
    def current(self) -> KeySet | None:
        """The key set this process holds now (replaced whole, never mutated)."""
        return self._keyset

    # --- key set state --------------------------------------------------------------------------
    def usable_until(self, keyset: KeySet) -> float:
        return keyset.fetched_at + self.config.cache_s + self.config.grace_s

    def _usable(self, keyset: KeySet | None, now: float) -> bool:
        return keyset is not None and bool(keyset.keys) and now < self.usable_until(keyset)

    def _fresh(self, keyset: KeySet, now: float) -> bool:
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

    def _wait_for_keys(self, timeout_s: float | None = None) -> KeySet:
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

    def _parse(self, jwks: dict[str, Any], *, fetched_at: float) -> KeySet:
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
        return KeySet(keys=MappingProxyType(keys), entries=MappingProxyType(entries), fetched_at=fetched_at)

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

    # --- public operations --------------------------------------------------------------------
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

    def key_for(self, kid: str) -> jwt.PyJWK:
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
