"""The network tools end to end with the official SDK client (mode 2026-07-28) against real uvicorn:
discover, tools/list, and every tool, with each structuredContent validated against its outputSchema."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from jsonschema import Draft202012Validator
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from referencing import Registry

from queries.registry import tools_by_name
from tests.support.net1 import PROJECT_SLUG, token
from tests.support.servers import ServerProcess

# django_db: makes pytest-django create the test database even when only these tests are collected
# (otherwise the session fixtures and the uvicorn processes would use the configured database).
# The Net1 members' contexts exist for the whole module (tests/conftest.py ``e2e_handles``).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db, pytest.mark.usefixtures("e2e_handles")]


def run_client(
    server: ServerProcess, body: Callable[[Client], Awaitable[Any]], mode: str = "2026-07-28", bearer: str | None = None
) -> Any:
    async def main() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer or token()}"}, timeout=30)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode=mode) as client:
            return await body(client)

    return anyio.run(main)


def test_discover_with_sdk_client(mcp_server: ServerProcess) -> None:
    async def body(client: Client) -> tuple[Any, Any]:
        return client.server_capabilities, client.server_info

    capabilities, info = run_client(mcp_server, body, mode="auto")
    assert capabilities.tools is not None and capabilities.resources is not None
    assert capabilities.prompts is None and capabilities.logging is None and capabilities.completions is None
    assert "io.modelcontextprotocol/oauth-client-credentials" in capabilities.extensions
    assert (info.name, info.version) == ("tjwater-mcp", "0.1.0")


def test_tools_list_schemas(mcp_server: ServerProcess) -> None:
    async def body(client: Client) -> Any:
        return await client.list_tools()

    listing = run_client(mcp_server, body)
    tools = {tool.name: tool for tool in listing.tools}
    assert {"get_element_properties", "list_elements", "get_network_options", "get_network_schema"} <= set(tools)
    for tool in listing.tools:
        schema = tool.input_schema
        Draft202012Validator.check_schema(schema)
        Draft202012Validator.check_schema(tool.output_schema)
        assert schema["additionalProperties"] is False
        assert "context_handle" in schema["required"]
        assert not {"project", "project_id", "principal"} & set(schema["properties"])
        assert tool.annotations is not None and tool.annotations.destructive_hint in (False, None)


def test_evidence_saving_tools_say_not_read_only_and_not_destructive(mcp_server: ServerProcess) -> None:
    """Seed 001 / R-TOOL-2 (issue 23 item 13): a tool that may append evidence is declared
    ``readOnlyHint=false`` and ``destructiveHint=false`` — both explicitly, as the client sees them on
    the wire; a tool that never saves evidence is ``readOnlyHint=true``."""

    async def body(client: Client) -> Any:
        return await client.list_tools()

    specs = tools_by_name()
    listing = run_client(mcp_server, body)
    hints = {
        tool.name: (tool.annotations.read_only_hint, tool.annotations.destructive_hint)
        for tool in listing.tools
        if tool.annotations is not None
    }
    assert set(hints) == {tool.name for tool in listing.tools}
    saving = {name for name in hints if specs[name].evidence_allowed}
    assert {"get_element_properties", "list_elements"} <= saving
    assert {name: hints[name] for name in saving} == {name: (False, False) for name in saving}
    assert {name: hints[name][0] for name in set(hints) - saving} == {name: True for name in set(hints) - saving}


CALLS: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]] = [
    (
        "get_element_properties",
        {"element_type": "junction", "element_id": "10"},
        lambda s: (
            s["data"]["properties"]["elevation"] == pytest.approx(216.408, rel=1e-4)
            and s["units"]["elevation"] == "m"
            and s["source_ref"] == f"project:{PROJECT_SLUG}/junction/10"
        ),
    ),
    (
        "get_element_properties",
        {"element_type": "pump", "element_id": "9"},
        lambda s: s["data"]["properties"]["start_node_id"] == "9" and s["data"]["properties"]["end_node_id"] == "10",
    ),
    (
        "list_elements",
        {"element_type": "pipe", "limit": 5, "offset": 10},
        lambda s: (
            [i["element_id"] for i in s["data"]["items"]] == ["22", "31"]
            and s["data"]["total"] == 12
            and s["page"] == {"total": 12, "limit": 5, "offset": 10, "has_more": False}
        ),
    ),
    (
        "list_elements",
        {"element_type": "junction", "limit": 3},
        lambda s: len(s["data"]["items"]) == 3 and s["data"]["has_more"] is True and s["data"]["total"] == 9,
    ),
    (
        "list_elements",
        {"element_type": "valve"},
        lambda s: s["data"]["items"] == [] and s["data"]["total"] == 0,
    ),
    (
        "get_network_options",
        {"kind": "time"},
        lambda s: s["data"]["values"]["duration"] == 86400 and s["units"]["duration"] == "s",
    ),
    (
        "get_network_options",
        {"kind": "pump_energy", "pump_id": "9"},
        lambda s: s["data"]["pump_id"] == "9",
    ),
    (
        "get_network_schema",
        {"kind": "pipe"},
        lambda s: (
            {"name": "length", "type": "number", "unit": "m", "enum": None, "description": ""}
            in s["data"]["properties"]
        ),
    ),
]


def test_every_tool_result_matches_its_output_schema(mcp_server: ServerProcess, handle: Callable[..., str]) -> None:
    async def body(client: Client) -> list[tuple[Any, Any]]:
        listing = await client.list_tools()
        schemas = {tool.name: tool.output_schema for tool in listing.tools}
        results = []
        for name, arguments, _ in CALLS:
            result = await client.call_tool(name, {"context_handle": handle(), **arguments})
            results.append((result, schemas[name]))
        return results

    results = run_client(mcp_server, body)
    for (name, _, check), (result, schema) in zip(CALLS, results, strict=True):
        assert result.is_error is False, (name, result.structured_content)
        assert result.result_type == "complete"
        Draft202012Validator(schema, registry=Registry()).validate(result.structured_content)
        # ...and specifically its success branch, not the error body.
        success = {**schema, "anyOf": None, "$ref": schema["anyOf"][0]["$ref"]}
        del success["anyOf"]
        Draft202012Validator(success, registry=Registry()).validate(result.structured_content)
        assert len(result.content) == 1 and result.content[0].type == "text" and len(result.content[0].text) < 300
        structured = result.structured_content
        assert structured["origin"] == "model_network" and structured["truncated"] is False
        assert check(structured), (name, structured)
    # Per-call log lines name principal, project, tool, duration, rows and outcome — never the handle,
    # the token or the payload.
    log = mcp_server.log()
    assert "tool=get_element_properties duration_ms=" in log and "outcome=ok" in log
    assert handle() not in log
    assert "eyJ" not in log
    assert "216.408" not in log


def test_business_error_through_sdk_client(mcp_server: ServerProcess, handle: Callable[..., str]) -> None:
    async def body(client: Client) -> Any:
        listing = await client.list_tools()
        schema = next(t.output_schema for t in listing.tools if t.name == "get_network_options")
        return await client.call_tool(
            "get_network_options", {"context_handle": handle(), "kind": "pump_energy"}
        ), schema

    result, schema = run_client(mcp_server, body)
    # The error body validates against the tool's outputSchema (clients that check every result).
    Draft202012Validator(schema, registry=Registry()).validate(result.structured_content)
    assert result.is_error is True
    assert result.structured_content == {
        "code": "INVALID_PARAMETER",
        "message": "pump_energy options need pump_id (the pump's element id).",
        "retryable": False,
    }


def test_sdk_client_with_a_query_scoped_token(mcp_server: ServerProcess, handle: Callable[..., str]) -> None:
    # The SDK client lists tools before calling one: a token-exchanged token (mcp.query
    # mcp.context.bind, no catalog scope) must be enough for the whole call.
    async def body(client: Client) -> Any:
        return await client.call_tool("get_network_schema", {"context_handle": handle(), "kind": "tank"})

    result = run_client(mcp_server, body, bearer=token(scopes="mcp.query mcp.context.bind"))
    assert result.is_error is False, result.structured_content
    assert result.structured_content["data"]["kind"] == "tank"
