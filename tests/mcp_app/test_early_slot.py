"""The tenant slot asked for while the context resolves (``mcp_app.dispatch.TenantHints``): the hint
never decides anything. A handle that resolved before and is revoked now is refused on its next call,
and the slot asked for early is given back (Redis holds none afterwards); the hints hold hashes only and
are bounded."""

from __future__ import annotations

import time

import httpx2
import pytest
import redis
from django.conf import settings

from contexts.models import Principal
from contexts.scope import QueryScope
from contexts.services import hash_handle
from mcp_app.dispatch import TenantHints
from mcp_app.limits import slot_key
from tests.conftest import ServerProcess
from tests.mcp_app.conftest import PROJECT_SLUG, SUBJECT_PREFIX, E2EProject, call_tool_raw, token

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

ARGS = {"element_type": "junction", "element_id": "10"}


def test_a_revoked_handle_is_refused_and_its_early_slot_given_back(
    mcp_server: ServerProcess, e2e_project: E2EProject
) -> None:
    # Bound and revoked through the REST API, like a host does (the server commits both).
    bearer = token("erin", scopes="mcp.query mcp.context.bind")
    auth = {"authorization": f"Bearer {bearer}"}
    created = httpx2.post(
        f"{mcp_server.url}/api/v1/mcp-query-contexts",
        json={"project": PROJECT_SLUG, "session_id": "early-slot", "purpose": "ordinary_chat"},
        headers=auth,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    handle = created.json()["context_handle"]
    for _ in range(3):  # the process learns the handle's tenant and then asks for the slot early
        result = call_tool_raw(mcp_server, "get_element_properties", ARGS, "erin", context_handle=handle)["result"]
        assert result["isError"] is False, result["structuredContent"]
    revoked = httpx2.delete(f"{mcp_server.url}/api/v1/mcp-query-contexts/{handle}", headers=auth, timeout=10)
    assert revoked.status_code in (200, 204), revoked.text
    refused = call_tool_raw(mcp_server, "get_element_properties", ARGS, "erin", context_handle=handle)["result"]
    assert refused["isError"] is True and refused["structuredContent"]["code"] == "CONTEXT_REVOKED"
    principal = Principal.objects.get(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT_PREFIX + "erin")
    key = slot_key(principal.pk, e2e_project.project_id)
    client = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + 3
    while client.zcard(key) and time.monotonic() < deadline:  # the release is written without waiting
        time.sleep(0.05)
    assert client.zcard(key) == 0


def test_hints_hold_hashes_only_and_are_bounded() -> None:
    hints = TenantHints()
    hints.MAX_HINTS = 3
    scope = QueryScope(
        principal_id=7,
        issuer="https://issuer",
        subject="s",
        client_id="c",
        project_id=9,
        project_slug="p",
        permissions=frozenset(),
        purpose="ordinary_chat",
    )
    handles = [f"handle-{i}-{'x' * 20}" for i in range(5)]
    for handle in handles:
        hints.learn(handle, scope)
    stored = hints._tenants
    assert len(stored) == 3
    assert not any(handle in stored for handle in handles)  # never the handle itself
    assert hash_handle(handles[-1]) in stored and hash_handle(handles[0]) not in stored  # oldest out first
    hints.learn("not ascii é", scope)  # no handle of ours: nothing learned
    assert len(stored) == 3
