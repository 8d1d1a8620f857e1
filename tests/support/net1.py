"""The world of the MCP endpoint tests: a committed project with the EPANET Net1 network (through the real
importer), principals with memberships, and their dev-issuer tokens. The fixtures that commit it, bind one
context per member and start servers are in tests/mcp_app/conftest.py (and tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wntr

from contexts.tokens import VerifiedToken
from tests.support import tokens
from tests.support.mcp_http import PROTOCOL, call_tool
from tests.support.servers import ServerProcess

PROJECT_SLUG = "mcp-e2e-net1"
CLIENT = "tjwater-agent-mcp"
# A handle-shaped string that was never issued (passes the wire schema, refused by the resolver).
UNKNOWN_HANDLE = "never-issued-handle-0123456789"
NET1 = Path(wntr.__file__).parent / "library" / "networks" / "Net1.inp"
# Subjects are prefixed so these committed rows never collide with other tests' principals.
SUBJECT_PREFIX = "mcp-e2e-"
# principal subject (unprefixed) -> permissions on the project (None: no membership)
PRINCIPALS: dict[str, list[str] | None] = {
    "alice": ["webgis.view"],
    "bob": ["webgis.view"],
    "carol": ["scada.view"],  # member, but without the network permission
    "dave": ["webgis.view"],  # concurrency tests
    "erin": ["webgis.view"],
    "frank": ["webgis.view"],
    "mallory": None,  # verified token, no membership
}
# This deployment's own service client (TJWATER_OIDC_CLIENT_ID, the client of
# ``mcp_catalog_check --client-credentials``): the only caller of the cancellation probe (mcp_app.probe).
SERVICE_CLIENT = "tjwater-readiness"
SERVER_ENV = {
    "TJWATER_MCP_MAX_CONCURRENT": "4",
    "TJWATER_MCP_SLOT_LEASE_S": "1.5",
    "TJWATER_OIDC_CLIENT_ID": SERVICE_CLIENT,
    "TJWATER_MCP_ALLOWED_CLIENTS": f"{CLIENT},{SERVICE_CLIENT}",
}

__all__ = ["PROTOCOL"]


@dataclass
class E2EProject:
    project_id: int
    slug: str


def verified(subject: str, client: str = CLIENT) -> VerifiedToken:
    """The verified form of a dev-issuer token of one of the e2e principals (for binding contexts)."""
    from django.conf import settings

    return tokens.verified_token(SUBJECT_PREFIX + subject, client=client, issuer=settings.TJWATER_DEV_ISSUER_ID)


def bind_context(subject: str, session_id: str) -> str:
    """Commit an ordinary_chat context of one of the e2e members on the Net1 project (created as the REST API
    creates them, with the catalog's tools) and return its handle; the caller unblocks the database."""
    from contexts.grants import tool_catalog
    from contexts.services import context_create

    catalog, task_scoped = tool_catalog()
    return context_create(
        token=verified(subject),
        project_slug=PROJECT_SLUG,
        session_id=session_id,
        purpose="ordinary_chat",
        catalog=catalog,
        task_scoped=task_scoped,
    ).handle


def token(subject: str = "alice", scopes: str = "mcp.catalog.read mcp.query", client: str = CLIENT) -> str:
    """A dev-issuer token for one of the e2e principals (by its unprefixed name)."""
    return tokens.dev_token(SUBJECT_PREFIX + subject, client=client, scopes=scopes.split(), ttl_s=600)


def call_tool_raw(
    server: ServerProcess | str,
    name: str,
    arguments: dict[str, Any],
    who: str = "alice",
    *,
    handles: dict[str, str] | None = None,
    bearer: str | None = None,
    context_handle: str | None = None,
    timeout: float = 30,
) -> dict[str, Any]:
    """``tools/call`` over raw HTTP as ``who`` (its token, and its context handle in ``handles``, unless given)."""
    base = server if isinstance(server, str) else server.url
    bearer = bearer if bearer is not None else token(who)
    if context_handle is None:
        assert handles is not None, "give the handles (the e2e_handles fixture) or a context_handle"
        context_handle = handles[who]
    return call_tool(base, name, arguments, bearer=bearer, context_handle=context_handle, timeout=timeout)
