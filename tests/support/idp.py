"""Driver for the Keycloak-shaped OpenID provider in ``devtools/idp/provider.mjs`` (a real Node process).

Tests get tokens from it the way real clients do: client_credentials and RFC 8693 token exchange at the
token endpoint, and user tokens through the real login form (authorization code + PKCE, driven with an
HTTP client). Nothing here fakes a provider response.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2

from tests.support.servers import ROOT, stop_process

DEVTOOLS = ROOT / "devtools"
NODE = DEVTOOLS / "node_modules" / ".bin" / "node"
PROVIDER_SCRIPT = DEVTOOLS / "idp" / "provider.mjs"

AGENT_CLIENT_ID = "tjwater-agent-mcp"
AGENT_CLIENT_SECRET = "tjwater-agent-mcp-dev-secret"  # noqa: S105 - the dev provider's documented default
ADMIN_CLIENT_ID = "tjwater-admin"
ADMIN_CLIENT_SECRET = "tjwater-admin-dev-secret"  # noqa: S105 - the dev provider's documented default
HOST_CLIENT_ID = "tjwater-host"
OPERATOR_ROLE = "tjwater-operator"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"

USERS = {
    "alice": ("a11ce000-0000-4000-8000-000000000001", "alice-password"),
    "bob": ("b0b00000-0000-4000-8000-000000000002", "bob-password"),
}


class LoginFormParser(HTMLParser):
    """Finds the login form's action URL in the provider's HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "form" and self.action is None:
            self.action = dict(attrs).get("action")


def login_form_action(html: str) -> str:
    parser = LoginFormParser()
    parser.feed(html)
    if not parser.action:
        raise AssertionError("the provider page has no login form")
    return parser.action


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def submit_login(client: httpx2.Client, login_page: httpx2.Response, username: str, password: str) -> httpx2.Response:
    """Post the provider's login form found on ``login_page`` (not following redirects)."""
    action = urljoin(str(login_page.url), login_form_action(login_page.text))
    return client.post(action, data={"username": username, "password": password})


def follow(client: httpx2.Client, response: httpx2.Response, *, stop_prefix: str, limit: int = 10) -> httpx2.Response:
    """Follow redirects by hand until one points at ``stop_prefix`` (returned unfollowed) or a page."""
    for _ in range(limit):
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or location is None:
            return response
        target = urljoin(str(response.url), location)
        if target.startswith(stop_prefix):
            return response
        response = client.get(target)
    raise AssertionError("too many redirects")


@dataclass
class IdentityProvider:
    """A running provider process and the token requests tests make against it."""

    issuer: str
    port: int
    admin_secret: str
    process: subprocess.Popen[bytes]
    log_path: Path
    audience: str = "tjwater-mcp"
    _http: httpx2.Client = field(default_factory=lambda: httpx2.Client(timeout=10))

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    def endpoint(self, name: str) -> str:
        return f"{self.issuer}/protocol/openid-connect/{name}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _token(self, data: dict[str, str], *, resource: str | None, scope: str | None) -> str:
        """POST ``data`` (with ``resource`` and ``scope`` when given) to the token endpoint as the agent
        client; the access token."""
        if resource:
            data["resource"] = resource
        if scope:
            data["scope"] = scope
        response = self._http.post(self.token_endpoint, data=data, auth=(AGENT_CLIENT_ID, AGENT_CLIENT_SECRET))
        response.raise_for_status()
        return str(response.json()["access_token"])

    def client_credentials_token(self, *, resource: str | None = None, scope: str | None = None) -> str:
        data = {"grant_type": "client_credentials"}
        return self._token(data, resource=resource, scope=scope)

    def user_token(self, username: str, *, resource: str | None = None) -> str:
        """A user's access token for the host client, obtained through the real login form."""
        _, password = USERS[username]
        verifier, challenge = pkce_pair()
        redirect_uri = "http://127.0.0.1:1/callback"
        params = {
            "client_id": HOST_CLIENT_ID,
            "response_type": "code",
            "scope": "openid profile",
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": secrets.token_urlsafe(16),
        }
        if resource:
            params["resource"] = resource
        with httpx2.Client(timeout=10) as browser:
            page = follow(browser, browser.get(self.endpoint("auth"), params=params), stop_prefix=redirect_uri)
            landed = follow(browser, submit_login(browser, page, username, password), stop_prefix=redirect_uri)
        location = landed.headers.get("location", "")
        code = parse_qs(urlsplit(location).query).get("code")
        if not location.startswith(redirect_uri) or not code:
            raise AssertionError(f"login of {username} did not return a code (status {landed.status_code})")
        data = {
            "grant_type": "authorization_code",
            "code": code[0],
            "redirect_uri": redirect_uri,
            "client_id": HOST_CLIENT_ID,
            "code_verifier": verifier,
        }
        if resource:
            data["resource"] = resource
        response = self._http.post(self.token_endpoint, data=data)
        response.raise_for_status()
        return str(response.json()["access_token"])

    def exchange(self, subject_token: str, *, resource: str | None = None, scope: str | None = None) -> str:
        """RFC 8693 token exchange by tjwater-agent-mcp: the user's token becomes an /mcp token."""
        data = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
        }
        return self._token(data, resource=resource, scope=scope)

    def rotate(self, *, drop_old: bool) -> dict[str, object]:
        response = self._http.post(
            f"http://127.0.0.1:{self.port}/admin/rotate",
            params={"drop_old": "1"} if drop_old else {},
            headers={"Authorization": f"Bearer {self.admin_secret}"},
        )
        response.raise_for_status()
        return dict(response.json())

    def stop(self) -> None:
        self._http.close()
        stop_process(self.process)


def start_provider(log_path: Path, **extra_env: str) -> IdentityProvider:
    """Start the provider on a free port (it picks one and reports it) and wait until it serves."""
    if not NODE.exists():
        raise RuntimeError("devtools/node_modules is missing: run `make setup` (npm ci in devtools/)")
    admin_secret = secrets.token_urlsafe(24)
    env = {**os.environ, "IDP_PORT": "0", "IDP_ADMIN_SECRET": admin_secret, **extra_env}
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [str(NODE), str(PROVIDER_SCRIPT)], cwd=DEVTOOLS, env=env, stdout=subprocess.PIPE, stderr=log_file
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # the provider prints its issuer once it listens
    if not line:
        process.wait(timeout=5)
        raise RuntimeError(f"the provider exited early:\n{log_path.read_text(errors='replace')}")
    info = json.loads(line)
    provider = IdentityProvider(
        issuer=info["issuer"],
        port=int(info["port"]),
        admin_secret=admin_secret,
        process=process,
        log_path=log_path,
        audience=info["audience"],
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                return provider
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    provider.stop()
    raise RuntimeError(f"the provider did not answer:\n{provider.log()}")


def idp_env(idp: IdentityProvider, **extra: str) -> dict[str, str]:
    """Server environment trusting ``idp`` as the one issuer: bearer tokens on /mcp and the context API
    (the dev issuer off) and operator sign-in to the admin (mozilla-django-oidc)."""
    return {
        "TJWATER_OIDC_ISSUER": idp.issuer,
        "TJWATER_DEV_ISSUER": "0",
        "TJWATER_MCP_AUDIENCE": idp.audience,
        "OIDC_RP_CLIENT_ID": ADMIN_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": ADMIN_CLIENT_SECRET,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": idp.endpoint("auth"),
        "OIDC_OP_TOKEN_ENDPOINT": idp.endpoint("token"),
        "OIDC_OP_USER_ENDPOINT": idp.endpoint("userinfo"),
        "OIDC_OP_JWKS_ENDPOINT": idp.endpoint("certs"),
        "OIDC_OP_END_SESSION_ENDPOINT": idp.endpoint("logout"),
        **extra,
    }


@dataclass
class Members:
    """A project with members committed to the shared test database (the server processes see them)."""

    project_slug: str
    principals: dict[str, int]


def create_members(issuer: str, subjects: dict[str, list[str]]) -> Members:
    """Commit a fresh project with ``subjects`` (subject → permissions) as its members."""
    from contexts.models import Membership, Principal, Project

    slug = f"interop-{secrets.token_hex(4)}"
    project = Project.objects.create(slug=slug, name=f"Interop {slug}")
    ids: dict[str, int] = {}
    for subject, permissions in subjects.items():
        principal, _ = Principal.objects.get_or_create(issuer=issuer, subject=subject)
        Membership.objects.create(principal=principal, project=project, permissions=permissions)
        ids[subject] = principal.pk
    return Members(project_slug=slug, principals=ids)


def delete_members(members: Members) -> None:
    """Remove what ``create_members`` committed (principals only where no other membership holds them)."""
    from contexts.models import Principal, Project

    Project.objects.filter(slug=members.project_slug).delete()
    Principal.objects.filter(pk__in=members.principals.values(), memberships__isnull=True).delete()


def create_context(server_url: str, token: str, project: str, *, session_id: str | None = None) -> str:
    """Bind an ordinary_chat context through the real REST API and return its handle."""
    response = httpx2.post(
        f"{server_url}/api/v1/mcp-query-contexts",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "project": project,
            "session_id": session_id or f"interop-{secrets.token_hex(4)}",
            "purpose": "ordinary_chat",
        },
        timeout=15,
    )
    assert response.status_code == 201, (response.status_code, response.text)
    return str(response.json()["context_handle"])
