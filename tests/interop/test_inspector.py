"""A foreign client: the MCP Inspector CLI 2.12.0 (pinned in devtools/) against a real server (issue 6).

The Inspector is the TypeScript SDK's client, so it also checks what our Python-side tests cannot see:
that another implementation negotiates 2026-07-28 with us, accepts our schemas and validates our
``structuredContent`` against our ``outputSchema``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from contexts import dev_issuer
from contexts.models import Permission
from tests.interop.conformance import DEVTOOLS, NODE_BIN, node_env
from tests.support.idp import Members, create_context

pytestmark = pytest.mark.e2e

INSPECTOR_JS = (
    DEVTOOLS / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
)
SUBJECT = "inspector-user"


@dataclass
class InspectorRun:
    returncode: int
    payload: dict[str, Any]
    stderr: str


@dataclass
class Setup:
    server_url: str
    token: str
    handle: str
    catalog: Path


def inspector(setup: Setup, *args: str) -> InspectorRun:
    """``inspector --cli URL --protocol-era modern --header "Authorization: Bearer …" ARGS --format json``."""
    completed = subprocess.run(
        [
            str(NODE_BIN / "node"),
            str(INSPECTOR_JS),
            "--cli",
            f"{setup.server_url}/mcp",
            "--protocol-era",
            "modern",
            "--header",
            f"Authorization: Bearer {setup.token}",
            "--format",
            "json",
            "-q",
            *args,
        ],
        cwd=DEVTOOLS,
        # Its catalog file goes to a temporary path, not the user's home directory.
        env={**node_env(), "MCP_CATALOG_PATH": str(setup.catalog)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    text = completed.stdout.strip() or completed.stderr.strip()
    return InspectorRun(completed.returncode, json.loads(text.splitlines()[-1]), completed.stderr)


@pytest.fixture(scope="module")
def setup(
    live_server_url: str,
    members_factory: Callable[..., Members],
    tmp_path_factory: pytest.TempPathFactory,
) -> Setup:
    members = members_factory(settings.TJWATER_DEV_ISSUER_ID, {SUBJECT: [p.value for p in Permission]})
    token = dev_issuer.mint_token(
        subject=SUBJECT, client_id="tjwater-agent-mcp", scopes=["mcp.catalog.read", "mcp.query", "mcp.context.bind"]
    )
    handle = create_context(live_server_url, token, members.project_slug)
    return Setup(live_server_url, token, handle, tmp_path_factory.mktemp("inspector") / "catalog.json")


def test_inspector_lists_our_tools(setup: Setup) -> None:
    run = inspector(setup, "--method", "tools/list")
    assert run.returncode == 0, run.stderr
    tools = {tool["name"]: tool for tool in run.payload["result"]["tools"]}
    assert {"get_element_properties", "list_elements", "get_network_options", "get_network_schema"} <= set(tools)
    assert "context_handle" in tools["list_elements"]["inputSchema"]["required"]


def test_inspector_calls_a_tool_with_a_context_handle(setup: Setup) -> None:
    arguments = {"element_type": "junction", "limit": 5, "context_handle": setup.handle}
    run = inspector(
        setup, "--method", "tools/call", "--tool-name", "list_elements", "--tool-args-json", json.dumps(arguments)
    )
    assert run.returncode == 0, (run.payload, run.stderr)
    result = run.payload["result"]
    assert result.get("isError") is not True, result
    # The Inspector validated this against our outputSchema before printing it.
    assert result["structuredContent"]["data"]["items"] == []
    assert result["structuredContent"]["source"]


def test_inspector_reads_a_business_error_result(setup: Setup) -> None:
    arguments = {"element_type": "pipe", "context_handle": "not-a-context-handle-of-this-caller"}
    run = inspector(
        setup, "--method", "tools/call", "--tool-name", "list_elements", "--tool-args-json", json.dumps(arguments)
    )
    # The Inspector CLI exits 5 ("tool_is_error") when the tool answered isError; the result itself was
    # accepted (its structuredContent validates against the tool's outputSchema) and is printed.
    assert run.returncode == 5, (run.payload, run.stderr)
    assert run.payload["result"]["isError"] is True
    assert run.payload["result"]["structuredContent"]["code"] == "CONTEXT_INVALID"


def test_inspector_lists_resources_and_reading_an_unknown_one_is_an_error(setup: Setup) -> None:
    # Evidence snapshots become resources with the evidence work (R-EVID-4); until then the list is empty
    # and resources/read is proven on its error paths: without a context handle in
    # _meta["cn.tjwater/contextHandle"] the read is refused before the URI is looked at; with one, the
    # unknown URI is "not found" (-32602, SEP-2164).
    listed = inspector(setup, "--method", "resources/list")
    assert listed.returncode == 0, listed.stderr
    assert listed.payload["result"]["resources"] == []
    uri = "tjwater://evidence/999999"
    refused = inspector(setup, "--method", "resources/read", "--uri", uri)
    assert refused.returncode != 0
    assert refused.payload["error"]["message"].startswith("PROJECT_CONTEXT_REQUIRED: ")
    read = inspector(
        setup,
        "--method",
        "resources/read",
        "--uri",
        uri,
        "--metadata",
        f"cn.tjwater/contextHandle={json.dumps(setup.handle)}",
    )
    assert read.returncode != 0
    assert read.payload["error"]["message"] == "Resource not found"
