"""The one builder of verified tokens and of JWKS set-ups for the tests.

* ``Issuer``: a tiny OpenID issuer in this process over real HTTP (``http.server``): a discovery
  document and a JWKS, keys added and rotated at will, outages (down, hanging, slow) on demand, and RS256
  or ES256 tokens signed with its keys; ``issuer.validator()`` is a ``TokenValidator`` trusting it.
* ``verified_token``: the ``VerifiedToken`` a validator would return, for binding contexts in-process
  (``contexts.services.context_create``) without a bearer round trip.
* ``dev_token``: a bearer token of the development issuer (the servers on tests.settings trust it).

The real Keycloak-shaped provider process of the interop tier is ``tests/support/idp.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contexts.tokens import TokenValidator, ValidatorConfig, VerifiedToken

AUDIENCE = "tjwater-mcp"
CLIENT = "tjwater-agent-mcp"


class Issuer:
    """A tiny OpenID issuer: a discovery document, a JWKS, and a counter of JWKS fetches."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.jwks_fetches = 0
        self.requests = 0  # every request, answered or not
        self.down = False
        # While `hanging` is set, every request waits (unanswered) until `released` is set: an issuer
        # that accepts connections and never answers. `waiting` counts requests held that way.
        self.hanging = threading.Event()
        self.released = threading.Event()
        self.waiting = 0
        self.delay_s = 0.0  # a slow issuer: every answer waits this long
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                issuer.requests += 1
                if issuer.hanging.is_set():
                    issuer.waiting += 1
                    issuer.released.wait(30)
                    issuer.waiting -= 1
                    return  # the connection closes without an answer
                if issuer.delay_s:
                    time.sleep(issuer.delay_s)
                if issuer.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path == "/realm/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.base}/realm/certs"}
                elif self.path == "/realm/certs":
                    issuer.jwks_fetches += 1
                    body = {"keys": [issuer.public_jwk(kid) for kid in issuer.published]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.base}/realm"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def hang(self) -> None:
        self.released.clear()
        self.hanging.set()

    def release(self) -> None:
        self.hanging.clear()
        self.released.set()

    def close(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()

    def add_key(self, kid: str, kind: str = "RSA", publish: bool = True) -> None:
        self.keys[kid] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
        if publish:
            self.published.append(kid)

    def public_jwk(self, kid: str) -> dict[str, Any]:
        key = self.keys[kid]
        algo = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
        return {**algo.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}

    def token(self, kid: str = "k1", alg: str | None = None, **overrides: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": "alice",
            "aud": [AUDIENCE, "account"],
            "azp": CLIENT,
            "scope": "mcp.catalog.read mcp.query",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
        }
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})

    def validator(self, **config: Any) -> TokenValidator:
        return TokenValidator(
            ValidatorConfig(
                issuer=self.url,
                audience=AUDIENCE,
                allowed_clients=[CLIENT],
                **{"refetch_cooldown_s": 0.0, "http_timeout_s": 2.0, **config},
            )
        )


def with_kid(issuer: Issuer, kid: str) -> str:
    """One of ``issuer``'s tokens whose header names key ``kid`` (its signature no longer matches)."""
    token = issuer.token()
    header = json.dumps({"alg": "RS256", "kid": kid, "typ": "JWT"}).encode()
    return jwt.utils.base64url_encode(header).decode() + "." + token.split(".", 1)[1]


def verified_token(
    subject: str,
    *,
    client: str = CLIENT,
    scopes: Iterable[str] = ("mcp.context.bind",),
    issuer: str | None = None,
    expires_at: int = 0,
) -> VerifiedToken:
    """The verified form of a bearer token of ``subject`` (issuer: the configured OIDC issuer, else the
    development issuer), for binding contexts in this process."""
    from django.conf import settings

    return VerifiedToken(
        issuer=issuer or settings.TJWATER_OIDC_ISSUER or settings.TJWATER_DEV_ISSUER_ID,
        subject=subject,
        client_id=client,
        scopes=frozenset(scopes),
        audience=(settings.TJWATER_MCP_AUDIENCE,),
        expires_at=expires_at,
    )


def dev_token(subject: str, *, client: str = CLIENT, scopes: Iterable[str] = ("mcp.query",), ttl_s: int = 600) -> str:
    """A bearer token of the development issuer (``contexts.dev_issuer``) for ``subject``."""
    from contexts import dev_issuer

    return dev_issuer.mint_token(subject=subject, client_id=client, scopes=list(scopes), ttl_s=ttl_s)
