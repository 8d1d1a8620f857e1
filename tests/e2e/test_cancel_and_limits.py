"""Cancellation down to PostgreSQL (R-PROTO-6), the query budget, and in-flight limits across two
uvicorn processes (R-PAGE-7), all through the test-only ``test_slow_query`` tool (pg_sleep)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings

from tests.support.mcp_http import rpc_body, rpc_headers
from tests.support.net1 import SERVER_ENV, E2EProject, token
from tests.support.postgres import active_sleeps
from tests.support.servers import ServerProcess

# django_db: makes pytest-django create the test database even when only these tests are collected
# (otherwise the session fixtures and the uvicorn processes would use the configured database).
# The Net1 members' contexts exist for the whole module (tests/conftest.py ``e2e_handles``).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db, pytest.mark.usefixtures("e2e_handles")]


def db_name() -> str:
    return settings.DATABASES["default"]["NAME"]


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> float:
    """Poll until ``predicate`` holds; return the seconds it took (fails after ``timeout``)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
    return time.monotonic() - start


def open_slow_call(server: ServerProcess, subject: str, seconds: float, handle: Callable[..., str]) -> socket.socket:
    """Send a tools/call over a raw socket and return it unread (closing it = the client going away)."""
    body = json.dumps(
        rpc_body(
            "tools/call",
            {"name": "test_slow_query", "arguments": {"context_handle": handle(subject), "seconds": seconds}},
        )
    ).encode()
    headers = rpc_headers("tools/call", token(subject), name="test_slow_query")
    lines = ["POST /mcp HTTP/1.1", f"host: 127.0.0.1:{server.port}", f"content-length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def slow_result(
    server: ServerProcess, subject: str, seconds: float, call_tool_raw: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    return call_tool_raw(server, "test_slow_query", {"seconds": seconds}, subject)["result"]


def test_disconnect_cancels_the_sql_within_one_second(
    mcp_server: ServerProcess,
    e2e_project: E2EProject,
    call_tool_raw: Callable[..., dict[str, Any]],
    handle: Callable[..., str],
) -> None:
    db = db_name()
    baseline = active_sleeps(db)
    sock = open_slow_call(mcp_server, "bob", 30, handle)
    wait_for(lambda: active_sleeps(db) == baseline + 1, timeout=10)
    time.sleep(0.2)  # let the statement settle into pg_sleep
    sock.close()
    elapsed = wait_for(lambda: active_sleeps(db) == baseline, timeout=5, interval=0.005)
    print(f"cancellation latency: disconnect -> gone from pg_stat_activity = {elapsed * 1000:.1f} ms")
    assert elapsed < 1.0
    wait_for(lambda: "mcp call cancelled backend_cancel_sent=True" in mcp_server.log(), timeout=5)
    # The call's own log line follows the audit line (written as the cancellation unwinds the handler).
    wait_for(lambda: "outcome=cancelled" in mcp_server.log(), timeout=5)
    log = mcp_server.log()
    assert "tool=test_slow_query" in log
    # The same principal can use the endpoint right away: the slot was released.
    assert slow_result(mcp_server, "bob", 0.01, call_tool_raw)["isError"] is False


def test_query_budget_is_enforced_in_the_database(
    start_server: Callable[..., ServerProcess], e2e_project: E2EProject, call_tool_raw: Callable[..., dict[str, Any]]
) -> None:
    server = start_server(**{**SERVER_ENV, "TJWATER_MCP_QUERY_BUDGET_S": "1"}, REDIS_URL=settings.REDIS_URL)
    started = time.monotonic()
    result = slow_result(server, "erin", 5, call_tool_raw)
    assert time.monotonic() - started < 3
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "code": "QUERY_TIMEOUT",
        "message": "The query exceeded its time budget; narrow it and try again.",
        "retryable": True,
    }
    server.stop()


def test_four_in_flight_per_principal_and_project_across_two_processes(
    mcp_server: ServerProcess,
    mcp_server_b: ServerProcess,
    e2e_project: E2EProject,
    call_tool_raw: Callable[..., dict[str, Any]],
) -> None:
    servers = [mcp_server, mcp_server_b] * 3
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(slow_result, server, "dave", 3.0, call_tool_raw) for server in servers]
        time.sleep(0.5)
        # Another principal on the same project is not affected by dave's slots.
        other = slow_result(mcp_server_b, "erin", 0.01, call_tool_raw)
        results = [f.result() for f in futures]
    assert other["isError"] is False
    codes = sorted("ok" if not r["isError"] else r["structuredContent"]["code"] for r in results)
    assert codes == ["RATE_LIMITED", "RATE_LIMITED", "ok", "ok", "ok", "ok"]
    limited = [r for r in results if r["isError"]]
    assert all(r["structuredContent"]["retryable"] is True for r in limited)


def test_killed_process_frees_its_slots(
    start_server: Callable[..., ServerProcess],
    mcp_server: ServerProcess,
    call_tool_raw: Callable[..., dict[str, Any]],
    handle: Callable[..., str],
) -> None:
    # The doomed process writes 4 s leases (refreshed every 1.3 s while it lives).
    lease_s = 4.0
    doomed = start_server(**{**SERVER_ENV, "TJWATER_MCP_SLOT_LEASE_S": str(lease_s)}, REDIS_URL=settings.REDIS_URL)
    db = db_name()
    baseline = active_sleeps(db)
    sockets = [open_slow_call(doomed, "frank", lease_s, handle) for _ in range(4)]
    wait_for(lambda: active_sleeps(db) >= baseline + 4, timeout=10)
    doomed.process.kill()  # SIGKILL: no cleanup code runs, nobody releases the slots
    doomed.process.wait(timeout=5)
    killed_at = time.monotonic()
    for sock in sockets:
        sock.close()
    # Its four leases are still in Redis: frank is at the limit on the surviving process...
    assert slow_result(mcp_server, "frank", 0.01, call_tool_raw)["structuredContent"]["code"] == "RATE_LIMITED"
    # ...until the leases run out; then the slots are free again without anyone cleaning up.
    time.sleep(max(0.0, lease_s + 0.5 - (time.monotonic() - killed_at)))
    assert slow_result(mcp_server, "frank", 0.01, call_tool_raw)["isError"] is False


def test_a_context_revoked_through_one_process_is_refused_by_the_other_on_its_next_call(
    mcp_server: ServerProcess,
    mcp_server_b: ServerProcess,
    e2e_project: E2EProject,
    call_tool_raw: Callable[..., dict[str, Any]],
) -> None:
    """Issue 25: under load through both processes, a context revoked through process A (its REST API) is
    refused by process B on the next call after the revocation answered — no process keeps a stale view
    (both have the handle's tenant hint and its slots warm)."""
    import threading

    import httpx2

    from tests.support.net1 import PROJECT_SLUG

    # Bound through process A's binding API (committed: the test's own transaction is not the servers').
    binder = {"Authorization": f"Bearer {token('erin', scopes='mcp.context.bind')}"}
    created = httpx2.post(
        f"{mcp_server.url}/api/v1/mcp-query-contexts",
        json={"project": PROJECT_SLUG, "session_id": "revoke-across-processes", "purpose": "ordinary_chat"},
        headers=binder,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    own = created.json()["context_handle"]
    stop = threading.Event()
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def hammer(server: ServerProcess, label: str) -> None:
        while not stop.is_set():
            reply = call_tool_raw(server, "test_slow_query", {"seconds": 0.001}, "erin", context_handle=own)
            result = reply["result"]
            seen[label].append("ok" if not result["isError"] else result["structuredContent"]["code"])

    workers = [threading.Thread(target=hammer, args=(s, lbl)) for s, lbl in ((mcp_server, "a"), (mcp_server_b, "b"))]
    for worker in workers:
        worker.start()
    try:
        try:
            wait_for(lambda: seen["a"].count("ok") >= 5 and seen["b"].count("ok") >= 5, timeout=20)
        except AssertionError:
            raise AssertionError({k: v[:5] for k, v in seen.items()}) from None
        answer = httpx2.delete(
            f"{mcp_server.url}/api/v1/mcp-query-contexts/{own}",
            headers=binder,
            timeout=10,
        )
        assert answer.status_code == 204, answer.text
        # The first call on B that starts after the revocation answered is refused.
        after = call_tool_raw(mcp_server_b, "test_slow_query", {"seconds": 0.001}, "erin", context_handle=own)
        assert after["result"]["isError"] is True
        assert after["result"]["structuredContent"]["code"] == "CONTEXT_REVOKED"
        wait_for(lambda: len(seen["a"]) > 0 and len(seen["b"]) > 0, timeout=5)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    for label in ("a", "b"):
        codes = seen[label]
        first_refused = next(i for i, code in enumerate(codes) if code != "ok")
        # Once refused, never served again: every later call on that process is refused too.
        assert set(codes[first_refused:]) == {"CONTEXT_REVOKED"}, (label, codes[first_refused:])
