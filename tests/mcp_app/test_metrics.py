"""Issue 24 "Done when": a real uvicorn server driven through MCP and REST calls — ok, business error,
protocol error, refusals (authentication, the tenant's in-flight limit, the process's query slots) and a
cancellation — and the exact series that appear on ``/metrics``, read with prometheus-client's parser.
Also: ``/metrics`` is guarded (404 without the setting, 401 without the token), and N worker processes
add up through ``PROMETHEUS_MULTIPROC_DIR``."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from mcp_app.catalog import build_catalog
from tests.e2e.test_cancel_and_limits import db_name, open_slow_call, slow_result, wait_for
from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import UNKNOWN_HANDLE, E2EProject, token
from tests.support.postgres import active_sleeps
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

METRICS_TOKEN = "metrics-token-for-tests-0123456789abcdef"
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: ServerProcess | str, bearer: str | None = METRICS_TOKEN) -> httpx2.Response:
    base = server if isinstance(server, str) else server.url
    headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
    return httpx2.get(f"{base}/metrics", headers=headers, timeout=10)


def series(server: ServerProcess | str, prefix: str) -> Series:
    """Every sample whose name starts with ``prefix``: (name, sorted labels) → value."""
    response = scrape(server)
    assert response.status_code == 200, response.text
    found: Series = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name.startswith(prefix):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def mcp_counts(server: ServerProcess) -> dict[tuple[str, str, str], float]:
    """``mcp_server_operation_duration_seconds_count`` by (method, tool, error type)."""
    return {
        (labels["mcp_method_name"], labels["gen_ai_tool_name"], labels["error_type"]): value
        for (name, items), value in series(server, "mcp_server_operation_duration_seconds_count").items()
        for labels in [dict(items)]
    }


def value(server: ServerProcess, name: str, **labels: str) -> float:
    return series(server, name).get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def metrics_server(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    # One tenant slot per principal × project, and 2 tool-query slots in the process (pool of 3, one
    # kept for resolving): a second call of a busy principal is a tenant refusal, a third concurrent
    # call of anyone a process refusal.
    return start_server(
        TJWATER_METRICS_TOKEN=METRICS_TOKEN,
        TJWATER_MCP_MAX_CONCURRENT="1",
        TJWATER_MCP_DB_POOL_SIZE="3",
        TJWATER_MCP_SLOT_LEASE_S="1.5",
        REDIS_URL=settings.REDIS_URL,
    )


def test_metrics_needs_the_token(metrics_server: ServerProcess) -> None:
    for bearer in (None, "wrong", METRICS_TOKEN[:-1]):
        refused = scrape(metrics_server, bearer)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer realm="metrics"'
        assert "mcp_server" not in refused.text
    assert scrape(metrics_server).headers["content-type"].startswith("text/plain; version=0.0.4")


def test_metrics_do_not_exist_without_the_setting(live_server_url: str) -> None:
    assert scrape(live_server_url).status_code == 404
    assert scrape(live_server_url, None).status_code == 404


def test_the_exact_series_of_ok_error_refusal_and_cancellation(
    metrics_server: ServerProcess, call_tool_raw: Callable[..., dict[str, Any]], handle: Callable[..., str]
) -> None:
    server = metrics_server
    db = db_name()
    # ok, a business error (a handle never issued), a protocol error (a tool that does not exist).
    alice = token("alice")  # used twice: the second verification is a cache hit
    assert call_tool_raw(server, "test_slow_query", {"seconds": 0.01}, bearer=alice)["result"]["isError"] is False
    invalid = call_tool_raw(server, "test_slow_query", {"seconds": 0.01}, bearer=alice, context_handle=UNKNOWN_HANDLE)
    assert invalid["result"]["structuredContent"]["code"] == "CONTEXT_INVALID"
    assert call_tool_raw(server, "no_such_tool_x", {})["error"]["code"] == -32602
    # Authentication refusal (no bearer): 401 before the MCP kernel.
    unauthenticated = httpx2.post(
        f"{server.url}/mcp", json=rpc_body("tools/list"), headers=rpc_headers("tools/list", None), timeout=10
    )
    assert unauthenticated.status_code == 401
    listed = httpx2.post(
        f"{server.url}/mcp", json=rpc_body("tools/list"), headers=rpc_headers("tools/list", token()), timeout=10
    )
    assert "tools" in parse_rpc_response(listed)["result"]
    # Refusals: bob holds his tenant slot → his second call is refused (tenant); bob and dave hold both
    # tool slots → erin's call is refused after the short wait (process).
    baseline = active_sleeps(db)
    with ThreadPoolExecutor(max_workers=2) as pool:
        bob = pool.submit(slow_result, server, "bob", 2.5, call_tool_raw)
        wait_for(lambda: active_sleeps(db) == baseline + 1, timeout=10)
        tenant = slow_result(server, "bob", 0.01, call_tool_raw)
        dave = pool.submit(slow_result, server, "dave", 2.5, call_tool_raw)
        wait_for(lambda: active_sleeps(db) == baseline + 2, timeout=10)
        process = slow_result(server, "erin", 0.01, call_tool_raw)
        assert bob.result()["isError"] is False and dave.result()["isError"] is False
    assert tenant["structuredContent"]["code"] == "RATE_LIMITED"
    assert process["structuredContent"]["code"] == "RATE_LIMITED"
    # Cancellation: the client goes away during the statement.
    sock = open_slow_call(server, "frank", 30, handle)
    wait_for(lambda: active_sleeps(db) == baseline + 1, timeout=10)
    time.sleep(0.2)
    sock.close()
    wait_for(lambda: mcp_counts(server).get(("tools/call", "test_slow_query", "cancelled")) == 1, timeout=10)
    # REST: a context request without credentials (401) and the liveness probe, by their URL patterns.
    assert httpx2.get(f"{server.url}/api/v1/mcp-query-contexts/some-handle-value", timeout=10).status_code in (401, 405)
    assert httpx2.get(f"{server.url}/livez", timeout=10).status_code == 200

    counts = mcp_counts(server)
    tools = {entry for entry in build_catalog().entries}
    assert {key: n for key, n in counts.items() if n} == {
        ("tools/call", "test_slow_query", ""): 3,  # alice, bob, dave
        ("tools/call", "test_slow_query", "CONTEXT_INVALID"): 1,
        ("tools/call", "_OTHER", "-32602"): 1,  # the client's unknown name is never a label
        ("tools/call", "test_slow_query", "RATE_LIMITED"): 2,
        ("tools/call", "test_slow_query", "cancelled"): 1,
        ("tools/list", "", ""): 1,
    }
    # Every registry tool has its success series from the start (dashboards see idle tools), nothing else.
    assert {key for key, n in counts.items() if not n} == {("tools/call", t, "") for t in tools} - {
        ("tools/call", "test_slow_query", "")
    }
    assert series(server, "tjwater_mcp_limiter_refusals_total") == {
        ("tjwater_mcp_limiter_refusals_total", (("reason", "process"),)): 1.0,
        ("tjwater_mcp_limiter_refusals_total", (("reason", "tenant"),)): 1.0,
    }
    assert series(server, "tjwater_mcp_http_refusals_total") == {
        ("tjwater_mcp_http_refusals_total", (("http_response_status_code", "401"),)): 1.0
    }
    assert value(server, "tjwater_mcp_statement_cancellations_total") == 1.0
    assert value(server, "tjwater_mcp_inflight_calls") == 0.0
    # Every call brought a new token except alice's second: one hit.
    assert value(server, "tjwater_token_cache_lookups_total", result="hit") == 1
    assert value(server, "tjwater_token_cache_lookups_total", result="miss") == 8
    rest = {
        dict(items)["http_route"]: n
        for (name, items), n in series(server, "http_server_request_duration_seconds_count").items()
    }
    assert rest["api/v1/mcp-query-contexts/<str:handle>"] == 1  # the pattern, never the handle
    assert rest["livez"] == 1
    assert not any("some-handle-value" in route for route in rest)
    # The pool and issuer keys are sampled (start-up and every few seconds).
    pool = series(server, "tjwater_mcp_db_pool_connections")
    assert {dict(items)["state"] for (_, items) in pool} == {"open", "in_use"}
    assert value(server, "tjwater_oidc_jwks_age_seconds") >= -1


def test_two_worker_processes_add_up(
    e2e_project: E2EProject, tmp_path: Path, call_tool_raw: Callable[..., dict[str, Any]]
) -> None:
    from tests.e2e.test_hardening import uvicorn

    directory = tmp_path / "prometheus"
    directory.mkdir()
    with uvicorn(
        tmp_path, workers=2, TJWATER_METRICS_TOKEN=METRICS_TOKEN, PROMETHEUS_MULTIPROC_DIR=str(directory)
    ) as server:
        calls = 12  # new connections each: uvicorn's workers share the socket, so both serve some
        for _ in range(calls):
            assert slow_result(server, "alice", 0.001, call_tool_raw)["isError"] is False
        # Each worker keeps its own files (its pool gauges are written at start-up).
        assert len(list(directory.glob("gauge_livesum_*.db"))) == 2
        for _ in range(3):  # whichever worker answers the scrape, the sum is the same
            assert mcp_counts(server)[("tools/call", "test_slow_query", "")] == calls
