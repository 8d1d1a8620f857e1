"""A reference agent host for tjwater-mcp: the host side of the protocol, worked out (seed 001 "客户端策略与生命周期").

What a host does, in order, and where each step comes from:

1. **Discover authorization from the 401 challenge** (RFC 9728 §5.1): an unauthenticated ``server/discover``
   gets ``401`` with ``WWW-Authenticate: Bearer resource_metadata="…"``; the protected-resource metadata
   names the resource (it must equal the URL we called, RFC 9728 §3.3) and its one authorization server;
   the server's OpenID metadata must name exactly that issuer (compared strictly, RFC 8414 §3.3 / OIDC
   Discovery §4.3) — otherwise the host stops.
2. **Catalog with a service identity**: a ``client_credentials`` token (scope ``mcp.catalog.read``,
   ``resource`` = the MCP URL, RFC 8707) lists the real catalog with the official SDK client.
3. **A user's token becomes an MCP token** by RFC 8693 token exchange (the user's token never reaches /mcp).
4. **Contexts**: ``POST /api/v1/mcp-query-contexts`` binds one project and purpose; the handle is a secret
   the host keeps — the model never sees it: ``model_view`` projects the tool schemas without
   ``context_handle``, and ``call`` injects it (and an application request key in
   ``_meta["cn.tjwater/requestKey"]``, which investigations need for exactly-once evidence).
5. **401 → renew once, 403 → never escalate**: an expired token is renewed (exchanged again) once and the
   request retried; a 403 is returned as it is. Concurrent renewals for one principal are merged into one
   exchange (single flight).
6. **Investigations**: a ``task_execution`` context for the current run (session = the run's lease holder),
   and a ``task_reader`` sub-agent bound to the parent session.
7. **Exit**: every context the host created is deleted (``DELETE /api/v1/mcp-query-contexts/{handle}``).

Run against ``make run`` with the devtools provider as the issuer (devtools/README.md), e.g.::

    .venv/bin/python examples/agent_host.py --mcp-url http://127.0.0.1:8000/mcp --user-token "$ALICE" \\
        --project tianjin-demo [--task-id 1 --run-id 2 --session-id session-demo-1 --execution-request exec-demo-1]

The test ``tests/interop/test_agent_host.py`` runs it end to end against the real provider and server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

PROTOCOL = "2026-07-28"
REQUEST_KEY_META = "cn.tjwater/requestKey"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
QUERY_SCOPES = "mcp.query mcp.context.bind"


class HostError(Exception):
    """The host refuses to go on (a discovery mismatch, a refused binding)."""


class Forbidden(HostError):
    """A 403: the token lacks the scope, or the principal the permission. Never answered by asking for a
    wider token (no escalation) — the host reports it."""


@dataclass(frozen=True)
class Authorization:
    """What step 1 learnt: the resource and its issuer's token endpoint."""

    resource: str
    issuer: str
    token_endpoint: str
    scopes_supported: tuple[str, ...]


def _challenge_params(header: str) -> dict[str, str]:
    """The auth-params of a ``Bearer`` challenge (RFC 7235 §2.1), e.g. ``resource_metadata``."""
    scheme, _, rest = header.partition(" ")
    if scheme.lower() != "bearer":
        raise HostError("the 401 challenge is not a Bearer challenge")
    return {k.lower(): v for k, v in re.findall(r'([A-Za-z_]+)="([^"]*)"', rest)}


async def discover_authorization(http: httpx2.AsyncClient, mcp_url: str) -> Authorization:
    """Step 1: 401 challenge → protected-resource metadata → the issuer's metadata, compared strictly."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": _meta()}}
    response = await http.post(mcp_url, json=body, headers=_rpc_headers("server/discover"))
    if response.status_code != 401 or "www-authenticate" not in response.headers:
        raise HostError(f"expected a 401 challenge from {mcp_url}, got {response.status_code}")
    metadata_url = _challenge_params(response.headers["www-authenticate"]).get("resource_metadata")
    if not metadata_url:
        raise HostError("the challenge names no resource_metadata")
    prm = (await http.get(metadata_url)).raise_for_status().json()
    if prm.get("resource") != mcp_url:
        raise HostError("the protected-resource metadata describes another resource")
    servers = prm.get("authorization_servers") or []
    if len(servers) != 1:
        raise HostError("expected exactly one authorization server")
    issuer = servers[0]
    as_meta = (await http.get(f"{issuer.rstrip('/')}/.well-known/openid-configuration")).raise_for_status().json()
    if as_meta.get("issuer") != issuer:  # exact string comparison, no normalisation
        raise HostError("the authorization server's metadata names another issuer")
    return Authorization(
        resource=prm["resource"],
        issuer=issuer,
        token_endpoint=as_meta["token_endpoint"],
        scopes_supported=tuple(prm.get("scopes_supported", [])),
    )


class TokenSource:
    """The MCP token of one principal, renewed by exchanging the user's token again. Concurrent renewals
    are merged: whoever finds the token already replaced since it failed takes the new one."""

    def __init__(self, host: AgentHost, user_token: str, *, token: str | None = None) -> None:
        self._host = host
        self._user_token = user_token
        self._token = token  # a token the host already holds (None: exchange on first use)
        self._lock = asyncio.Lock()
        self.renewals = 0

    async def current(self) -> str:
        if self._token is None:
            await self.renew(failed=None)
        assert self._token is not None
        return self._token

    async def renew(self, *, failed: str | None) -> str:
        async with self._lock:
            if self._token is not None and self._token != failed:
                return self._token  # someone renewed while we waited: merged
            self._token = await self._host.exchange(self._user_token)
            self.renewals += 1
            return self._token


class RenewingBearer(httpx2.Auth):
    """Bearer auth that renews once on 401 and never on 403 (a 403 means the scope or the product
    permission is missing: asking again with more scopes is escalation, which a host never does)."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self.forbidden: str | None = None  # the RFC 6750 error of a 403, once seen

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.source.current()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            token = await self.source.renew(failed=token)
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
        if response.status_code == 403:
            challenge = response.headers.get("www-authenticate", "")
            self.forbidden = _challenge_params(challenge).get("error", "forbidden") if challenge else "forbidden"


@dataclass
class Binding:
    """A context the host created: the handle stays with the host, never with the model."""

    handle: str
    purpose: str
    project: str
    session_id: str
    tools: list[str]


@dataclass
class AgentHost:
    mcp_url: str
    client_id: str
    client_secret: str
    auth: Authorization | None = None
    bindings: list[Binding] = field(default_factory=list)

    def __post_init__(self) -> None:
        parts = urlsplit(self.mcp_url)
        self.api_base = f"{parts.scheme}://{parts.netloc}/api/v1"
        self.http = httpx2.AsyncClient(timeout=30)

    # --- tokens ------------------------------------------------------------------------------------
    async def start(self) -> Authorization:
        self.auth = await discover_authorization(self.http, self.mcp_url)
        return self.auth

    async def _token_request(self, data: dict[str, str]) -> str:
        assert self.auth is not None, "call start() first"
        response = await self.http.post(self.auth.token_endpoint, data=data, auth=(self.client_id, self.client_secret))
        response.raise_for_status()
        return str(response.json()["access_token"])

    async def catalog_token(self) -> str:
        assert self.auth is not None
        return await self._token_request(
            {"grant_type": "client_credentials", "scope": "mcp.catalog.read", "resource": self.auth.resource}
        )

    async def exchange(self, user_token: str) -> str:
        """RFC 8693: the user's token for an /mcp token with the query scopes (and nothing more)."""
        assert self.auth is not None
        return await self._token_request(
            {
                "grant_type": TOKEN_EXCHANGE,
                "subject_token": user_token,
                "subject_token_type": ACCESS_TOKEN_TYPE,
                "requested_token_type": ACCESS_TOKEN_TYPE,
                "resource": self.auth.resource,
                "scope": QUERY_SCOPES,
            }
        )

    # --- catalog and model view --------------------------------------------------------------------
    async def list_catalog(self) -> list[Any]:
        token = await self.catalog_token()
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
            return list((await client.list_tools()).tools)

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

    # --- contexts ----------------------------------------------------------------------------------
    async def bind(self, source: TokenSource, *, project: str, purpose: str, session_id: str, **task: Any) -> Binding:
        body = {"project": project, "session_id": session_id, "purpose": purpose, **task}
        async with httpx2.AsyncClient(auth=RenewingBearer(source), timeout=30) as http:
            response = await http.post(f"{self.api_base}/mcp-query-contexts", json=body)
        if response.status_code != 201:
            raise HostError(f"binding refused: {response.status_code} {response.json().get('code', '')}")
        data = response.json()
        binding = Binding(data["context_handle"], purpose, project, session_id, list(data["tools"]))
        self.bindings.append(binding)
        return binding

    async def call(
        self, source: TokenSource, binding: Binding, tool: str, arguments: dict[str, Any], *, request_key: str
    ) -> Any:
        """Call a tool as the model asked (``arguments`` without the handle); the host injects the handle
        and its application request key."""
        auth = RenewingBearer(source)
        http = httpx2.AsyncClient(auth=auth, timeout=60)
        try:
            async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
                return await client.call_tool(
                    tool, {**arguments, "context_handle": binding.handle}, meta={REQUEST_KEY_META: request_key}
                )
        except Exception:
            if auth.forbidden:  # the SDK reports an HTTP 403 as a generic error: say what it was
                raise Forbidden(auth.forbidden) from None
            raise

    async def close(self, source: TokenSource) -> int:
        """Delete every context this host created; returns how many were deleted."""
        deleted = 0
        async with httpx2.AsyncClient(auth=RenewingBearer(source), timeout=30) as http:
            for binding in self.bindings:
                response = await http.delete(f"{self.api_base}/mcp-query-contexts/{binding.handle}")
                deleted += response.status_code == 204
        self.bindings.clear()
        await self.http.aclose()
        return deleted


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
    host = AgentHost(options.mcp_url, options.client_id, options.client_secret)
    auth = await host.start()
    print(f"authorization: issuer={auth.issuer} resource={auth.resource}")
    catalog = await host.list_catalog()
    print(f"catalog: {len(catalog)} tools")
    source = TokenSource(host, options.user_token)
    try:
        chat = await host.bind(
            source, project=options.project, purpose="ordinary_chat", session_id=f"host-{secrets.token_hex(4)}"
        )
        view = host.model_view(catalog, chat.tools)
        leaked = any("context_handle" in json.dumps(t["input_schema"]) for t in view)
        print(f"ordinary_chat: {len(chat.tools)} tools; model view hides the handle: {not leaked}")
        key = f"chat-{secrets.token_hex(6)}"
        first = await host.call(source, chat, options.tool, json.loads(options.arguments), request_key=key)
        print(f"call {options.tool}: {_short(first)}")
        if options.task_id:
            task = {"task_id": options.task_id, "run_id": options.run_id}
            if options.execution_request:
                task["execution_request_id"] = options.execution_request
            execution = await host.bind(
                source, project=options.project, purpose="task_execution", session_id=options.session_id, **task
            )
            result = await host.call(
                source, execution, options.tool, json.loads(options.arguments), request_key=f"exec-{key}"
            )
            print(f"task_execution call: {_short(result)}")
            reader = await host.bind(
                source,
                project=options.project,
                purpose="task_reader",
                session_id=f"{options.session_id}-reader-{secrets.token_hex(3)}",
                parent_session_id=options.session_id,
                **{k: v for k, v in task.items() if k != "execution_request_id"},
            )
            result = await host.call(
                source, reader, options.tool, json.loads(options.arguments), request_key=f"read-{key}"
            )
            print(f"task_reader call: {_short(result)}; reader tools: {len(reader.tools)}")
    finally:
        deleted = await host.close(source)
        print(f"contexts deleted: {deleted}; token renewals: {source.renewals}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="tjwater-mcp reference agent host")
    parser.add_argument("--mcp-url", required=True)
    parser.add_argument("--user-token", default=os.environ.get("TJWATER_USER_TOKEN", ""), help="the user's token")
    parser.add_argument("--client-id", default="tjwater-agent-mcp")
    parser.add_argument("--client-secret", default=os.environ.get("TJWATER_HOST_CLIENT_SECRET", ""))
    parser.add_argument("--project", required=True)
    parser.add_argument("--tool", default="get_element_properties")
    parser.add_argument("--arguments", default='{"element_type": "pipe", "element_id": "LINK-1523"}')
    parser.add_argument("--task-id", type=int)
    parser.add_argument("--run-id", type=int)
    parser.add_argument("--session-id", default="")
    parser.add_argument("--execution-request", default="")
    options = parser.parse_args()
    if not options.user_token or not options.client_secret:
        parser.error("--user-token and --client-secret (or their environment variables) are required")
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
