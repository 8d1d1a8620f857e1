"""The single exchange (``mcp_app.transport``) over a real uvicorn process: the answers it takes from the
SDK for malformed requests, the body limit (declared and streamed), JSON for a quick answer, and
``text/event-stream`` with keepalive pings for a handler that stays silent past the window."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx2
import pytest
from django.conf import settings

from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import SERVER_ENV, E2EProject, token
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def raw(server: ServerProcess, content: bytes | Iterator[bytes], headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(f"{server.url}/mcp", content=content, headers=headers, timeout=20)


def list_headers(**extra: str) -> dict[str, str]:
    return rpc_headers("tools/list", token(), **extra)


def test_parse_error_is_32700(mcp_server: ServerProcess) -> None:
    response = raw(mcp_server, b'{"jsonrpc": "2.0", "id": 1, "method": ', list_headers())
    assert response.status_code == 400
    assert response.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


def test_batch_is_32600(mcp_server: ServerProcess) -> None:
    response = raw(mcp_server, json.dumps([rpc_body("tools/list")]).encode(), list_headers())
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_a_notification_is_acknowledged_and_dropped(mcp_server: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    response = raw(mcp_server, json.dumps(body).encode(), list_headers())
    assert response.status_code == 202
    assert response.content == b""


def test_accept_must_name_json_and_sse(mcp_server: ServerProcess) -> None:
    body = json.dumps(rpc_body("tools/list")).encode()
    assert raw(mcp_server, body, list_headers(accept="application/json")).status_code == 406
    assert raw(mcp_server, body, list_headers(accept="text/event-stream")).status_code == 406
    assert raw(mcp_server, body, list_headers(accept="*/*")).status_code == 200


def test_content_type_must_be_json(mcp_server: ServerProcess) -> None:
    body = json.dumps(rpc_body("tools/list")).encode()
    response = raw(mcp_server, body, list_headers(**{"content-type": "text/plain"}))
    assert response.status_code == 400
    assert response.text == "Invalid Content-Type header"


def test_body_over_the_limit_is_413_declared_or_streamed(mcp_server: ServerProcess) -> None:
    padding = "x" * (300 * 1024)
    body = json.dumps(rpc_body("tools/list", {"cursor": padding})).encode()
    declared = raw(mcp_server, body, list_headers())
    assert declared.status_code == 413
    assert declared.text == "Request body too large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted while reading
        for i in range(0, len(body), 32 * 1024):
            yield body[i : i + 32 * 1024]

    streamed = raw(mcp_server, chunks(), list_headers())
    assert streamed.status_code == 413
    # The process is fine afterwards.
    ok = raw(mcp_server, json.dumps(rpc_body("tools/list")).encode(), list_headers())
    assert ok.status_code == 200 and "get_element_properties" in ok.text


def slow_call(server: ServerProcess, seconds: float, handle: Callable[..., str]) -> httpx2.Response:
    arguments = {"name": "test_slow_query", "arguments": {"context_handle": handle("bob"), "seconds": seconds}}
    return httpx2.post(
        f"{server.url}/mcp",
        json=rpc_body("tools/call", arguments),
        headers=rpc_headers("tools/call", token("bob"), name="test_slow_query"),
        timeout=20,
    )


def test_a_quick_answer_is_json(mcp_server: ServerProcess, handle: Callable[..., str]) -> None:
    response = slow_call(mcp_server, 0.01, handle)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["isError"] is False


def test_a_silent_handler_commits_sse_and_is_pinged(
    start_server: Callable[..., ServerProcess], e2e_project: E2EProject, handle: Callable[..., str]
) -> None:
    server = start_server(**SERVER_ENV, REDIS_URL=settings.REDIS_URL, TJWATER_MCP_SSE_PING_S="0.3")
    response = slow_call(server, 1.2, handle)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.count(": ping") >= 2  # one per 0.3 s of silence
    assert response.text.index(": ping") < response.text.index("event: message")
    reply = parse_rpc_response(response)
    assert reply["id"] == 1 and reply["result"]["isError"] is False
