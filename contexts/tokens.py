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
import logging
import re
import string
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import jwt
from django.conf import settings

# ValidatorConfig and the token-cache bounds (TOKEN_CACHE_*) live with the key set that reads them (one-way: tokens ->
# issuer_keys); imported here so callers keep importing ValidatorConfig from contexts.tokens.
from contexts.issuer_keys import (
    CLOCK_SKEW_S,
    IssuerKeys,
    JwksLoader,
    KeysRefreshed,
    ValidatorConfig,
)
from contexts.token_errors import InvalidToken, MalformedRequest, MissingToken
from tjwater import metrics

logger = logging.getLogger(__name__)

ALLOWED_ALGORITHMS = ("RS256", "ES256")
# Longest accepted token (characters of the compact JWS). Keycloak access tokens are 1–2 KiB; 8 KiB
# leaves room for rich claims and refuses anything larger before base64 or JSON parsing.
MAX_TOKEN_CHARS = 8192
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
        self.keys = IssuerKeys(config)
        self._verified: dict[bytes, _Cached] = {}
        self._verified_lock = threading.Lock()  # writers only; the hit path reads without it
        self.full_verifications = 0  # verifications that did not come from the cache (diagnostics, tests)

    # --- the issuer's keys (``IssuerKeys``) ----------------------------------------------------------
    @property
    def shared_cache_key(self) -> str:
        return self.keys.shared_cache_key

    def ensure_keys(self, *, timeout_s: float | None = None) -> None:
        """See ``IssuerKeys.ensure_keys`` (the readiness probe's check)."""
        self.keys.ensure_keys(timeout_s=timeout_s)

    def refresh(self) -> KeysRefreshed:
        """See ``IssuerKeys.refresh`` (the background renewal)."""
        return self.keys.refresh()

    def cached_kids(self) -> tuple[str, ...]:
        return self.keys.cached_kids()

    # --- verification ---------------------------------------------------------------------------
    def cached(self, raw_token: str) -> VerifiedToken | None:
        """The cached verification of ``raw_token`` if there is a valid one, else None. Never blocks and
        never does I/O (an event loop may call it)."""
        if len(raw_token) > MAX_TOKEN_CHARS or not raw_token.isascii():
            return None
        hit = self._verified.get(hashlib.sha256(raw_token.encode()).digest())
        if hit is None or hit.until <= self.config.clock():
            return None
        keyset = self.keys.current
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
            keyset = self.keys.current
            if keyset is not None and keyset.keys.get(hit.kid) is hit.key:
                metrics.TOKEN_CACHE_HIT.inc()
                return hit.token
        verified, kid, key = self._verify_uncached(raw_token)
        self._remember(digest, verified, kid, key)
        return verified

    def _remember(self, digest: bytes, verified: VerifiedToken, kid: str, key: jwt.PyJWK) -> None:
        keyset = self.keys.current
        if keyset is None or keyset.keys.get(kid) is not key:
            return  # the key set changed meanwhile: do not cache against a key no longer held
        now = self.config.clock()
        usable_for_s = self.keys.usable_until(keyset) - time.monotonic()
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
        key = self.keys.key_for(kid)
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
    keyset = validator.keys.current if validator is not None else None
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
