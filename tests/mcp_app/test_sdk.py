"""The fence around the MCP SDK's private parts (issue 18 §3): ``mcp_app/sdk.py`` is the only module of
the project that imports a private ``mcp``/``mcp_types`` name, says why for each, and its Host rule
(which leans on ``TransportSecurityMiddleware._validate_host``) decides as Django would."""

from __future__ import annotations

import ast
import asyncio

import pytest
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request

from mcp_app import sdk
from tests.support.sources import project_sources, read_source

SDK_PACKAGES = ("mcp", "mcp_types")
FENCE = "mcp_app/sdk.py"


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _is_sdk(module: str) -> bool:
    return module.split(".")[0] in SDK_PACKAGES


def private_sdk_names(source: str) -> list[str]:
    """The private SDK names a module's source reaches: ``from mcp… import _x``, a module path with an
    underscore part (``mcp.server._streamable_http_modern``), or ``mcp.….__x`` through an imported module."""
    found: list[str] = []
    sdk_aliases: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _is_sdk(node.module):
            if _private(node.module):
                found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names if _private(alias.name))
            sdk_aliases.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_sdk(alias.name):
                    if _private(alias.name):
                        found.append(alias.name)
                    sdk_aliases.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in sdk_aliases:
                found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize(
    ("source", "private"),
    [
        ("from mcp.server._streamable_http_modern import write", True),
        ("from mcp.shared.inbound import _annotated_positions, find_invalid_x_mcp_header", True),
        ("import mcp.server._streamable_http_modern as m", True),
        ("import mcp.server\nmcp.server._streamable_http_modern.handle_modern_request", True),
        (
            "from mcp.server import transport_security\ntransport_security.TransportSecurityMiddleware._validate_host",
            True,
        ),
        ("from mcp_types import _types", True),
        ("from mcp.shared.inbound import find_invalid_x_mcp_header\nimport mcp_types\nmcp_types.Tool.__name__", False),
        ("from mcp_app.sdk import write_reply\nfrom other import _private\nimport mcpx\nmcpx._y", False),
    ],
)
def test_the_scan_finds_private_sdk_names(source: str, private: bool) -> None:
    assert bool(private_sdk_names(source)) is private


def test_no_module_but_sdk_py_imports_a_private_sdk_name() -> None:
    sources = project_sources()
    assert FENCE in sources and len(sources) > 100  # the scan really reads the tree
    offenders = {path: names for path in sources if path != FENCE and (names := private_sdk_names(read_source(path)))}
    assert offenders == {}


def test_sdk_py_says_why_for_every_private_name_it_imports() -> None:
    imported = {
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(read_source(FENCE)))
        if isinstance(node, ast.ImportFrom) and node.module and _is_sdk(node.module)
        for alias in node.names
        if _private(f"{node.module}.{alias.name}")
    }
    assert len(imported) == 9  # the eight transport helpers and the x-mcp-header walk
    documented = {key for key in sdk.FENCED if not key.endswith("(behaviour)")}
    assert imported == documented
    assert all(reason.strip() for reason in sdk.FENCED.values())


def _request(host: str, origin: str | None = None) -> Request:
    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return Request({"type": "http", "method": "POST", "path": "/mcp", "headers": headers})


@pytest.mark.parametrize(
    ("host", "status"),
    [("api.example.com", None), ("api.example.com:8443", None), ("evil.test", 421), ("example.com.evil.test", 421)],
)
def test_dns_rebinding_settings_let_the_sdk_ask_our_host_rule(host: str, status: int | None) -> None:
    """The SDK's own middleware, with the settings ``dns_rebinding_settings`` builds, applies the given
    rule to ``Host`` (the ``_validate_host`` membership test this relies on) and still checks ``Origin``."""
    asked: list[str] = []

    def host_allowed(value: str) -> bool:
        asked.append(value)
        return value.split(":")[0].endswith(".example.com")

    middleware = TransportSecurityMiddleware(
        sdk.dns_rebinding_settings(host_allowed=host_allowed, allowed_origins=["https://api.example.com"])
    )
    refused = asyncio.run(middleware.validate_request(_request(host), is_post=True))
    assert (refused.status_code if refused is not None else None) == status
    assert asked == [host]
    if status is None:
        foreign = asyncio.run(middleware.validate_request(_request(host, origin="https://evil.test"), is_post=True))
        assert foreign is not None and foreign.status_code == 403
