"""``manage.py mcp_token`` and ``manage.py mcp_catalog_check``."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any
from urllib.parse import parse_qs

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from contexts import tokens
from mcp_app.management.commands.mcp_catalog_check import check_catalog
from queries.registry import all_tools, input_object
from tjwater.registry import TOOLS


def test_mcp_token_prints_exactly_one_valid_token() -> None:
    out = StringIO()
    call_command(
        "mcp_token", "--sub", "svc", "--client", "tjwater-agent-mcp", "--scope", "mcp.query", "--ttl", "120", stdout=out
    )
    text = out.getvalue()
    assert text.count("\n") <= 1 and len(text.split()) == 1
    tokens.reset_validator()
    verified = tokens.verify_token(text.strip())
    assert (verified.subject, verified.client_id, verified.scopes) == (
        "svc",
        "tjwater-agent-mcp",
        frozenset({"mcp.query"}),
    )
    assert verified.expires_at - verified.claims["iat"] == 120


def test_mcp_token_refuses_missing_arguments() -> None:
    with pytest.raises(CommandError):
        call_command("mcp_token", "--sub", "svc")


class TokenEndpoint:
    """A real local issuer with discovery and a client_credentials token endpoint."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                self._send(200, {"issuer": outer.url, "token_endpoint": f"{outer.url}/token"})

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
                auth = base64.b64decode(self.headers["authorization"].split()[1]).decode()
                outer.requests.append({"form": form, "auth": auth})
                if auth != "svc-client:s3cret":
                    self._send(401, {"error": "invalid_client"})
                    return
                self._send(200, {"access_token": "issued.token.value", "token_type": "Bearer"})

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/realms/water"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_client_credentials_fetches_from_real_issuer(token_endpoint: TokenEndpoint, settings: Any) -> None:
    settings.TJWATER_OIDC_ISSUER = token_endpoint.url
    settings.TJWATER_OIDC_CLIENT_ID = "svc-client"
    settings.TJWATER_OIDC_CLIENT_SECRET = "s3cret"
    settings.TJWATER_MCP_RESOURCE_URI = "https://water.example/mcp"
    out = StringIO()
    call_command("mcp_token", "--client-credentials", stdout=out)
    assert out.getvalue().strip() == "issued.token.value"
    form = token_endpoint.requests[0]["form"]
    assert form["grant_type"] == ["client_credentials"]
    assert form["resource"] == ["https://water.example/mcp"]
    settings.TJWATER_OIDC_CLIENT_SECRET = "wrong"
    with pytest.raises(CommandError, match="refused"):
        call_command("mcp_token", "--client-credentials", stdout=StringIO())


#: The product catalog: SPEC §5's 25 tools, issue 22's four (topology, flow path, the two rankings) and
#: issue 40's get_project (the project's clock and units).
PRODUCT_TOOLS = 30
ISSUE_22_TOOLS = {"get_connected_elements", "trace_flow_path", "rank_model_baseline", "rank_scada_deviation"}


def product_tools() -> list[str]:
    return [t.name for t in TOOLS.product_tools()]


def test_catalog_size() -> None:
    names = product_tools()
    assert len(names) == PRODUCT_TOOLS, sorted(names)
    assert ISSUE_22_TOOLS <= set(names) and "get_project" in names


def test_catalog_check_passes_on_the_registry() -> None:
    out = StringIO()
    call_command("mcp_catalog_check", stdout=out)
    text = out.getvalue()
    assert text.startswith(f"catalog ok: {len(all_tools())} tools")
    listed = {line.split()[0] for line in text.splitlines()[2:]}
    assert ISSUE_22_TOOLS <= listed


def test_catalog_check_lists_problems() -> None:
    good = all_tools()[0]
    broken_schema = {"type": "object", "properties": {"project_id": {"type": "integer"}}}
    remote = input_object({"x": {"$ref": "https://example.com/x.json"}}, [])
    from dataclasses import replace

    tools = [
        replace(good, name="zz_open", input_schema=broken_schema, permissions=()),
        replace(good, name="aa_remote", input_schema=remote, permissions=("root",)),
    ]
    problems = check_catalog(tools)
    text = "\n".join(problems)
    assert "not stable" in text
    assert "zz_open: input schema must be an object with additionalProperties: false" in text
    assert "zz_open: input schema must require a context_handle" in text
    assert "zz_open: input must not choose project_id" in text
    assert "zz_open: no required permission" in text
    assert "aa_remote: input schema has non-local $ref" in text
    assert "aa_remote: unknown permission codes ['root']" in text


def test_catalog_check_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from mcp_app.management.commands import mcp_catalog_check

    broken = [replace(all_tools()[0], permissions=())]
    monkeypatch.setattr(mcp_catalog_check, "all_tools", lambda: broken)  # a broken registry, as data
    err = StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("mcp_catalog_check", stderr=err)
    assert exc.value.returncode == 1
    assert "no required permission" in err.getvalue()


def test_catalog_check_url_takes_the_base_url_or_the_mcp_url() -> None:
    from mcp_app.management.commands.mcp_catalog_check import mcp_endpoint

    for given in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/mcp",
                  "http://127.0.0.1:8000/mcp/"):  # fmt: skip
        assert mcp_endpoint(given) == "http://127.0.0.1:8000/mcp"
    assert mcp_endpoint("https://water.example/tjwater/") == "https://water.example/tjwater/mcp"


def test_catalog_check_takes_a_handle_that_begins_with_a_dash_after_equals() -> None:
    """A context handle is URL-safe base64: one in 64 begins with "-", which argparse reads as an option
    unless written ``--context-handle=H`` (the form the command's help and mcp_app/README.md give)."""
    from mcp_app.management.commands.mcp_catalog_check import Command

    parser = Command().create_parser("manage.py", "mcp_catalog_check")
    assert parser.parse_args(["--url", "http://x/mcp", "--context-handle=-Ab_9"]).context_handle == "-Ab_9"
    assert "--context-handle=H" in parser.format_help().replace("\n", " ").replace("  ", " ")
