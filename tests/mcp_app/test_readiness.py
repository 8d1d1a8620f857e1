"""``manage.py mcp_catalog_check --url`` exit codes and machine output (issue 13): ready (0), not ready
(2: nothing answers), misconfigured (3: the server describes another resource), and ``--json``; the
cancellation check through the cancellation probe against production settings (issue 24)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from io import StringIO

import httpx2
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from mcp_app.probe import PROBE_HOLD_S, PROBE_PATH
from mcp_app.readiness import BUSY_RETRY_S, CANCEL_LIMIT_S, Check, LiveCheck, _retry_after
from tests.support.net1 import CLIENT, PROJECT_SLUG, SERVER_ENV, SERVICE_CLIENT, token
from tests.support.servers import ServerProcess, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]
BIND = "mcp.catalog.read mcp.query mcp.context.bind"


def check(url: str, *extra: str, client: str = SERVICE_CLIENT) -> tuple[int, str]:
    out = StringIO()
    bearer = token(scopes=BIND, client=client)
    try:
        call_command("mcp_catalog_check", "--url", url, "--token", bearer, *extra, stdout=out)
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


def test_cancellation_is_verified_against_production_settings(product_server: ServerProcess) -> None:
    """Issue 24: the product catalog (no test-only tool) and still a verified cancellation, with its time —
    through the cancellation probe, which answers the service client. The command runs with the product's
    catalog too, as on the deployment."""
    with override_settings(TJWATER_MCP_TEST_TOOLS=False):
        code, out = check(product_server.url, "--project", PROJECT_SLUG, "--json")
    body = json.loads(out)
    assert code == 0 and body["status"] == "ready", out
    checks = {c["name"]: c for c in body["checks"]}
    assert {name: c["status"] for name, c in checks.items()} == dict.fromkeys(checks, "ok")
    assert re.fullmatch(r"cancellation verified in \d+ ms", checks["cancellation"]["detail"])
    print(f"\n{checks['cancellation']['detail']}")
    assert int(checks["cancellation"]["detail"].split()[3]) < CANCEL_LIMIT_S * 1000


def test_a_user_token_cannot_verify_cancellation(product_server: ServerProcess) -> None:
    """Anyone but the service client gets the probe's 404: not verified, said so, never counted as ok."""
    with override_settings(TJWATER_MCP_TEST_TOOLS=False):
        code, out = check(product_server.url, "--project", PROJECT_SLUG, client=CLIENT)
    assert code == 0, out
    assert "not_verified  cancellation     the probe answers the service client only" in out


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


def test_a_refused_service_client_is_misconfigured(product_server: ServerProcess) -> None:
    """With ``--client-credentials`` the token is this deployment's own client: a 404 from the probe means
    the server names another ``TJWATER_OIDC_CLIENT_ID`` — a deployment fix, not "not verified"."""
    bearer = token(scopes=BIND)  # the host client's: what a server with another service client refuses
    check = LiveCheck(f"{product_server.url}/mcp", bearer, project=None, context_handle=None, service_client=True)
    assert check.cancellation() == Check(
        "cancellation", "misconfigured", "the probe refused this service's client (TJWATER_OIDC_CLIENT_ID)"
    )


def test_a_busy_probe_is_asked_again_for_its_retry_after(product_server: ServerProcess) -> None:
    """Another caller's probe holds the single flight: the check waits the server's Retry-After (5 s) and
    verifies on the second ask — two readiness checks at once both pass, neither reports a busy server."""
    holding = threading.Event()

    def other_probe() -> None:
        bearer = token(scopes=BIND, client=SERVICE_CLIENT)
        url = f"{product_server.url}{PROBE_PATH}"
        with httpx2.stream("POST", url, headers={"authorization": f"Bearer {bearer}"}, timeout=30) as response:
            for _line in response.iter_lines():
                holding.set()  # held to completion (~5 s), never abandoned

    runner = threading.Thread(target=other_probe)
    runner.start()
    try:
        assert holding.wait(10)
        check = LiveCheck(
            f"{product_server.url}/mcp",
            token(scopes=BIND, client=SERVICE_CLIENT),
            project=None,
            context_handle=None,
            service_client=True,
        )
        started = time.monotonic()
        result = check.cancellation()
        waited = time.monotonic() - started
    finally:
        runner.join(PROBE_HOLD_S + 10)
    assert result.status == "ok", result
    assert waited >= PROBE_HOLD_S - 1  # it did wait for the other probe, not verify through it


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("5", 5.0),
        ("0", 0.0),
        ("-3", 0.0),
        ("3600", BUSY_RETRY_S),
        ("nan", BUSY_RETRY_S),
        ("soon", BUSY_RETRY_S),
        (None, BUSY_RETRY_S),
    ],
)
def test_a_servers_retry_after_is_bounded(header: str | None, seconds: float) -> None:
    assert _retry_after(header) == seconds
