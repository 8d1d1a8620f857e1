"""``resources/list`` and ``resources/read`` over a real server (``mcp_app.resources``, ``Dispatcher``):
crafted cursors are the client's error (issue 17 item 4), and both methods run under the limits of a
``tools/call`` — the tenant's Redis slots and the process's tool slots (issue 17 item 8, R-PAGE-7)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings

from contexts.models import Principal
from mcp_app.limits import slot_key
from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import SERVER_ENV, SUBJECT_PREFIX, E2EProject, token
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

URI = "tjwater://evidence/00000000-0000-0000-0000-000000000000"


def encoded(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def resources(
    server: ServerProcess, method: str, who: str, handle: Callable[..., str], **params: Any
) -> dict[str, Any]:
    body = rpc_body(method, params)
    body["params"]["_meta"]["cn.tjwater/contextHandle"] = handle(who)
    name = params.get("uri")
    response = httpx2.post(
        f"{server.url}/mcp", json=body, headers=rpc_headers(method, token(who), name=name), timeout=30
    )
    return parse_rpc_response(response)


NOW = "2026-12-01T10:00:00+00:00"
CRAFTED = [
    encoded([NOW, 5]),
    encoded([NOW, {}]),
    encoded([NOW, None]),
    encoded([NOW, [1]]),
    encoded([5, str(uuid.uuid4())]),
    encoded(["2026-12-01T10:00:00", str(uuid.uuid4())]),  # no time zone
    encoded(["0001-01-01T00:00:00+14:00", str(uuid.uuid4())]),  # before year 1 in UTC
    encoded({"a": NOW, "b": str(uuid.uuid4())}),
    encoded([NOW]),
    encoded("[" * 100_000),
    base64.urlsafe_b64encode(b"[" * 50_000 + b"]" * 50_000).decode(),
    "not-a-cursor",
    "é",
    "",  # empty: the first page
]


@pytest.mark.parametrize("cursor", CRAFTED, ids=range(len(CRAFTED)))
def test_a_crafted_cursor_is_invalid_params_never_a_server_fault(
    mcp_server: ServerProcess, cursor: str, handle: Callable[..., str]
) -> None:
    logged = len(mcp_server.log())
    reply = resources(mcp_server, "resources/list", "alice", cursor=cursor, handle=handle)
    if cursor == "":
        assert reply["result"]["resources"] == []
        return
    assert reply.get("error") == {"code": -32602, "message": "Invalid cursor"}, reply
    assert "Traceback" not in mcp_server.log()[logged:]


def _redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.fixture
def frank_slots(e2e_project: E2EProject) -> Iterator[str]:
    """Frank's slot key, emptied after the test."""
    principal = Principal.objects.get(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT_PREFIX + "frank")
    key = slot_key(principal.pk, e2e_project.project_id)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(key)
    yield key
    client.delete(key)
    client.close()


def test_resources_take_the_tenants_slots(
    mcp_server: ServerProcess, frank_slots: str, handle: Callable[..., str]
) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    # Frank's four slots are taken (four calls in flight elsewhere, as the limiter records them).
    expiry = _redis_now_ms(client) + 30_000
    client.zadd(frank_slots, {f"elsewhere-{n}": expiry for n in range(int(SERVER_ENV["TJWATER_MCP_MAX_CONCURRENT"]))})
    for method, params in (("resources/read", {"uri": URI}), ("resources/list", {})):
        error = resources(mcp_server, method, "frank", **params, handle=handle)["error"]
        assert error["code"] == -32602, (method, error)
        assert (error["data"]["code"], error["data"]["retryable"]) == ("RATE_LIMITED", True), method
    client.delete(frank_slots)
    # With the slots free again the same requests are served, and give their slot back.
    assert (
        resources(mcp_server, "resources/read", "frank", uri=URI, handle=handle)["error"]["message"]
        == "Resource not found"
    )
    assert resources(mcp_server, "resources/list", "frank", handle)["result"]["resources"] == []
    deadline = time.monotonic() + 3
    while client.zcard(frank_slots) and time.monotonic() < deadline:  # the release is written without waiting
        time.sleep(0.05)
    assert client.zcard(frank_slots) == 0
    client.close()


def test_resources_take_the_process_tool_slots(
    start_server: Callable[..., ServerProcess], e2e_project: E2EProject, frank_slots: str, handle: Callable[..., str]
) -> None:
    # A pool of 3 leaves 2 tool slots: two slow calls of other tenants take them both.
    server = start_server(**SERVER_ENV, TJWATER_MCP_DB_POOL_SIZE="3", REDIS_URL=settings.REDIS_URL)

    def slow(who: str) -> dict[str, Any]:
        arguments = {"context_handle": handle(who), "seconds": 3}
        response = httpx2.post(
            f"{server.url}/mcp",
            json=rpc_body("tools/call", {"name": "test_slow_query", "arguments": arguments}),
            headers=rpc_headers("tools/call", token(who), name="test_slow_query"),
            timeout=30,
        )
        return parse_rpc_response(response)

    with ThreadPoolExecutor(max_workers=2) as pool:
        calls = [pool.submit(slow, who) for who in ("dave", "erin")]
        time.sleep(1.5)  # both running (each holds a tool slot for 3 s)
        read = resources(server, "resources/read", "frank", uri=URI, handle=handle)["error"]
        listed = resources(server, "resources/list", "frank", handle)["error"]
        for done in calls:
            assert done.result()["result"]["isError"] is False
    for error in (read, listed):
        assert (error["code"], error["data"]["code"], error["data"]["retryable"]) == (-32602, "RATE_LIMITED", True)
    assert (
        resources(server, "resources/read", "frank", uri=URI, handle=handle)["error"]["message"] == "Resource not found"
    )
