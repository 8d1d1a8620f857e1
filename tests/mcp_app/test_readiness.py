"""``manage.py mcp_catalog_check --url`` exit codes and machine output (issue 13): ready (0), not ready
(2: nothing answers), misconfigured (3: the server describes another resource), and ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.conftest import ServerProcess, free_port
from tests.mcp_app.conftest import PROJECT_SLUG, SERVER_ENV, token

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]
BIND = "mcp.catalog.read mcp.query mcp.context.bind"


def check(url: str, *extra: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("mcp_catalog_check", "--url", url, "--token", token(scopes=BIND), *extra, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def test_json_output_of_a_ready_server(mcp_server: ServerProcess) -> None:
    code, out = check(f"{mcp_server.url}/mcp", "--project", PROJECT_SLUG, "--json")
    body = json.loads(out)
    assert code == 0 and body["status"] == "ready", out
    assert {c["name"]: c["status"] for c in body["checks"]} == {
        "401 challenge": "ok",
        "server/discover": "ok",
        "tools/list": "ok",
        "harmless call": "ok",
        "cancellation": "ok",
    }


def test_nothing_listening_is_not_ready() -> None:
    code, out = check(f"http://127.0.0.1:{free_port()}/mcp")
    assert code == 2
    assert out.splitlines()[-1] == "not ready"


def test_a_server_for_another_resource_is_misconfigured(
    start_server: Callable[..., ServerProcess], e2e_project: object
) -> None:
    server = start_server(**SERVER_ENV, TJWATER_MCP_RESOURCE_URI="https://mcp.example.org/mcp")
    code, out = check(f"{server.url}/mcp")
    assert code == 3
    assert "misconfigured 401 challenge" in " ".join(out.split())
    assert out.splitlines()[-1] == "misconfigured"
