"""The /mcp protocol surface over a real uvicorn process: the 2026-07-28-only gate, the error table of
R-PROTO-3, the bearer layer (R-AUTH), the protected-resource metadata and cache hints."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest

from tests.conftest import ServerProcess
from tests.mcp_app.conftest import PROTOCOL, call_tool_raw, parse_rpc_response, rpc_body, rpc_headers, token

# django_db: makes pytest-django create the test database even when only these tests are collected
# (otherwise the session fixtures and the uvicorn processes would use the configured database).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def post(server: ServerProcess, body: dict, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(f"{server.url}/mcp", json=body, headers=headers, timeout=10)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
def test_non_post_is_405(mcp_server: ServerProcess, method: str) -> None:
    response = httpx2.request(
        method, f"{mcp_server.url}/mcp", headers={"mcp-protocol-version": PROTOCOL, "accept": "text/event-stream"}
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize("version", [None, "2025-11-25", "2025-03-26", "1999-01-01"])
def test_missing_or_other_protocol_version_is_32022(mcp_server: ServerProcess, version: str | None) -> None:
    # A legacy `initialize` never reaches the SDK's legacy transport, and no session is created.
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if version:
        headers["mcp-protocol-version"] = version
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version or "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        },
    }
    response = post(mcp_server, body, headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"]["supported"] == [PROTOCOL]
    assert "mcp-session-id" not in response.headers


def test_header_body_mismatch_is_32020(mcp_server: ServerProcess) -> None:
    response = post(mcp_server, rpc_body("tools/list"), rpc_headers("server/discover", token()))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


def test_unknown_method_is_32601(mcp_server: ServerProcess) -> None:
    # `initialize` at 2026-07-28 is not a method at all: no handshake, no session.
    for method in ("initialize", "prompts/list", "no/such"):
        response = post(mcp_server, rpc_body(method), rpc_headers(method, token()))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == -32601


def test_missing_meta_is_32602(mcp_server: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = post(mcp_server, body, rpc_headers("tools/list", token()))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602


def test_invalid_arguments_are_32602_without_echoing_values(mcp_server: ServerProcess) -> None:
    bearer = token()
    cases = [
        {"element_type": "junction"},  # element_id missing
        {"element_type": "junction", "element_id": "10", "project_id": 7},  # additionalProperties
        {"element_type": "hydrant", "element_id": "secret-value-123"},  # enum
    ]
    for arguments in cases:
        reply = call_tool_raw(mcp_server, "get_element_properties", arguments, bearer)
        assert reply["error"]["code"] == -32602
        assert "secret-value-123" not in reply["error"]["message"]
    # context_handle is required by the wire schema of every business tool (R-CTX-6).
    response = post(
        mcp_server,
        rpc_body("tools/call", {"name": "get_network_schema", "arguments": {"kind": "pipe"}}),
        rpc_headers("tools/call", bearer, name="get_network_schema"),
    )
    assert parse_rpc_response(response)["error"]["code"] == -32602


def test_unknown_tool_and_forbidden_tool_look_the_same(mcp_server: ServerProcess) -> None:
    unknown = call_tool_raw(mcp_server, "drop_all_tables", {}, token())
    # carol is a member without webgis.view: the network tools do not exist for her.
    forbidden = call_tool_raw(
        mcp_server, "get_element_properties", {"element_type": "junction", "element_id": "10"}, token("carol")
    )
    assert unknown["error"]["code"] == forbidden["error"]["code"] == -32602
    assert forbidden["error"]["message"] == "Unknown tool: get_element_properties"
    assert unknown["error"]["message"] == "Unknown tool: drop_all_tables"


def test_no_membership_is_a_business_error(mcp_server: ServerProcess) -> None:
    reply = call_tool_raw(mcp_server, "get_network_schema", {"kind": "pipe"}, token("mallory"))
    result = reply["result"]
    assert result["isError"] is True
    assert result["resultType"] == "complete"
    assert result["structuredContent"]["code"] == "PERMISSION_DENIED"


def test_business_errors_are_iserror_results_without_internals(mcp_server: ServerProcess) -> None:
    reply = call_tool_raw(mcp_server, "get_element_properties", {"element_type": "pipe", "element_id": "nope"}, token())
    result = reply["result"]
    assert result["isError"] is True and result["resultType"] == "complete"
    assert result["structuredContent"] == {
        "code": "NOT_FOUND",
        "message": "No pipe with that id in this project.",
        "retryable": False,
    }
    text = result["content"][0]["text"]
    assert "Traceback" not in text and "SELECT" not in text


# --- authentication (R-AUTH) -------------------------------------------------------------------


def test_no_credentials_is_401_without_error_code(mcp_server: ServerProcess) -> None:
    response = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", None))
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{mcp_server.url}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert 'scope="mcp.catalog.read mcp.query"' in challenge
    assert "error=" not in challenge


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-token",
        token(client="unknown-client"),
        token()[:-4] + "AAAA",  # signature broken
    ],
)
def test_bad_token_is_401_invalid_token(mcp_server: ServerProcess, bad: str) -> None:
    response = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", bad))
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert "resource_metadata=" in challenge
    assert bad not in response.text


def test_token_outside_the_authorization_header_is_ignored(mcp_server: ServerProcess) -> None:
    response = httpx2.post(
        f"{mcp_server.url}/mcp?access_token={token()}",
        json={**rpc_body("tools/list"), "access_token": token()},
        headers=rpc_headers("tools/list", None),
        timeout=10,
    )
    assert response.status_code == 401
    assert "error=" not in response.headers["www-authenticate"]


def test_insufficient_scope_is_403_per_method(mcp_server: ServerProcess) -> None:
    catalog_only = token(scopes="mcp.catalog.read")
    assert post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", catalog_only)).status_code == 200
    assert (
        post(mcp_server, rpc_body("server/discover"), rpc_headers("server/discover", catalog_only)).status_code == 200
    )
    body = rpc_body("tools/call", {"name": "get_network_schema", "arguments": {"kind": "pipe"}})
    response = post(mcp_server, body, rpc_headers("tools/call", catalog_only, name="get_network_schema"))
    assert response.status_code == 403
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="mcp.query"' in challenge
    query_only = token(scopes="mcp.query")
    response = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", query_only))
    assert response.status_code == 403
    assert 'scope="mcp.catalog.read"' in response.headers["www-authenticate"]
    response = post(mcp_server, rpc_body("resources/list"), rpc_headers("resources/list", catalog_only))
    assert response.status_code == 403


def test_protected_resource_metadata(mcp_server: ServerProcess) -> None:
    response = httpx2.get(f"{mcp_server.url}/.well-known/oauth-protected-resource/mcp", timeout=5)
    assert response.status_code == 200
    assert response.json() == {
        "resource": f"{mcp_server.url}/mcp",
        "authorization_servers": ["http://127.0.0.1:8000/dev-issuer"],
        "scopes_supported": ["mcp.catalog.read", "mcp.query", "mcp.context.bind"],
        "bearer_methods_supported": ["header"],
        "resource_name": "tjwater-mcp",
    }


# --- discover, cache hints, resources ----------------------------------------------------------


def test_discover_and_list_are_public_cacheable(mcp_server: ServerProcess) -> None:
    bearer = token()
    discover = parse_rpc_response(post(mcp_server, rpc_body("server/discover"), rpc_headers("server/discover", bearer)))
    result = discover["result"]
    assert (result["ttlMs"], result["cacheScope"]) == (300000, "public")
    assert result["supportedVersions"] == [PROTOCOL]
    assert set(result["capabilities"]) == {"tools", "resources", "extensions"}
    assert result["capabilities"]["extensions"] == {"io.modelcontextprotocol/oauth-client-credentials": {}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tjwater-mcp"
    listing = parse_rpc_response(post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", bearer)))["result"]
    assert (listing["ttlMs"], listing["cacheScope"]) == (300000, "public")
    names = [t["name"] for t in listing["tools"]]
    assert names == sorted(names)
    # The same generic catalog for every caller (R-TOOL-1), even one who can call none of it.
    other = parse_rpc_response(post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", token("carol"))))
    assert other["result"]["tools"] == listing["tools"]


def test_resources_are_private_and_reads_not_found(mcp_server: ServerProcess) -> None:
    bearer = token()
    listing = parse_rpc_response(post(mcp_server, rpc_body("resources/list"), rpc_headers("resources/list", bearer)))
    assert listing["result"]["resources"] == []
    assert (listing["result"]["ttlMs"], listing["result"]["cacheScope"]) == (0, "private")
    uri = "tjwater://evidence/does-not-exist"
    read = post(mcp_server, rpc_body("resources/read", {"uri": uri}), rpc_headers("resources/read", bearer, name=uri))
    assert parse_rpc_response(read)["error"]["code"] == -32002


def test_progress_only_with_progress_token(mcp_server: ServerProcess) -> None:
    bearer = token("bob")
    arguments = {"name": "test_slow_query", "arguments": {"context_handle": "h" * 20, "seconds": 0.05}}
    plain = post(
        mcp_server, rpc_body("tools/call", arguments), rpc_headers("tools/call", bearer, name="test_slow_query")
    )
    assert plain.headers["content-type"].startswith("application/json")
    assert "notifications/progress" not in plain.text
    body = rpc_body("tools/call", arguments)
    body["params"]["_meta"]["progressToken"] = "p1"
    streamed = post(mcp_server, body, rpc_headers("tools/call", bearer, name="test_slow_query"))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert '"progressToken":"p1"' in streamed.text
    assert parse_rpc_response(streamed)["result"]["isError"] is False


def test_unreachable_jwks_is_503_never_401(start_server: Callable[..., ServerProcess], e2e_project: object) -> None:
    # An issuer nobody listens on (port 9, discard): discovery/JWKS fetch fails.
    server = start_server(TJWATER_OIDC_ISSUER="http://127.0.0.1:9/realms/water", TJWATER_OIDC_HTTP_TIMEOUT_S="1")
    response = post(server, rpc_body("tools/list"), rpc_headers("tools/list", token()))
    assert response.status_code == 503
    assert response.json() == {
        "error": "temporarily_unavailable",
        "message": "Authentication is temporarily unavailable; retry shortly.",
        "retryable": True,
    }
    assert "tools" not in response.text
    server.stop()
    # The MCP session manager started and stopped with the process's lifespan, cleanly.
    log = server.log()
    assert "StreamableHTTP session manager started" in log and "Application shutdown complete" in log
    assert "Traceback" not in log


def test_session_headers_never_identify_anyone(mcp_server: ServerProcess) -> None:
    session_headers = {"mcp-session-id": "0123456789abcdef", "last-event-id": "42"}
    anonymous = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", None, **session_headers))
    assert anonymous.status_code == 401
    response = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", token(), **session_headers))
    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers


def test_transport_security_checks_host_and_origin(mcp_server: ServerProcess) -> None:
    bearer = token()
    bad_host = post(mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", bearer, host="evil.example"))
    assert bad_host.status_code == 421
    bad_origin = post(
        mcp_server, rpc_body("tools/list"), rpc_headers("tools/list", bearer, origin="http://evil.example")
    )
    assert bad_origin.status_code == 403
    same_origin = post(
        mcp_server,
        rpc_body("tools/list"),
        rpc_headers("tools/list", bearer, origin=f"http://127.0.0.1:{mcp_server.port}"),
    )
    assert same_origin.status_code == 200


def test_without_dev_project_the_context_handle_decides(live_server_url: str, e2e_project: object) -> None:
    # The default server has no TJWATER_DEV_PROJECT: a handle that was never issued is refused as a
    # business error (the context resolver), never answered with data.
    reply = call_tool_raw(live_server_url, "get_network_schema", {"kind": "pipe"}, token())
    assert reply["result"]["isError"] is True
    assert reply["result"]["structuredContent"]["code"] == "CONTEXT_INVALID"


def test_catalog_check_against_the_live_server(mcp_server: ServerProcess) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = StringIO()
    call_command(
        "mcp_catalog_check",
        "--url",
        f"{mcp_server.url}/mcp",
        "--token",
        token(),
        "--context-handle",
        "h" * 20,
        stdout=out,
    )
    assert out.getvalue().startswith("live check ok:")
    # A token without the query scope: the harmless call is refused, and the check says so (exit 1).
    with pytest.raises(CommandError) as exc:
        call_command(
            "mcp_catalog_check",
            "--url",
            f"{mcp_server.url}/mcp",
            "--token",
            token(scopes="mcp.catalog.read"),
            "--context-handle",
            "h" * 20,
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert exc.value.returncode == 1
