"""Fixtures for the MCP endpoint tests: a committed project with the EPANET Net1 network (through the
real importer), principals with memberships, one real context handle per member (an ``ordinary_chat``
binding created by ``contexts.services.context_create``, as the REST API does), dev-issuer tokens, and
uvicorn servers that resolve every call's project from those handles."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
import wntr
from django.conf import settings
from django.test import override_settings

from contexts import dev_issuer
from contexts.grants import tool_catalog
from contexts.models import ContextEvent, Membership, Principal, Project, QueryContext
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from queries.importer.epanet import import_network
from tests.conftest import ServerProcess

PROJECT_SLUG = "mcp-e2e-net1"
CLIENT = "tjwater-agent-mcp"
# A handle-shaped string that was never issued (passes the wire schema, refused by the resolver).
UNKNOWN_HANDLE = "never-issued-handle-0123456789"
NET1 = Path(wntr.__file__).parent / "library" / "networks" / "Net1.inp"
PROTOCOL = "2026-07-28"
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


@dataclass
class E2EProject:
    project_id: int
    slug: str


# Filled by ``e2e_handles``: the helpers below pick a principal's handle by name.
_HANDLES: dict[str, str] = {}


def verified(subject: str, client: str = CLIENT) -> VerifiedToken:
    """The verified form of a dev-issuer token of one of the e2e principals (for binding contexts)."""
    return VerifiedToken(
        issuer=settings.TJWATER_DEV_ISSUER_ID,
        subject=SUBJECT_PREFIX + subject,
        client_id=client,
        scopes=frozenset({"mcp.context.bind"}),
        audience=(settings.TJWATER_MCP_AUDIENCE,),
        expires_at=0,
    )


@pytest.fixture(scope="session")
def e2e_project(django_db_setup: None, django_db_blocker: Any) -> Iterator[E2EProject]:
    """Committed rows (the uvicorn processes use the same test database), removed at the end: the
    project with Net1 and its members."""
    with django_db_blocker.unblock():
        Project.objects.filter(slug=PROJECT_SLUG).delete()
        project = Project.objects.create(slug=PROJECT_SLUG, name="MCP end-to-end (Net1)")
        import_network(project=project, inp_path=NET1, baseline_hours=0)
        for subject, permissions in PRINCIPALS.items():
            principal, _ = Principal.objects.get_or_create(
                issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT_PREFIX + subject
            )
            if permissions is not None:
                Membership.objects.create(principal=principal, project=project, permissions=permissions)
    yield E2EProject(project_id=project.pk, slug=PROJECT_SLUG)
    with django_db_blocker.unblock():
        ContextEvent.objects.filter(project_id=project.pk).delete()
        Project.objects.filter(pk=project.pk).delete()
        Principal.objects.filter(
            issuer=settings.TJWATER_DEV_ISSUER_ID, subject__in=[SUBJECT_PREFIX + s for s in PRINCIPALS]
        ).delete()


@pytest.fixture(scope="module", autouse=True)
def e2e_handles(e2e_project: E2EProject, django_db_blocker: Any) -> Iterator[dict[str, str]]:
    """One committed ordinary_chat context per member (created like the REST API creates them), for the
    module's tests; deleted after the module so other test packages never see them."""
    with django_db_blocker.unblock(), override_settings(TJWATER_CONTEXT_TTL_S=3600):
        catalog, task_scoped = tool_catalog()
        for subject, permissions in PRINCIPALS.items():
            if permissions is not None:
                _HANDLES[subject] = context_create(
                    token=verified(subject),
                    project_slug=PROJECT_SLUG,
                    session_id=f"mcp-e2e-{subject}",
                    purpose="ordinary_chat",
                    catalog=catalog,
                    task_scoped=task_scoped,
                ).handle
    yield dict(_HANDLES)
    _HANDLES.clear()
    with django_db_blocker.unblock():
        QueryContext.objects.filter(project_id=e2e_project.project_id).delete()
        ContextEvent.objects.filter(project_id=e2e_project.project_id).delete()


def token(subject: str = "alice", scopes: str = "mcp.catalog.read mcp.query", client: str = CLIENT) -> str:
    """A dev-issuer token for one of the e2e principals (by its unprefixed name)."""
    return dev_issuer.mint_token(subject=SUBJECT_PREFIX + subject, client_id=client, scopes=scopes.split(), ttl_s=600)


def handle(subject: str = "alice") -> str:
    """The context handle of one of the e2e members (by its unprefixed name)."""
    return _HANDLES[subject]


# This deployment's own service client (TJWATER_OIDC_CLIENT_ID, the client of
# ``mcp_catalog_check --client-credentials``): the only caller of the cancellation probe (mcp_app.probe).
SERVICE_CLIENT = "tjwater-readiness"
SERVER_ENV = {
    "TJWATER_MCP_MAX_CONCURRENT": "4",
    "TJWATER_MCP_SLOT_LEASE_S": "1.5",
    "TJWATER_OIDC_CLIENT_ID": SERVICE_CLIENT,
    "TJWATER_MCP_ALLOWED_CLIENTS": f"{CLIENT},{SERVICE_CLIENT}",
}


@pytest.fixture(scope="session")
def mcp_server(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    return start_server(**SERVER_ENV, REDIS_URL=settings.REDIS_URL)


@pytest.fixture(scope="session")
def product_server(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    """A server in its product configuration — ``tjwater.settings``, so no test-only tool — with the dev
    issuer on only to verify the tests' tokens, and this deployment's service client configured."""
    return start_server(
        **SERVER_ENV,
        DJANGO_SETTINGS_MODULE="tjwater.settings",
        TJWATER_READ_ENV_FILE="0",
        DEBUG="1",
        TJWATER_MCP_ENABLED="1",
        TJWATER_DEV_ISSUER="1",
        TJWATER_DATA_DIR=str(settings.TJWATER_DATA_DIR),
        REDIS_URL=settings.REDIS_URL,
    )


@pytest.fixture(scope="session")
def mcp_server_b(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    """A second process on the same database and Redis (cross-process limits)."""
    return start_server(**SERVER_ENV, REDIS_URL=settings.REDIS_URL)


def rpc_body(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def rpc_headers(method: str, bearer: str | None, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    if bearer is not None:
        headers["authorization"] = f"Bearer {bearer}"
    headers.update(extra)
    return headers


def parse_rpc_response(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC reply of a POST, whether sent as JSON or as the last SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(events[-1])
    return response.json()


def call_tool_raw(
    server: ServerProcess | str,
    name: str,
    arguments: dict[str, Any],
    who: str = "alice",
    *,
    bearer: str | None = None,
    context_handle: str | None = None,
    timeout: float = 30,
) -> dict[str, Any]:
    """``tools/call`` over raw HTTP as ``who`` (its token and its context handle unless given)."""
    base = server if isinstance(server, str) else server.url
    bearer = bearer if bearer is not None else token(who)
    context_handle = context_handle if context_handle is not None else handle(who)
    response = httpx2.post(
        f"{base}/mcp",
        json=rpc_body("tools/call", {"name": name, "arguments": {"context_handle": context_handle, **arguments}}),
        headers=rpc_headers("tools/call", bearer, name=name),
        timeout=timeout,
    )
    return parse_rpc_response(response)


def active_sleeps(dsn_dbname: str) -> int:
    """Backends currently running the test-only pg_sleep query."""
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or "postgres",
        dbname=dsn_dbname,
        autocommit=True,
    ) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%%' "
            "AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def backend_activity(pid: int) -> tuple[str, str] | None:
    """``(state, query)`` of backend ``pid`` in ``pg_stat_activity`` (None: no such backend), read through a
    connection of its own, like the readiness check reads it."""
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or "postgres",
        dbname=db["NAME"],
        autocommit=True,
    ) as conn:
        row = conn.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return (str(row[0]), str(row[1])) if row else None
