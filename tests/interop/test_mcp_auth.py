"""/mcp accepts the tokens a Keycloak-shaped provider issues, and only those (R-AUTH, issue 6).

Every token here comes from the real provider process (devtools/idp/provider.mjs): client_credentials,
a user's login through its form, RFC 8693 token exchange. Our server is a real uvicorn process that
trusts that provider as its one issuer and fetches its keys from the provider's JWKS.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from contexts.models import Permission
from tests.support.idp import (
    AGENT_CLIENT_ID,
    AGENT_CLIENT_SECRET,
    USERS,
    IdentityProvider,
    Members,
    create_context,
    idp_env,
)
from tests.support.mcp_http import mcp_request
from tests.support.servers import ROOT, ServerProcess

pytestmark = pytest.mark.e2e

ALICE_SUB, _ = USERS["alice"]
ALL_PERMISSIONS = [p.value for p in Permission]
OTHER_RESOURCE = "https://other.example/api"


@dataclass
class Deployment:
    idp: IdentityProvider
    server: ServerProcess
    members: Members

    @property
    def mcp(self) -> str:
        return f"{self.server.url}/mcp"


@pytest.fixture(scope="module")
def deployment(idp: IdentityProvider, idp_server: ServerProcess, members_factory: Callable[..., Members]) -> Deployment:
    members = members_factory(idp.issuer, {ALICE_SUB: ALL_PERMISSIONS})
    return Deployment(idp=idp, server=idp_server, members=members)


def test_client_credentials_token_reads_the_catalog_and_nothing_else(deployment: Deployment) -> None:
    token = deployment.idp.client_credentials_token()
    discover = mcp_request(deployment.mcp, token, "server/discover")
    assert discover.status == 200
    assert set(discover.result["capabilities"]) >= {"tools", "resources"}
    listed = mcp_request(deployment.mcp, token, "tools/list")
    assert listed.status == 200
    assert "list_elements" in {tool["name"] for tool in listed.result["tools"]}

    call = mcp_request(
        deployment.mcp,
        token,
        "tools/call",
        {"name": "list_elements", "arguments": {"element_type": "pipe", "context_handle": "x" * 43}},
    )
    assert call.status == 403
    challenge = call.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="insufficient_scope"' in challenge
    assert "mcp.query" in challenge


def test_exchanged_user_token_binds_a_context_and_calls_a_tool(deployment: Deployment) -> None:
    user_token = deployment.idp.user_token("alice")
    # The user's own token is for the host (aud urn:tjwater:host, azp tjwater-host): not for /mcp.
    assert mcp_request(deployment.mcp, user_token, "tools/list").status == 401

    token = deployment.idp.exchange(user_token)
    handle = create_context(deployment.server.url, token, deployment.members.project_slug)
    call = mcp_request(
        deployment.mcp,
        token,
        "tools/call",
        {"name": "list_elements", "arguments": {"element_type": "pipe", "context_handle": handle}},
    )
    assert call.status == 200
    result = call.result
    assert result.get("isError") is not True, result
    assert result["resultType"] == "complete"
    assert result["structuredContent"]["data"]["items"] == []  # the interop project has no network
    # The exchanged token carries mcp.query and mcp.context.bind only, not the catalog scope; mcp.query
    # opens the (generic, public) catalog too, because hosts list tools before calling one.
    assert mcp_request(deployment.mcp, token, "tools/list").status == 200


def test_official_python_sdk_client_calls_a_tool_with_an_exchanged_token(deployment: Deployment) -> None:
    # The SDK client lists tools before a call (it validates structuredContent against the tool's
    # outputSchema); the default exchange (mcp.query mcp.context.bind, no catalog scope) is enough.
    token = deployment.idp.exchange(deployment.idp.user_token("alice"))
    handle = create_context(deployment.server.url, token, deployment.members.project_slug)

    async def call() -> CallToolResult:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=15) as http:
            transport = streamable_http_client(deployment.mcp, http_client=http)
            async with Client(transport, mode="2026-07-28") as client:
                return await client.call_tool("list_elements", {"element_type": "tank", "context_handle": handle})

    result = asyncio.run(call())
    assert result.is_error is not True, result
    assert result.structured_content is not None
    assert result.structured_content["data"]["items"] == []


def test_mcp_token_command_fetches_a_client_credentials_token_from_the_provider(deployment: Deployment) -> None:
    # R-OPS: `manage.py mcp_token --client-credentials` against a Keycloak-shaped issuer, with
    # resource= our /mcp URL (RFC 8707), gives a token our server accepts.
    env = {
        **os.environ,
        "TJWATER_OIDC_ISSUER": deployment.idp.issuer,
        "TJWATER_DEV_ISSUER": "0",
        "TJWATER_OIDC_CLIENT_ID": AGENT_CLIENT_ID,
        "TJWATER_OIDC_CLIENT_SECRET": AGENT_CLIENT_SECRET,
        "TJWATER_MCP_RESOURCE_URI": deployment.mcp,
    }
    completed = subprocess.run(
        [sys.executable, "manage.py", "mcp_token", "--client-credentials", "--scope", "mcp.catalog.read"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert mcp_request(deployment.mcp, completed.stdout.strip(), "tools/list").status == 200


def test_token_for_another_audience_is_refused(deployment: Deployment) -> None:
    service = deployment.idp.client_credentials_token(resource=OTHER_RESOURCE)
    answer = mcp_request(deployment.mcp, service, "tools/list")
    assert answer.status == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]

    user = deployment.idp.exchange(deployment.idp.user_token("alice"), resource=OTHER_RESOURCE)
    assert mcp_request(deployment.mcp, user, "tools/list").status == 401
    # The same grant with our resource works: only the audience differs.
    assert mcp_request(deployment.mcp, deployment.idp.client_credentials_token(), "tools/list").status == 200


def test_key_rotation_needs_no_restart_and_a_provider_outage_is_a_retryable_503(
    provider_factory: Callable[..., IdentityProvider], start_server: Callable[..., ServerProcess]
) -> None:
    """The issuer's life as one server sees it: keys rotate twice, then the provider goes down."""
    idp = provider_factory()
    # A zero refetch cooldown lets the validator refetch the JWKS on every unknown kid (the default 30 s
    # would make this test wait; the cooldown itself is the validator's own test), and a one-second key
    # cache without a grace period (tests/contexts/test_jwks_outage.py covers the grace) makes the server
    # fetch the keys again while the provider is down.
    server = start_server(
        **idp_env(
            idp,
            TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S="0",
            TJWATER_OIDC_JWKS_CACHE_S="1",
            TJWATER_OIDC_JWKS_GRACE_S="0",
        )
    )
    mcp = f"{server.url}/mcp"
    old = idp.client_credentials_token()
    assert mcp_request(mcp, old, "tools/list").status == 200

    idp.rotate(drop_old=False)  # new signing key, old one still published
    rotated = idp.client_credentials_token()
    assert mcp_request(mcp, rotated, "tools/list").status == 200  # unknown kid → refetch
    assert mcp_request(mcp, old, "tools/list").status == 200

    idp.rotate(drop_old=True)  # only the newest key is published now
    newest = idp.client_credentials_token()
    assert mcp_request(mcp, newest, "tools/list").status == 200  # refetch replaces the key cache
    for dropped in (old, rotated):
        answer = mcp_request(mcp, dropped, "tools/list")
        assert answer.status == 401
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]

    idp.stop()
    time.sleep(1.2)  # past the key cache: the next call must fetch the keys, and cannot
    answer = mcp_request(mcp, newest, "tools/list")
    assert answer.status == 503
    assert answer.message is not None
    assert "result" not in answer.message and "tools" not in str(answer.message)
    assert "temporarily unavailable" in str(answer.message).lower()
    assert "invalid_token" not in answer.headers.get("www-authenticate", "")
    assert server.process.poll() is None  # the same server process throughout
