"""Bearer-token verification for ``/mcp`` and the context REST API (SPEC R-AUTH-2).

A token is accepted only when every check passes: RS256/ES256 signature (never ``none`` or HMAC) with
a key from the one trusted issuer's JWKS, the fixed ``iss``, ``aud`` containing the configured
audience, ``exp``/``nbf`` with a 60 s clock-skew leeway, ``iat`` not more than 60 s in the future,
``azp`` in the client allowlist, and a ``sub``. Scopes come from the space-separated ``scope`` claim.

The JWKS is cached; a token naming an unknown ``kid`` triggers one refetch, but not more often than the
refetch cooldown (so forged kids cannot hammer the issuer), which makes key rotation safe: the new key
is picked up on the first token that uses it. A JWKS that cannot be fetched is ``AuthUnavailable`` —
retryable, answered 503, never 401 and never data (R-AUTH-5).

It lives in ``contexts`` (not ``mcp_app``) because both the MCP endpoint and the context REST API
verify tokens, and nothing may import ``mcp_app`` (SPEC §0 dependency direction). Raw tokens are never
logged, stored or put into exception messages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import jwt
from django.conf import settings

logger = logging.getLogger(__name__)

ALLOWED_ALGORITHMS = ("RS256", "ES256")
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

    # --- keys -----------------------------------------------------------------------------------
    def _http_get_json(self, url: str) -> dict[str, Any]:
        response = httpx2.get(url, timeout=self.config.http_timeout_s, follow_redirects=False)
        response.raise_for_status()
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        return body

    def _resolve_jwks_url(self) -> str:
        if not self._jwks_url:
            issuer = self.config.issuer.rstrip("/")
            document = self._http_get_json(f"{issuer}/.well-known/openid-configuration")
            if document.get("issuer") != self.config.issuer or not isinstance(document.get("jwks_uri"), str):
                raise ValueError("discovery document does not describe the configured issuer")
            self._jwks_url = document["jwks_uri"]
        return self._jwks_url

    def _fetch_keys(self) -> None:
        """Replace the key cache from the JWKS. Called with ``_lock`` held."""
        self._last_fetch_attempt = time.monotonic()
        try:
            if self.config.jwks_loader is not None:
                jwks = self.config.jwks_loader()
            else:
                jwks = self._http_get_json(self._resolve_jwks_url())
        except (httpx2.HTTPError, ValueError, OSError) as exc:
            logger.warning("JWKS fetch failed error_class=%s", type(exc).__name__)
            raise AuthUnavailable("authentication temporarily unavailable") from None
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
        self._fetched_at = time.monotonic()

    def _key_for(self, kid: str) -> jwt.PyJWK:
        with self._lock:
            now = time.monotonic()
            stale = self._fetched_at is None or now - self._fetched_at >= self.config.cache_s
            if stale:
                self._fetch_keys()
            key = self._keys.get(kid)
            if key is None and now - self._last_fetch_attempt >= self.config.refetch_cooldown_s:
                # Unknown kid: the issuer may have rotated. Refetch, rate-limited by the cooldown.
                self._fetch_keys()
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
