"""The tenant slot asked for while the context resolves (``mcp_app.dispatch.TenantHints``): the hint
never decides anything. A handle that resolved before and is revoked now is refused on its next call,
and the slot asked for early is given back (Redis holds none afterwards); the hints hold hashes only and
are bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings

from contexts.models import Principal
from contexts.scope import QueryScope
from contexts.selectors import hash_handle
from contexts.tokens import VerifiedToken
from mcp_app.dispatch import TenantHints
from mcp_app.limits import ConcurrencyLimiter, slot_key
from mcp_app.resolver import handle_key
from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import PROJECT_SLUG, SUBJECT_PREFIX, E2EProject, token
from tests.support.servers import ServerProcess

# The Net1 members' contexts exist for the whole module (tests/conftest.py ``e2e_handles``).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db, pytest.mark.usefixtures("e2e_handles")]

ARGS = {"element_type": "junction", "element_id": "10"}


def test_a_revoked_handle_is_refused_and_its_early_slot_given_back(
    mcp_server: ServerProcess,
    e2e_project: E2EProject,
    call_tool_raw: Callable[..., dict[str, Any]],
    handle: Callable[..., str],
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


def test_a_flood_of_someone_elses_handle_never_takes_the_owners_slots(
    mcp_server: ServerProcess,
    e2e_project: E2EProject,
    call_tool_raw: Callable[..., dict[str, Any]],
    handle: Callable[..., str],
) -> None:
    # Issue 17 item 1, reproduced: bob floods alice's (leaked) handle — each of his calls is refused
    # CONTEXT_INVALID — while alice calls with it one call at a time (4 slots, she never uses more than 1).
    # Before the fix, bob's calls took alice's slot early (from the handle's hint) for a round trip each
    # and most of her calls were RATE_LIMITED.
    alice_bearer, bob_bearer = token("alice"), token("bob")
    leaked = handle("alice")
    first = call_tool_raw(mcp_server, "get_element_properties", ARGS, bearer=alice_bearer, context_handle=leaked)
    assert first["result"]["isError"] is False  # the process has learned the handle's tenant
    body = rpc_body("tools/call", {"name": "get_element_properties", "arguments": {"context_handle": leaked, **ARGS}})
    headers = rpc_headers("tools/call", bob_bearer, name="get_element_properties")
    stop = threading.Event()
    refused: list[str] = []

    def flood() -> None:
        with httpx2.Client(base_url=mcp_server.url, timeout=30) as client:
            while not stop.is_set():
                reply = parse_rpc_response(client.post("/mcp", json=body, headers=headers))
                refused.append(reply["result"]["structuredContent"]["code"])

    codes: list[str] = []
    with ThreadPoolExecutor(max_workers=12) as pool:
        floods = [pool.submit(flood) for _ in range(12)]
        try:
            time.sleep(0.5)
            for _ in range(60):
                result = call_tool_raw(
                    mcp_server, "get_element_properties", ARGS, bearer=alice_bearer, context_handle=leaked
                )["result"]
                codes.append("ok" if not result["isError"] else result["structuredContent"]["code"])
        finally:
            stop.set()
        for done in floods:
            done.result()
    assert len(refused) > 100 and set(refused) == {"CONTEXT_INVALID"}
    assert Counter(codes) == {"ok": 60}


def _scope(subject: str) -> QueryScope:
    return QueryScope(
        principal_id=7,
        issuer="https://issuer",
        subject=subject,
        client_id="c",
        project_id=9,
        project_slug="p",
        permissions=frozenset(),
        purpose="ordinary_chat",
    )


def _token(subject: str, client_id: str = "c", issuer: str = "https://issuer") -> VerifiedToken:
    return VerifiedToken(
        issuer=issuer, subject=subject, client_id=client_id, scopes=frozenset(), audience=(), expires_at=0
    )


def test_the_hint_serves_only_the_token_identity_it_was_learned_from(test_redis: redis.Redis) -> None:
    hints = TenantHints()
    handle_text = "owner-handle-" + "x" * 30
    hints.learn(handle_key(handle_text), _scope("owner"))
    limiter = ConcurrencyLimiter(settings.REDIS_URL, max_concurrent=4, lease_s=10)

    async def early(who: VerifiedToken) -> bool:
        slot = hints.early_acquire(limiter, handle_key(handle_text), who)
        if slot is None:
            return False
        await limiter.release(await slot.task)
        return True

    async def main() -> list[bool]:
        try:
            others = [_token("intruder"), _token("owner", client_id="other"), _token("owner", issuer="https://x")]
            return [await early(_token("owner"))] + [await early(t) for t in others]
        finally:
            await limiter.aclose()

    assert asyncio.run(main()) == [True, False, False, False]


def test_hints_hold_hashes_only_and_are_bounded(handle: Callable[..., str]) -> None:
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
        hints.learn(handle_key(handle), scope)
    stored = hints._tenants
    assert len(stored) == 3
    assert not any(handle in stored for handle in handles)  # never the handle itself
    assert hash_handle(handles[-1]) in stored and hash_handle(handles[0]) not in stored  # oldest out first
    hints.learn(handle_key("not ascii é"), scope)  # no handle of ours: no key, nothing learned
    assert len(stored) == 3
