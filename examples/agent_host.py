"""A reference agent host for tjwater-mcp: the host side of the protocol, worked out (seed 001 "认证与授权",
"续期和退出", "客户端策略与生命周期"). An integrator copies it; every rule below is tested in
``tests/interop/test_agent_host.py`` against the Keycloak-shaped provider in ``devtools/`` and hostile
variants of it.

What the host guarantees:

1. **A fixed issuer.** The issuer the host's credential belongs to is configured, never learnt. The
   resource's ``authorization_servers`` must contain it; the host's secret, a user's token and a worker's
   token go to that issuer's token endpoint and nowhere else.
2. **Discovery per the seed** (``Discovery``): an unauthenticated request to ``/mcp`` first; the
   protected-resource metadata from the 401 challenge's ``resource_metadata``, else the well-known on the
   MCP path, then at the root (the SDK's ``build_protected_resource_metadata_discovery_urls``); its
   ``resource`` must equal the configured MCP URL; the issuer's metadata at the RFC 8414 and OpenID forms
   in the specification's order (the SDK's ``build_oauth_authorization_server_metadata_discovery_urls``),
   its ``issuer`` compared as a plain string with the configured one; the token endpoint from it. Each
   document ≤ 64 KiB, 10 s for the whole discovery, redirects refused, remote ``http://`` refused (loopback
   allowed for development), no bearer or secret on any discovery request. The result is cached ≤ 5
   minutes and dropped after an MCP 401.
3. **Client authentication** ``client_secret_basic`` or ``client_secret_post``, as the issuer's metadata
   allows; ``resource`` (RFC 8707) on every grant; the token exchange (RFC 8693) also names the product
   ``audience``.
4. **The model never handles the handle or its scope.** ``model_view`` projects tool schemas without
   ``context_handle``; model input that names ``context_handle``, an identity field or a reserved scope
   field is refused (never silently overwritten); arguments are checked against the projected schema
   before any call.
5. **Renewal.** A 401 from ``/mcp`` drops the failed token and the discovery cache and renews once; a 403
   is returned as it is (no escalation). When the exchange refuses the product credential itself, the
   host raises ``credential_refresh_required`` to the session's refresher (the front end's Keycloak
   ``updateToken``, or the worker's ``client_credentials`` renewal), takes the updated credential and
   exchanges again, continuing the original request. Concurrent renewals are merged by principal and
   credential version; tokens are cached apart by issuer, resource, principal, scope and credential
   version. Investigations bind ``task_execution`` with the worker's service identity (``Worker``), not a
   user's.
6. **Resources.** ``resources/read`` carries the handle in ``_meta["cn.tjwater/contextHandle"]``; the
   URI carries neither handle nor token.
7. **Logout** cancels the session's calls in flight, revokes its bindings and clears its cached tokens.
8. **Pinned report revision.** A task binding remembers the report revision the server pinned (the one
   asked for, else the task's newest at the first bind); when the ten-minute context expires
   (``CONTEXT_EXPIRED``) the host binds again for the same session, task and run *with that revision*
   and repeats the call once, so a long investigation never silently moves to a newer report.

Run against ``make run`` with the devtools provider as the issuer (devtools/README.md), e.g.::

    TJWATER_HOST_CLIENT_SECRET=… .venv/bin/python examples/agent_host.py --mcp-url http://127.0.0.1:8000/mcp \\
        --issuer http://127.0.0.1:8080/realms/tjwater --user-token "$ALICE" --project tianjin-demo \\
        [--task-id 1 --run-id 2 --session-id session-demo-1 --execution-request exec-demo-1 \\
         --worker-client-secret …]   # an investigation runs under the worker's service identity

It prints what it did, one line per step, and never a token, secret or handle; a refused rule exits 2 with
the reason on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ipaddress
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from jsonschema import Draft202012Validator
from mcp.client import Client
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from pydantic import ValidationError

PROTOCOL = "2026-07-28"
REQUEST_KEY_META = "cn.tjwater/requestKey"
CONTEXT_HANDLE_META = "cn.tjwater/contextHandle"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
QUERY_SCOPES = "mcp.query mcp.context.bind"
CATALOG_SCOPE = "mcp.catalog.read"
PRODUCT_AUDIENCE = "tjwater-mcp"

MAX_DOCUMENT_BYTES = 64 * 1024
DISCOVERY_BUDGET_S = 10.0
DISCOVERY_CACHE_S = 300.0
TOKEN_REQUEST_TIMEOUT_S = 10.0

# Fields a model may never supply (seed 001: "若输入包含同名字段、身份字段或保留 scope 字段，宿主直接拒绝"):
# the handle, who is asking, and what the binding decides (project, purpose, task, session, scopes).
# ``run_id`` is not here: it is a model argument of analysis-run tools (an analysis run, not the task's run).
RESERVED_FIELDS = frozenset(
    {
        "context_handle",
        # identity
        "principal",
        "principal_id",
        "subject",
        "sub",
        "user",
        "user_id",
        "issuer",
        "iss",
        "client_id",
        "azp",
        "token",
        "access_token",
        "authorization",
        # reserved scope: what the host's binding decides
        "project",
        "project_id",
        "project_slug",
        "network",
        "network_id",
        "tenant",
        "purpose",
        "scope",
        "scopes",
        "permissions",
        "session_id",
        "parent_session_id",
        "task_id",
        "execution_request_id",
        "allowed_tools",
    }
)


class HostError(Exception):
    """The host refuses to go on (a discovery mismatch, a refused binding, refused model input)."""


class DiscoveryRefused(HostError):
    """Discovery broke one of its rules: the host sends nothing to that server."""


class ModelInputRefused(HostError):
    """The model's arguments name a reserved field or do not match the projected schema."""


class Forbidden(HostError):
    """A 403: the token lacks the scope, or the principal the permission. Never answered by asking for a
    wider token (no escalation) — the host reports it."""


class CredentialRefreshRequired(HostError):
    """``credential_refresh_required``: the issuer refused to exchange the session's product credential
    (expired or revoked). Only an updated credential from the session's refresher helps."""


def check_url(url: str, what: str) -> str:
    """``https://`` anywhere, ``http://`` only on a loopback host (development); anything else is refused
    before a connection is made."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return url
    if parts.scheme == "http" and host:
        if host == "localhost":
            return url
        try:
            if ipaddress.ip_address(host).is_loopback:
                return url
        except ValueError:
            pass
        raise DiscoveryRefused(f"{what}: a remote plain-http address is refused")
    raise DiscoveryRefused(f"{what}: not an http(s) URL")


@dataclass(frozen=True)
class Authorization:
    """What discovery learnt: the resource, the (configured) issuer, its token endpoint and the client
    authentication its metadata allows."""

    resource: str
    issuer: str
    token_endpoint: str
    auth_method: str
    scopes_supported: tuple[str, ...]


class Discovery:
    """Authorization discovery for one MCP resource and the one configured issuer (guarantee 2), cached
    for at most ``cache_s`` (≤ 5 minutes) and dropped by ``invalidate()`` after an MCP 401."""

    def __init__(
        self,
        mcp_url: str,
        issuer: str,
        *,
        budget_s: float = DISCOVERY_BUDGET_S,
        cache_s: float = DISCOVERY_CACHE_S,
        max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self.mcp_url = check_url(mcp_url, "MCP URL")
        self.issuer = check_url(issuer, "issuer")
        self.budget_s = budget_s
        self.cache_s = min(cache_s, DISCOVERY_CACHE_S)
        self.max_bytes = max_bytes
        self.runs = 0  # discoveries made (not answered from the cache)
        self._cached: tuple[float, Authorization] | None = None
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        self._cached = None

    async def get(self) -> Authorization:
        async with self._lock:  # concurrent callers share one discovery
            if self._cached is not None and time.monotonic() - self._cached[0] < self.cache_s:
                return self._cached[1]
            self.runs += 1
            # A client of its own: no auth, no cookies, no redirects — nothing of the host's reaches a
            # discovery endpoint.
            async with httpx2.AsyncClient(follow_redirects=False, timeout=self.budget_s) as http:
                try:
                    async with asyncio.timeout(self.budget_s):
                        found = await self._discover(http)
                except TimeoutError:
                    raise DiscoveryRefused(f"discovery exceeded its {self.budget_s:g} s budget") from None
                except httpx2.TransportError as exc:
                    raise DiscoveryRefused(f"discovery request failed ({type(exc).__name__})") from None
            self._cached = (time.monotonic(), found)
            return found

    async def _fetch(self, http: httpx2.AsyncClient, method: str, url: str, **kwargs: Any) -> tuple[int, Any, bytes]:
        """One discovery request: the URL rule, no redirects, at most ``max_bytes`` read."""
        check_url(url, "discovery URL")
        async with http.stream(method, url, **kwargs) as response:
            if 300 <= response.status_code < 400:
                raise DiscoveryRefused(f"discovery: a redirect from {url} is refused")
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise DiscoveryRefused(f"discovery: a document over {self.max_bytes} bytes is refused")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_bytes:
                    raise DiscoveryRefused(f"discovery: a document over {self.max_bytes} bytes is refused")
            return response.status_code, response, bytes(body)

    @staticmethod
    def _json(body: bytes, what: str) -> dict[str, Any]:
        try:
            document = json.loads(body)
        except ValueError:
            raise DiscoveryRefused(f"{what} is not JSON") from None
        if not isinstance(document, dict):
            raise DiscoveryRefused(f"{what} is not a JSON object")
        return document

    async def _discover(self, http: httpx2.AsyncClient) -> Authorization:
        # 1. An unauthenticated request: the 401 challenge names the resource metadata (RFC 9728 §5.1).
        body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": _meta()}}
        status, response, _ = await self._fetch(
            http, "POST", self.mcp_url, json=body, headers=_rpc_headers("server/discover")
        )
        if status != 401:
            raise DiscoveryRefused(f"expected a 401 challenge from the MCP URL, got {status}")
        challenged = extract_resource_metadata_from_www_auth(response)
        # 2. The challenge's URL, else the well-known on the MCP path, then at the root (SDK order).
        prm: dict[str, Any] | None = None
        for url in build_protected_resource_metadata_discovery_urls(challenged, self.mcp_url):
            status, _, document = await self._fetch(http, "GET", url)
            if status == 200:
                prm = self._json(document, "the protected-resource metadata")
                break
            if status >= 500:
                raise DiscoveryRefused(f"the protected-resource metadata answered {status}")
        if prm is None:
            raise DiscoveryRefused("no protected-resource metadata found")
        try:
            ProtectedResourceMetadata.model_validate(prm)
        except ValidationError:
            raise DiscoveryRefused("the protected-resource metadata is not valid RFC 9728 metadata") from None
        if prm.get("resource") != self.mcp_url:  # plain string equality (RFC 9728 §3.3)
            raise DiscoveryRefused("the protected-resource metadata describes another resource")
        if self.issuer not in (prm.get("authorization_servers") or []):
            raise DiscoveryRefused("the resource does not name the configured issuer")
        # 3. The issuer's metadata: RFC 8414 and OpenID forms in the specification's order (SDK).
        metadata: dict[str, Any] | None = None
        for url in build_oauth_authorization_server_metadata_discovery_urls(self.issuer, self.mcp_url):
            status, _, document = await self._fetch(http, "GET", url)
            if status == 200:
                metadata = self._json(document, "the issuer's metadata")
                break
            if status >= 500:
                raise DiscoveryRefused(f"the issuer's metadata answered {status}")
        if metadata is None:
            raise DiscoveryRefused("no metadata found for the configured issuer")
        try:
            OAuthMetadata.model_validate(metadata)
        except ValidationError:
            raise DiscoveryRefused("the issuer's metadata is not valid RFC 8414 metadata") from None
        # Compared on the document's own string: the SDK's model normalises URLs (RFC 8414 §3.3 wants a
        # simple string comparison).
        if metadata.get("issuer") != self.issuer:
            raise DiscoveryRefused("the issuer's metadata names another issuer")
        token_endpoint = check_url(str(metadata.get("token_endpoint", "")), "token endpoint")
        # RFC 8414 §2: absent means client_secret_basic.
        methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if "client_secret_basic" in methods:
            auth_method = "client_secret_basic"
        elif "client_secret_post" in methods:
            auth_method = "client_secret_post"
        else:
            raise DiscoveryRefused("the issuer allows neither client_secret_basic nor client_secret_post")
        return Authorization(
            resource=self.mcp_url,
            issuer=self.issuer,
            token_endpoint=token_endpoint,
            auth_method=auth_method,
            scopes_supported=tuple(prm.get("scopes_supported") or ()),
        )


@dataclass
class Session:
    """One principal's product credential as the host holds it: a user's session (the front end's token)
    or the worker's service identity. ``refresh`` answers ``credential_refresh_required`` with an updated
    credential (Keycloak ``updateToken`` in the front end, ``client_credentials`` in the worker)."""

    principal: str
    credential: str
    refresh: Callable[[], Awaitable[str]] | None = None
    version: int = 1

    def update(self, credential: str) -> None:
        """A new product credential arrived: a new version, so no token of the old one is reused."""
        self.credential = credential
        self.version += 1


def principal_of(token: str) -> str:
    """The ``sub`` of a JWT, read without verification — only as the key of the host's caches (the
    server verifies every token; a host that knows its user from its own session uses that instead)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims["sub"])
    except (IndexError, ValueError, KeyError, TypeError):
        return f"opaque:{secrets.token_hex(8)}"


@dataclass
class Binding:
    """A context the host created: the handle stays with the host, never with the model."""

    handle: str
    principal: str
    purpose: str
    project: str
    session_id: str
    tools: list[str]
    task: dict[str, Any] = field(default_factory=dict)  # task_id, run_id, execution request, parent session
    # The task report revision the session works on: pinned by the server at the first bind and passed
    # again on every renewal, so a renewed context never moves to a newer report (guarantee 8).
    report_revision: int | None = None
    renewals: int = 0


class RenewingBearer(httpx2.Auth):
    """Bearer auth that renews once on 401 and never on 403 (a 403 means the scope or the product
    permission is missing: asking again with more scopes is escalation, which a host never does)."""

    def __init__(self, host: AgentHost, session: Session, scope: str) -> None:
        self.host = host
        self.session = session
        self.scope = scope
        self.forbidden: str | None = None  # the RFC 6750 error of a 403, once seen

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.host.mcp_token(self.session, self.scope)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            token = await self.host.renew_after_401(self.session, self.scope, failed=token)
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
        if response.status_code == 403:
            self.forbidden = _challenge_error(response.headers.get("www-authenticate", ""))


def _challenge_error(header: str) -> str:
    for part in header.split(","):
        name, _, value = part.strip().removeprefix("Bearer ").partition("=")
        if name.strip() == "error":
            return value.strip().strip('"')
    return "forbidden"


TokenKey = tuple[str, str, str, str, int]  # issuer, resource, principal, scope, credential version


class AgentHost:
    """The host: discovery, tokens, bindings, calls, logout (see the module docstring)."""

    def __init__(
        self,
        mcp_url: str,
        issuer: str,
        client_id: str,
        client_secret: str,
        *,
        audience: str = PRODUCT_AUDIENCE,
        discovery: Discovery | None = None,
    ) -> None:
        self.mcp_url = mcp_url
        self.discovery = discovery or Discovery(mcp_url, issuer)
        self.issuer = self.discovery.issuer
        self.client_id = client_id
        self._client_secret = client_secret
        self.audience = audience
        parts = urlsplit(self.discovery.mcp_url)
        self.api_base = f"{parts.scheme}://{parts.netloc}/api/v1"
        self.bindings: list[Binding] = []
        self.exchanges = 0  # token exchanges made (not answered from the cache or a merged renewal)
        self._tokens: dict[TokenKey, str] = {}
        self._renewals: dict[tuple[str, int, str], asyncio.Future[str]] = {}
        self._inflight: dict[str, set[asyncio.Task[Any]]] = {}
        self._catalog: list[Any] | None = None

    # --- tokens ------------------------------------------------------------------------------------
    async def start(self) -> Authorization:
        return await self.discovery.get()

    async def _token_request(self, data: dict[str, str]) -> str:
        auth = await self.discovery.get()
        data = {**data, "resource": auth.resource}
        kwargs: dict[str, Any] = {}
        if auth.auth_method == "client_secret_basic":
            kwargs["auth"] = (self.client_id, self._client_secret)
        else:
            data.update(client_id=self.client_id, client_secret=self._client_secret)
        async with httpx2.AsyncClient(follow_redirects=False, timeout=TOKEN_REQUEST_TIMEOUT_S) as http:
            response = await http.post(auth.token_endpoint, data=data, **kwargs)
        if response.status_code == 200:
            return str(response.json()["access_token"])
        try:
            error = str(response.json().get("error", ""))
        except ValueError:
            error = ""
        if data["grant_type"] == TOKEN_EXCHANGE and error == "invalid_grant":
            raise CredentialRefreshRequired("credential_refresh_required")
        raise HostError(f"the token endpoint answered {response.status_code} {error}".strip())

    async def catalog_token(self) -> str:
        """The host's own service identity: ``client_credentials`` with the catalog scope only."""
        return await self._token_request({"grant_type": "client_credentials", "scope": CATALOG_SCOPE})

    async def _exchange(self, session: Session, scope: str) -> str:
        """RFC 8693: the session's product credential for an /mcp token with ``scope`` (and nothing
        more), for the resource and the product audience."""
        token = await self._token_request(
            {
                "grant_type": TOKEN_EXCHANGE,
                "subject_token": session.credential,
                "subject_token_type": ACCESS_TOKEN_TYPE,
                "requested_token_type": ACCESS_TOKEN_TYPE,
                "audience": self.audience,
                "scope": scope,
            }
        )
        self.exchanges += 1
        return token

    def token_key(self, session: Session, scope: str) -> TokenKey:
        return (self.issuer, self.discovery.mcp_url, session.principal, scope, session.version)

    def hold(self, session: Session, token: str, scope: str = QUERY_SCOPES) -> None:
        """Put a token the host already holds (e.g. kept from before) into the cache."""
        self._tokens[self.token_key(session, scope)] = token

    async def mcp_token(self, session: Session, scope: str = QUERY_SCOPES) -> str:
        token = self._tokens.get(self.token_key(session, scope))
        if token is not None:
            return token
        return await self._renew(session, scope)

    async def renew_after_401(self, session: Session, scope: str, *, failed: str) -> str:
        """An MCP 401: drop this principal's failed token and the discovery cache, renew once."""
        stale = [k for k, v in self._tokens.items() if k[2] == session.principal and v == failed]
        if stale:  # the first 401 for this token; later ones find it gone and join the renewal
            for key in stale:
                del self._tokens[key]
            self.discovery.invalidate()
        return await self._renew(session, scope)

    async def _renew(self, session: Session, scope: str) -> str:
        """One exchange per (principal, credential version, scope) at a time: concurrent renewals wait
        for it. ``credential_refresh_required`` asks the session's refresher once, then exchanges again."""
        merge_key = (session.principal, session.version, scope)
        pending = self._renewals.get(merge_key)
        if pending is not None:
            return await asyncio.shield(pending)
        cached = self._tokens.get(self.token_key(session, scope))
        if cached is not None:  # renewed while this caller was on its way
            return cached
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if unawaited
        self._renewals[merge_key] = future
        try:
            try:
                token = await self._exchange(session, scope)
            except CredentialRefreshRequired:
                if session.refresh is None:
                    raise
                session.update(await session.refresh())
                token = await self._exchange(session, scope)
            self._tokens[self.token_key(session, scope)] = token
            future.set_result(token)
            return token
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc if isinstance(exc, Exception) else HostError("renewal cancelled"))
            raise
        finally:
            del self._renewals[merge_key]

    # --- catalog and model view --------------------------------------------------------------------
    async def list_catalog(self) -> list[Any]:
        if self._catalog is None:
            token = await self.catalog_token()
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
                self._catalog = list((await client.list_tools()).tools)
        return self._catalog

    @staticmethod
    def model_view(tools: list[Any], allowed: list[str] | None = None) -> list[dict[str, Any]]:
        """What a model sees: the tools it may call, their schemas without ``context_handle``."""
        view = []
        for tool in tools:
            if allowed is not None and tool.name not in allowed:
                continue
            schema = json.loads(json.dumps(tool.input_schema))
            schema.get("properties", {}).pop("context_handle", None)
            schema["required"] = [r for r in schema.get("required", []) if r != "context_handle"]
            view.append({"name": tool.name, "description": tool.description, "input_schema": schema})
        return view

    async def check_model_arguments(self, binding: Binding, tool: str, arguments: Any) -> None:
        """Guarantee 4: refuse reserved fields, tools outside the binding, and arguments that do not
        match the projected schema — before anything is sent."""
        if not isinstance(arguments, dict):
            raise ModelInputRefused("the arguments are not an object")
        reserved = sorted(RESERVED_FIELDS & set(arguments))
        if reserved:
            raise ModelInputRefused(f"model input may not contain {', '.join(reserved)}")
        if tool not in binding.tools:
            raise ModelInputRefused(f"{tool} is not a tool of this context")
        view = {t["name"]: t for t in self.model_view(await self.list_catalog(), [tool])}
        if tool not in view:
            raise ModelInputRefused(f"{tool} is not in the catalog")
        errors = sorted(Draft202012Validator(view[tool]["input_schema"]).iter_errors(arguments), key=str)
        if errors:
            raise ModelInputRefused(f"the arguments do not match {tool}'s schema: {errors[0].message}")

    # --- contexts ----------------------------------------------------------------------------------
    async def bind(self, session: Session, *, project: str, purpose: str, session_id: str, **task: Any) -> Binding:
        """Create a context. ``task`` holds a task purpose's fields and optionally ``report_revision``
        (without it the server pins the task's newest revision, and the binding remembers which)."""
        data = await self._create_context(session, project=project, purpose=purpose, session_id=session_id, **task)
        task = {k: v for k, v in task.items() if k != "report_revision"}
        binding = Binding(
            data["context_handle"],
            session.principal,
            purpose,
            project,
            session_id,
            list(data["tools"]),
            task=task,
            report_revision=data.get("report_revision"),
        )
        self.bindings.append(binding)
        return binding

    async def _create_context(self, session: Session, **body: Any) -> dict[str, Any]:
        async with httpx2.AsyncClient(auth=RenewingBearer(self, session, QUERY_SCOPES), timeout=30) as http:
            response = await http.post(f"{self.api_base}/mcp-query-contexts", json=body)
        if response.status_code != 201:
            raise HostError(f"binding refused: {response.status_code} {response.json().get('code', '')}")
        return dict(response.json())

    async def renew_binding(self, session: Session, binding: Binding) -> Binding:
        """Guarantee 8: a context expires after ten minutes; the host binds a new one for the same session,
        task and run — with the report revision the session was working on, never the newest by
        default — and swaps the handle in place (the model never saw either). The tools are the new
        binding's (a renewal never widens them beyond what the server decides now)."""
        extra = {"report_revision": binding.report_revision} if binding.report_revision is not None else {}
        data = await self._create_context(
            session,
            project=binding.project,
            purpose=binding.purpose,
            session_id=binding.session_id,
            **binding.task,
            **extra,
        )
        binding.handle = data["context_handle"]
        binding.tools = list(data["tools"])
        binding.report_revision = data.get("report_revision")
        binding.renewals += 1
        return binding

    async def _tracked(self, session: Session, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run a call as a task logout can cancel."""
        task = asyncio.get_running_loop().create_task(work())
        tasks = self._inflight.setdefault(session.principal, set())
        tasks.add(task)
        try:
            return await task
        finally:
            tasks.discard(task)

    async def call(
        self, session: Session, binding: Binding, tool: str, arguments: dict[str, Any], *, request_key: str
    ) -> Any:
        """Call a tool as the model asked (``arguments`` without the handle); the host checks them, then
        injects the handle and its application request key."""
        await self.check_model_arguments(binding, tool, arguments)
        auth = RenewingBearer(self, session, QUERY_SCOPES)

        async def work() -> Any:
            http = httpx2.AsyncClient(auth=auth, timeout=60)
            async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
                return await client.call_tool(
                    tool, {**arguments, "context_handle": binding.handle}, meta={REQUEST_KEY_META: request_key}
                )

        try:
            result = await self._tracked(session, work)
            if result.is_error and (result.structured_content or {}).get("code") == "CONTEXT_EXPIRED":
                await self.renew_binding(session, binding)  # guarantee 8: same task, run and revision
                result = await self._tracked(session, work)
            return result
        except asyncio.CancelledError:
            raise
        except Exception:
            if auth.forbidden:  # the SDK reports an HTTP 403 as a generic error: say what it was
                raise Forbidden(auth.forbidden) from None
            raise

    async def read_resource(self, session: Session, binding: Binding, uri: str) -> Any:
        """``resources/read`` with the handle in ``_meta`` (guarantee 6)."""
        auth = RenewingBearer(self, session, QUERY_SCOPES)

        async def work() -> Any:
            http = httpx2.AsyncClient(auth=auth, timeout=60)
            async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
                return await client.read_resource(uri, meta={CONTEXT_HANDLE_META: binding.handle})

        return await self._tracked(session, work)

    async def logout(self, session: Session) -> int:
        """Guarantee 7: cancel the session's calls in flight, revoke its bindings, clear its cached tokens.
        Returns how many bindings were revoked."""
        tasks = self._inflight.pop(session.principal, set())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        mine = [b for b in self.bindings if b.principal == session.principal]
        revoked = 0
        if mine:
            async with httpx2.AsyncClient(auth=RenewingBearer(self, session, QUERY_SCOPES), timeout=30) as http:
                for binding in mine:
                    response = await http.delete(f"{self.api_base}/mcp-query-contexts/{binding.handle}")
                    revoked += response.status_code == 204
        self.bindings = [b for b in self.bindings if b.principal != session.principal]
        for key in [k for k in self._tokens if k[2] == session.principal]:
            del self._tokens[key]
        return revoked

    def cached_principals(self) -> set[str]:
        return {key[2] for key in self._tokens}


@dataclass
class Worker:
    """The investigation worker's side: its own ``client_credentials`` at the issuer (its secret never
    reaches the host). Its service token is the product credential of the investigation's session; when
    it expires the worker renews it and hands the new one to the host, which exchanges it again."""

    token_endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    renewals: int = 0

    async def service_token(self) -> str:
        check_url(self.token_endpoint, "worker token endpoint")
        async with httpx2.AsyncClient(follow_redirects=False, timeout=TOKEN_REQUEST_TIMEOUT_S) as http:
            response = await http.post(
                self.token_endpoint,
                data={"grant_type": "client_credentials"},
                auth=(self.client_id, self.client_secret),
            )
        if response.status_code != 200:
            raise HostError(f"the worker's client_credentials grant answered {response.status_code}")
        self.renewals += 1
        return str(response.json()["access_token"])

    async def session(self) -> Session:
        """The investigation's session: the worker's service identity, renewed by the worker."""
        token = await self.service_token()
        return Session(principal=principal_of(token), credential=token, refresh=self.service_token)


def _meta() -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}


def _rpc_headers(method: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": method,
    }


def _short(result: Any) -> str:
    data = result.structured_content or {}
    if result.is_error:
        return f"error {data.get('code')}"
    return f"ok source={data.get('source')} evidence_id={data.get('evidence_id')}"


async def run(options: argparse.Namespace) -> int:
    host = AgentHost(options.mcp_url, options.issuer, options.client_id, options.client_secret)
    auth = await host.start()
    print(f"authorization: issuer={auth.issuer} resource={auth.resource} client_auth={auth.auth_method}")
    catalog = await host.list_catalog()
    print(f"catalog: {len(catalog)} tools")
    user = Session(principal=principal_of(options.user_token), credential=options.user_token)
    sessions = [user]
    try:
        chat = await host.bind(
            user, project=options.project, purpose="ordinary_chat", session_id=f"host-{secrets.token_hex(4)}"
        )
        view = host.model_view(catalog, chat.tools)
        leaked = any("context_handle" in json.dumps(t["input_schema"]) for t in view)
        print(f"ordinary_chat: {len(chat.tools)} tools; model view hides the handle: {not leaked}")
        key = f"chat-{secrets.token_hex(6)}"
        first = await host.call(user, chat, options.tool, json.loads(options.arguments), request_key=key)
        print(f"call {options.tool}: {_short(first)}")
        if options.task_id:
            if not options.worker_client_secret:
                raise HostError("--worker-client-secret is required for an investigation (its service identity)")
            worker = Worker(auth.token_endpoint, options.worker_client_id, options.worker_client_secret)
            service = await worker.session()
            sessions.append(service)
            task = {"task_id": options.task_id, "run_id": options.run_id}
            if options.execution_request:
                task["execution_request_id"] = options.execution_request
            execution = await host.bind(
                service, project=options.project, purpose="task_execution", session_id=options.session_id, **task
            )
            result = await host.call(
                service, execution, options.tool, json.loads(options.arguments), request_key=f"exec-{key}"
            )
            print(f"task_execution call (worker identity): {_short(result)}")
            uri = (result.structured_content or {}).get("evidence_uri")
            if uri:
                read = await host.read_resource(service, execution, uri)
                print(f"resources/read evidence: {len(read.contents)} content(s)")
            reader = await host.bind(
                service,
                project=options.project,
                purpose="task_reader",
                session_id=f"{options.session_id}-reader-{secrets.token_hex(3)}",
                parent_session_id=options.session_id,
                **{k: v for k, v in task.items() if k != "execution_request_id"},
            )
            result = await host.call(
                service, reader, options.tool, json.loads(options.arguments), request_key=f"read-{key}"
            )
            print(f"task_reader call: {_short(result)}; reader tools: {len(reader.tools)}")
    finally:
        revoked = 0
        for session in sessions:
            revoked += await host.logout(session)
        print(f"contexts revoked at logout: {revoked}; token exchanges: {host.exchanges}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="tjwater-mcp reference agent host")
    parser.add_argument("--mcp-url", required=True, help="the configured MCP resource URI")
    parser.add_argument(
        "--issuer", default=os.environ.get("TJWATER_HOST_ISSUER", ""), help="the fixed issuer of the host's client"
    )
    parser.add_argument("--user-token", default=os.environ.get("TJWATER_USER_TOKEN", ""), help="the user's token")
    parser.add_argument("--client-id", default="tjwater-agent-mcp")
    parser.add_argument("--client-secret", default=os.environ.get("TJWATER_HOST_CLIENT_SECRET", ""))
    parser.add_argument("--worker-client-id", default="tjwater-worker")
    parser.add_argument("--worker-client-secret", default=os.environ.get("TJWATER_WORKER_CLIENT_SECRET", ""))
    parser.add_argument("--project", required=True)
    parser.add_argument("--tool", default="get_element_properties")
    parser.add_argument("--arguments", default='{"element_type": "pipe", "element_id": "LINK-1523"}')
    parser.add_argument("--task-id", type=int)
    parser.add_argument("--run-id", type=int)
    parser.add_argument("--session-id", default="")
    parser.add_argument("--execution-request", default="")
    options = parser.parse_args()
    if not options.user_token or not options.client_secret or not options.issuer:
        parser.error("--issuer, --user-token and --client-secret (or their environment variables) are required")
    try:
        return asyncio.run(run(options))
    except HostError as exc:
        print(f"refused: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
