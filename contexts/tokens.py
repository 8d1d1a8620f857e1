"""Bearer-token verification for ``/mcp`` and the context REST API (SPEC R-AUTH-2).

A token is accepted only when every check passes: RS256/ES256 signature (never ``none`` or HMAC) with
a key from the one trusted issuer's JWKS, the fixed ``iss``, ``aud`` containing the configured
audience, ``exp``/``nbf`` with a 60 s clock-skew leeway, ``iat`` not more than 60 s in the future,
``azp`` in the client allowlist, and a ``sub``. Scopes come from the space-separated ``scope`` claim.

The JWKS is cached; a token naming an unknown ``kid`` triggers one refetch, but not more often than the
refetch cooldown (so forged kids cannot hammer the issuer), which makes key rotation safe: the new key
is picked up on the first token that uses it. A JWKS that cannot be fetched is ``AuthUnavailable`` —
retryable, answered 503, never 401 and never data (R-AUTH-5).

Two cache levels: each process keeps the parsed keys in memory, and the JWKS document (with the
``jwks_uri`` from the issuer's discovery document) is shared through Redis, so that the Celery beat job
``contexts.refresh_issuer_keys`` (``refresh_issuer_keys``) can renew it ahead of expiry for every
process: a process whose memory copy went stale takes the shared copy while it is fresh and goes to
the issuer only when it is not (or for an unknown ``kid``). Redis being down only costs that sharing;
the dev issuer's keys are local and never shared.

It lives in ``contexts`` (not ``mcp_app``) because both the MCP endpoint and the context REST API
verify tokens, and nothing may import ``mcp_app`` (SPEC §0 dependency direction). Raw tokens are never
logged, stored or put into exception messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import jwt
import redis
from django.conf import settings
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

ALLOWED_ALGORITHMS = ("RS256", "ES256")
SHARED_JWKS_KEY_PREFIX = "tjwater:oidc:jwks:"
CLOCK_SKEW_S = 60
_KEY_TYPE_FOR_ALG = {"RS256": "RSA", "ES256": "EC"}


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """The claims of a token that passed every check. Never carries the raw token."""

    issuer: str
    subject: str
    client_id: str  # the `azp` claim
    scopes: frozenset[str]
    audience: tuple[str, ...]
    expires_at: int
    claims: dict[str, Any] = field(default_factory=dict, repr=False)


class TokenError(Exception):
    """Base of token failures; ``www_authenticate_error`` is the RFC 6750 error code or None."""

    www_authenticate_error: str | None = "invalid_token"


class MissingToken(TokenError):
    """No credentials were sent: RFC 6750 §3.1 says the challenge carries no error code."""

    www_authenticate_error = None


class InvalidToken(TokenError):
    """Bad signature, issuer, audience, client, time claims or algorithm (→ 401 invalid_token)."""


class AuthUnavailable(TokenError):
    """The issuer's keys could not be fetched: retryable, never a 401 and never data (R-AUTH-5)."""

    www_authenticate_error = None


def bearer_from_authorization(header_value: str | None) -> str:
    """Extract the token from an ``Authorization: Bearer …`` header value or raise ``MissingToken``/
    ``InvalidToken``."""
    if header_value is None or not header_value.strip():
        raise MissingToken("no Authorization header")
    scheme, _, token = header_value.strip().partition(" ")
    if scheme.lower() != "bearer":
        # Another scheme is "no bearer credentials" for this resource (RFC 6750 §3.1).
        raise MissingToken("not a Bearer authorization")
    token = token.strip()
    if not token or " " in token:
        raise InvalidToken("malformed Bearer credentials")
    return token


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
    refetch_cooldown_s: float = 30.0
    http_timeout_s: float = 3.0
    clock: Callable[[], float] = time.time
    # Redis URL of the JWKS cache shared by every process (empty: this process's memory only).
    shared_cache_url: str = ""


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
class _SharedJwks:
    jwks: dict[str, Any]
    jwks_uri: str
    age_s: float


class TokenValidator:
    """Verifies bearer JWTs against one issuer. Thread-safe; one per process (``verify_token``)."""

    def __init__(self, config: ValidatorConfig) -> None:
        if not config.issuer:
            raise ValueError("a token validator needs the trusted issuer (TJWATER_OIDC_ISSUER)")
        self.config = config
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._last_fetch_attempt: float = float("-inf")
        self._jwks_url: str = config.jwks_url
        self._shared: redis.Redis | None = None
        if config.shared_cache_url and config.jwks_loader is None:
            self._shared = redis.Redis.from_url(config.shared_cache_url, socket_connect_timeout=1.0, socket_timeout=1.0)
        digest = hashlib.sha256(config.issuer.encode()).hexdigest()[:32]
        self.shared_cache_key = SHARED_JWKS_KEY_PREFIX + digest

    # --- keys ---------------------------------------------------------------------------------------
    def _http_get_json(self, url: str, timeout_s: float) -> dict[str, Any]:
        response = httpx2.get(url, timeout=timeout_s, follow_redirects=False)
        response.raise_for_status()
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        return body

    def _resolve_jwks_url(self, timeout_s: float) -> str:
        if not self._jwks_url:
            issuer = self.config.issuer.rstrip("/")
            document = self._http_get_json(f"{issuer}/.well-known/openid-configuration", timeout_s)
            if document.get("issuer") != self.config.issuer or not isinstance(document.get("jwks_uri"), str):
                raise ValueError("discovery document does not describe the configured issuer")
            self._jwks_url = document["jwks_uri"]
        return self._jwks_url

    def _install(self, jwks: dict[str, Any], *, age_s: float = 0.0) -> None:
        """Replace the in-memory keys from a JWKS document fetched ``age_s`` seconds ago."""
        keys: dict[str, jwt.PyJWK] = {}
        for entry in jwks.get("keys", []) if isinstance(jwks.get("keys"), list) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ("RSA", "EC") or not isinstance(entry.get("kid"), str):
                continue
            try:
                keys[entry["kid"]] = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue  # an unusable key is skipped, never trusted
        self._keys = keys
        self._fetched_at = time.monotonic() - max(0.0, age_s)

    def _read_shared(self) -> _SharedJwks | None:
        """The shared JWKS if another process (or the beat job) fetched it recently enough."""
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
            jwks, jwks_uri, fetched_at = entry["jwks"], entry["jwks_uri"], float(entry["fetched_at"])
        except (ValueError, KeyError, TypeError):
            return None  # not ours or damaged: fetch from the issuer instead
        age_s = time.time() - fetched_at
        if not isinstance(jwks, dict) or not isinstance(jwks_uri, str) or not 0 <= age_s < self.config.cache_s:
            return None
        return _SharedJwks(jwks=jwks, jwks_uri=jwks_uri, age_s=age_s)

    def _write_shared(self, jwks: dict[str, Any]) -> bool:
        if self._shared is None:
            return False
        entry = json.dumps({"jwks": jwks, "jwks_uri": self._jwks_url, "fetched_at": time.time()})
        try:
            self._shared.set(self.shared_cache_key, entry, ex=max(1, math.ceil(self.config.cache_s)))
        except RedisError as exc:
            logger.warning("shared JWKS cache unwritable error_class=%s", type(exc).__name__)
            return False
        return True

    def _fetch_keys(self, *, allow_shared: bool = False, timeout_s: float | None = None) -> tuple[str, bool]:
        """Replace the key cache: from the shared cache when ``allow_shared`` and it is fresh, else from
        the issuer (or the local loader). Returns (source, shared cache written). Called with ``_lock``
        held."""
        timeout_s = self.config.http_timeout_s if timeout_s is None else min(timeout_s, self.config.http_timeout_s)
        if allow_shared:
            shared = self._read_shared()
            if shared is not None:
                if not self._jwks_url:
                    self._jwks_url = shared.jwks_uri
                self._install(shared.jwks, age_s=shared.age_s)
                return "shared", False
        self._last_fetch_attempt = time.monotonic()
        try:
            if self.config.jwks_loader is not None:
                jwks = self.config.jwks_loader()
                source = "local"
            else:
                jwks = self._http_get_json(self._resolve_jwks_url(timeout_s), timeout_s)
                source = "issuer"
        except (httpx2.HTTPError, ValueError, OSError) as exc:
            logger.warning("JWKS fetch failed error_class=%s", type(exc).__name__)
            raise AuthUnavailable("authentication temporarily unavailable") from None
        self._install(jwks)
        return source, self._write_shared(jwks) if source == "issuer" else False

    def _stale(self) -> bool:
        return self._fetched_at is None or time.monotonic() - self._fetched_at >= self.config.cache_s

    def ensure_keys(self, *, timeout_s: float | None = None) -> None:
        """Make sure a fresh key set is cached (from memory, the shared cache, or the issuer), or raise
        ``AuthUnavailable``. The readiness probe calls this; a cached, still-fresh JWKS is enough."""
        with self._lock:
            if self._stale():
                self._fetch_keys(allow_shared=True, timeout_s=timeout_s)
            if not self._keys:
                raise AuthUnavailable("the issuer publishes no usable signing key")

    def refresh(self) -> KeysRefreshed:
        """Re-read the issuer's metadata and JWKS now, whatever the caches hold, and publish them to the
        shared cache (the background renewal, SPEC §9). Raises ``AuthUnavailable`` when unreachable."""
        with self._lock:
            self._jwks_url = self.config.jwks_url  # re-read the discovery document too
            source, shared = self._fetch_keys(allow_shared=False)
            return KeysRefreshed(
                issuer=self.config.issuer, kids=tuple(sorted(self._keys)), source=source, shared=shared
            )

    def cached_kids(self) -> tuple[str, ...]:
        """The key ids in this process's memory (for tests and diagnostics)."""
        with self._lock:
            return tuple(sorted(self._keys))

    def _key_for(self, kid: str) -> jwt.PyJWK:
        with self._lock:
            now = time.monotonic()
            if self._stale():
                self._fetch_keys(allow_shared=True)
            key = self._keys.get(kid)
            if key is None and now - self._last_fetch_attempt >= self.config.refetch_cooldown_s:
                # Unknown kid: the issuer may have rotated. Refetch from the issuer itself, rate-limited
                # by the cooldown.
                self._fetch_keys(allow_shared=False)
                key = self._keys.get(kid)
            if key is None:
                raise InvalidToken("unknown signing key")
            return key

    # --- verification ---------------------------------------------------------------------------
    def verify(self, raw_token: str) -> VerifiedToken:
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
        scopes = frozenset(scope.split()) if isinstance(scope, str) else frozenset()
        aud = claims["aud"]
        audience = (aud,) if isinstance(aud, str) else tuple(str(a) for a in aud)
        return VerifiedToken(
            issuer=claims["iss"],
            subject=subject,
            client_id=azp,
            scopes=scopes,
            audience=audience,
            expires_at=int(claims["exp"]),
            claims=claims,
        )

    @staticmethod
    def _check_times(claims: dict[str, Any], now: float) -> None:
        for name in ("exp", "iat", "nbf"):
            if name in claims and not isinstance(claims[name], int | float):
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
        refetch_cooldown_s=settings.TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S,
        http_timeout_s=settings.TJWATER_OIDC_HTTP_TIMEOUT_S,
        shared_cache_url=settings.REDIS_URL,
    )


_validator: TokenValidator | None = None
_validator_lock = threading.Lock()


def get_validator() -> TokenValidator:
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


def verify_token(raw_token: str) -> VerifiedToken:
    """Verify a raw bearer token with the process-wide validator (cached JWKS)."""
    return get_validator().verify(raw_token)


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
