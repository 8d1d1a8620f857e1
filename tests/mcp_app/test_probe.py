"""The cancellation probe (``mcp_app.probe``, issue 24 "Readiness") on a real server in its product
configuration: it serves the service client only, looks like an unknown path to everyone else, is not a
tool, runs one probe at a time, and a disconnect takes its statement out of PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx2
import pytest
from django.test import override_settings

from contexts.tokens import VerifiedToken
from mcp_app.checks import check_service_client
from mcp_app.probe import PROBE_HOLD_S, PROBE_MARK, PROBE_PATH, is_service_client
from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import CLIENT, SERVICE_CLIENT, token
from tests.support.postgres import backend_activity
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def service_token() -> str:
    return token(scopes="mcp.catalog.read", client=SERVICE_CLIENT)


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


def wait_for(predicate: Callable[[], bool], limit_s: float) -> float:
    """Seconds until ``predicate`` held (polled every 2 ms); fails the test after ``limit_s``."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < limit_s, f"not within {limit_s} s"
        time.sleep(0.002)
    return time.monotonic() - started


def probing(pid: int) -> bool:
    activity = backend_activity(pid)
    return activity is not None and activity[0] == "active" and PROBE_MARK in activity[1]


def test_an_abandoned_probe_statement_is_gone_from_postgresql(product_server: ServerProcess) -> None:
    with httpx2.Client(timeout=30) as client:
        with client.stream("POST", f"{product_server.url}{PROBE_PATH}", headers=bearer(service_token())) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-ndjson"
            lines = response.iter_lines()  # kept: a dropped line iterator closes the connection
            holding = json.loads(next(lines))
            assert holding["status"] == "holding" and holding["hold_s"] == PROBE_HOLD_S
            pid = holding["backend_pid"]
            wait_for(lambda: probing(pid), 10)
    gone_s = wait_for(lambda: not probing(pid), 3)
    print(f"\nabandoned probe statement gone from pg_stat_activity in {gone_s * 1000:.0f} ms")
    # Cancelled, not finished: gone long before its hold would have ended; the backend lives on, idle
    # (the connection went back to the pool — the statement was cancelled, not the connection killed).
    assert gone_s < PROBE_HOLD_S - 2
    assert backend_activity(pid) is not None and backend_activity(pid)[0] == "idle"  # type: ignore[index]


def test_one_probe_at_a_time_and_a_kept_probe_completes(product_server: ServerProcess) -> None:
    url = f"{product_server.url}{PROBE_PATH}"
    lines: list[dict[str, object]] = []
    started = threading.Event()

    def first() -> None:
        with httpx2.stream("POST", url, headers=bearer(service_token()), timeout=30) as response:
            for line in response.iter_lines():
                lines.append(json.loads(line))
                started.set()

    runner = threading.Thread(target=first)
    runner.start()
    assert started.wait(10)
    second = httpx2.post(url, headers=bearer(service_token()), timeout=10)
    runner.join(PROBE_HOLD_S + 10)
    assert second.status_code == 429
    assert second.json()["code"] == "RATE_LIMITED" and second.headers["retry-after"] == "5"
    assert [line["status"] for line in lines] == ["holding", "completed"]
    with httpx2.stream("POST", url, headers=bearer(service_token()), timeout=10) as again:
        assert again.status_code == 200  # the flight is free again (and this one is abandoned at once)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer(token(scopes="mcp.catalog.read mcp.query")),  # a user's token, through the host client
        bearer("not-a-token"),
    ],
    ids=["anonymous", "user token", "invalid token"],
)
def test_everyone_else_gets_the_answer_of_an_unknown_path(
    product_server: ServerProcess, headers: dict[str, str]
) -> None:
    refused = httpx2.post(f"{product_server.url}{PROBE_PATH}", headers=headers, timeout=10)
    unknown = httpx2.post(f"{product_server.url}/internal/no-such-thing", headers=headers, timeout=10)
    assert refused.status_code == unknown.status_code == 404
    assert refused.headers["content-type"] == unknown.headers["content-type"]
    # Django's 404 page names the path it did not find; apart from that the answers are the same.
    probe_path, other_path = PROBE_PATH.lstrip("/"), "internal/no-such-thing"
    assert refused.text.replace(probe_path, "PATH") == unknown.text.replace(other_path, "PATH")


def test_the_probe_is_not_a_tool(product_server: ServerProcess) -> None:
    """``tools/list`` is the same for the service client and a user (R-TOOL-1), and the product catalog
    has no slow tool."""
    listed = []
    for bearer_token in (token(), token(client=SERVICE_CLIENT)):
        response = httpx2.post(
            f"{product_server.url}/mcp",
            json=rpc_body("tools/list"),
            headers=rpc_headers("tools/list", bearer_token),
            timeout=10,
        )
        listed.append(parse_rpc_response(response)["result"]["tools"])
    assert listed[0] == listed[1]
    assert "test_slow_query" not in {tool["name"] for tool in listed[0]}


def verified(client: str) -> VerifiedToken:
    return VerifiedToken(
        issuer="https://issuer.example", subject="s", client_id=client, scopes=frozenset(), audience=(), expires_at=0
    )


@pytest.mark.parametrize(
    ("configured", "host", "client", "served"),
    [
        ("svc", CLIENT, "svc", True),
        ("svc", CLIENT, CLIENT, False),
        ("", CLIENT, "", False),  # no service client configured: the probe does not exist
        (CLIENT, CLIENT, CLIENT, False),  # the host client's tokens are users': never
    ],
)
def test_only_the_service_client_is_served(configured: str, host: str, client: str, served: bool) -> None:
    with override_settings(TJWATER_OIDC_CLIENT_ID=configured, TJWATER_MCP_HOST_CLIENT=host):
        assert is_service_client(verified(client)) is served


@pytest.mark.parametrize(
    ("configured", "allowed", "ids"),
    [
        ("svc", [CLIENT, "svc"], []),
        ("", [CLIENT], []),
        (CLIENT, [CLIENT], ["mcp_app.W001"]),
        ("svc", [CLIENT], ["mcp_app.W002"]),
    ],
)
def test_the_service_client_setting_is_checked(configured: str, allowed: list[str], ids: list[str]) -> None:
    with override_settings(
        TJWATER_OIDC_CLIENT_ID=configured, TJWATER_MCP_HOST_CLIENT=CLIENT, TJWATER_MCP_ALLOWED_CLIENTS=allowed
    ):
        assert [message.id for message in check_service_client()] == ids
