"""The embedded development issuer (SPEC R-AUTH-6).

For a local run without Keycloak the server can act as its own tiny OpenID issuer: one RSA key pair in a
0600 file under ``TJWATER_DATA_DIR``, a discovery document and a JWKS served by the app, and tokens
minted by ``manage.py mcp_token``. Its issuer identifier is the fixed ``TJWATER_DEV_ISSUER_ID`` — never
derived from the request or the listening port — and the token validator reads its keys from the local
file instead of fetching them over HTTP, so tokens validate whatever port the server listens on.

Everything here refuses to run unless ``TJWATER_DEV_ISSUER`` is on, which settings refuse with
``DEBUG=False``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, HttpRequest, JsonResponse

KEY_FILENAME = "dev-issuer-key.pem"
ALGORITHM = "RS256"


def ensure_enabled() -> None:
    """Raise unless the dev issuer is switched on (settings refuse to load it with ``DEBUG=False``)."""
    if not settings.TJWATER_DEV_ISSUER:
        raise ImproperlyConfigured("the dev issuer is disabled (TJWATER_DEV_ISSUER=1 with DEBUG=1 enables it)")


def key_path() -> Path:
    return Path(settings.TJWATER_DATA_DIR) / KEY_FILENAME


def _create_key_file(path: Path) -> None:
    """Write a new private key atomically with mode 0600 from the first byte.

    The key goes to a uniquely named temporary file opened with ``O_CREAT|O_EXCL`` and mode 0600, and
    is then hard-linked to its final name: ``link`` refuses to replace an existing file, so two
    processes racing at first start both end up using whichever key won, never a half-written one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first; use theirs
    finally:
        tmp.unlink(missing_ok=True)


@lru_cache(maxsize=4)
def _load_private_key(path_str: str) -> rsa.RSAPrivateKey:
    path = Path(path_str)
    if not path.exists():
        _create_key_file(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ImproperlyConfigured(f"the dev issuer key {path} must not be readable by others (mode 0600)")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ImproperlyConfigured("the dev issuer key is not an RSA key")
    return key


def private_key() -> rsa.RSAPrivateKey:
    ensure_enabled()
    return _load_private_key(str(key_path()))


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def public_jwk() -> dict[str, str]:
    """The public key as a JWK whose ``kid`` is its RFC 7638 thumbprint."""
    numbers = private_key().public_key().public_numbers()
    jwk = {"e": _b64url_uint(numbers.e), "kty": "RSA", "n": _b64url_uint(numbers.n)}
    # RFC 7638 §3: SHA-256 over the required members, lexicographic order, no whitespace.
    canonical = json.dumps(jwk, separators=(",", ":"), sort_keys=True).encode()
    kid = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()
    return {**jwk, "kid": kid, "use": "sig", "alg": ALGORITHM}


def public_jwks() -> dict[str, Any]:
    return {"keys": [public_jwk()]}


def issuer_id() -> str:
    return settings.TJWATER_DEV_ISSUER_ID


def discovery_document() -> dict[str, Any]:
    """A minimal OpenID discovery document: enough for a client to find the keys. The dev issuer has
    no token endpoint; tokens come from ``manage.py mcp_token``."""
    issuer = issuer_id()
    return {
        "issuer": issuer,
        "jwks_uri": f"{issuer}/jwks",
        "response_types_supported": ["token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [ALGORITHM],
        "scopes_supported": ["mcp.catalog.read", "mcp.query", "mcp.context.bind"],
    }


def mint_token(
    *, subject: str, client_id: str, scopes: list[str], ttl_s: int = 3600, audience: str | None = None
) -> str:
    """Sign an access token for ``subject`` as seen by client ``client_id`` (the ``azp`` claim), for the
    MCP audience unless another (e.g. ``TJWATER_API_AUDIENCE``) is named."""
    now = int(time.time())
    claims = {
        "iss": issuer_id(),
        "sub": subject,
        "aud": [audience or settings.TJWATER_MCP_AUDIENCE],
        "azp": client_id,
        "scope": " ".join(scopes),
        "iat": now,
        "nbf": now,
        "exp": now + ttl_s,
        "jti": secrets.token_urlsafe(16),
    }
    return jwt.encode(claims, private_key(), algorithm=ALGORITHM, headers={"kid": public_jwk()["kid"], "typ": "JWT"})


def discovery_view(request: HttpRequest) -> JsonResponse:
    """``GET /dev-issuer/.well-known/openid-configuration`` — 404 unless the dev issuer is enabled."""
    if not settings.TJWATER_DEV_ISSUER:
        raise Http404
    return JsonResponse(discovery_document())


def jwks_view(request: HttpRequest) -> JsonResponse:
    """``GET /dev-issuer/jwks`` — 404 unless the dev issuer is enabled."""
    if not settings.TJWATER_DEV_ISSUER:
        raise Http404
    return JsonResponse(public_jwks())


def reset_caches() -> None:
    """Forget the key read from the data directory (tests point ``TJWATER_DATA_DIR`` elsewhere)."""
    _load_private_key.cache_clear()
