"""Hostile bodies against both edges of a real server, ``/mcp`` and REST (issue 41 items 2 and 4).

Each body is generated here and sent over real HTTP to one uvicorn process: 3 MB (declared, and chunked
with no ``Content-Length``), JSON nested 1,000 deep, a JSON query parameter nested 1,500 deep, invalid
UTF-8, a raw and an escaped NUL, ``1e999999`` and a 100,000-digit integer. Every answer must be a refusal
of the caller (4xx) — never a 5xx — with a JSON body, and the server's log must hold no traceback. Each
answer's status (and REST code) is recorded in ``var/resilience/results.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx2
import pytest
from django.conf import settings
from django.test import override_settings

from contexts import dev_issuer
from contexts.models import ContextEvent, Principal, Project
from tests.contexts import factories
from tests.support.mcp_http import envelope, rpc_headers
from tests.support.resilience import Figures
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.resilience, pytest.mark.django_db]

MB = 1024 * 1024
CONTEXTS = "/api/v1/mcp-query-contexts"
TOOL = "list_scada_devices"


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def tool_call(arguments: str) -> bytes:
    """A ``tools/call`` whose ``arguments`` are the raw JSON text given."""
    meta = json.dumps(envelope())
    head = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call"})[:-1]
    return f'{head}, "params": {{"name": "{TOOL}", "arguments": {arguments}, "_meta": {meta}}}}}'.encode()


def chunked(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body sent without ``Content-Length`` (httpx sends a generator chunked)."""
    yield b'{"session_id": "'
    for _ in range(total // size):
        yield b"x" * size
    yield b'"}'


# name → (REST context body, MCP body); a callable is a fresh generator per request.
BODIES: dict[str, tuple[bytes | Callable[[], Iterator[bytes]], bytes | Callable[[], Iterator[bytes]]]] = {
    "3mb": (b'{"session_id": "' + b"x" * 3 * MB + b'"}', tool_call('{"a": "' + "x" * 3 * MB + '"}')),
    "3mb-chunked": (lambda: chunked(3 * MB), lambda: chunked(3 * MB)),
    "depth-1000": (deep(1000).encode(), tool_call(deep(1000))),
    "invalid-utf8": (b'{"session_id": "\xff\xfe\xfd"}', tool_call('{"a": "x"}').replace(b'"x"', b'"\xff\xfe"')),
    "raw-nul": (b'{"session_id": "a\x00b"}', tool_call('{"a": "x"}').replace(b'"x"', b'"a\x00b"')),
    "escaped-nul": (b'{"session_id": "a\\u0000b"}', tool_call('{"context_handle": "a\\u0000b"}')),
    "1e999999": (b'{"task_id": 1e999999}', tool_call('{"limit": 1e999999}')),
    "100k-digits": (b'{"task_id": ' + b"9" * 100_000 + b"}", tool_call('{"limit": ' + "9" * 100_000 + "}")),
}


@dataclass
class Member:
    project: Project
    who: Principal


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server()


@pytest.fixture(scope="module")
def member(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[Member]:
    """Committed rows (the server is another process), deleted afterwards."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        where, who = factories.project("hostile-endpoints"), factories.principal("hostile-endpoints-alice")
        factories.membership(who, where)
    yield Member(project=where, who=who)
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        ContextEvent.objects.filter(project_id=where.pk).delete()
        Project.objects.filter(pk=where.pk).delete()
        Principal.objects.filter(pk=who.pk).delete()


def token(who: Principal, scopes: list[str], audience: str | None = None) -> str:
    with override_settings(DEBUG=True):  # the dev issuer mints only in development, like the server
        return dev_issuer.mint_token(
            subject=who.subject, client_id=factories.HOST_CLIENT, scopes=scopes, audience=audience, ttl_s=600
        )


def _content(body: bytes | Callable[[], Iterator[bytes]]) -> bytes | Iterator[bytes]:
    return body() if callable(body) else body


def _judge(name: str, response: httpx2.Response) -> dict[str, object]:
    assert response.status_code < 500, f"{name}: {response.status_code} {response.text[:300]}"
    assert 400 <= response.status_code < 500, f"{name}: a hostile body was accepted ({response.status_code})"
    assert "Traceback" not in response.text and 'File "' not in response.text, name
    return {"status": response.status_code}


@pytest.mark.parametrize("name", list(BODIES))
def test_rest_refuses_hostile_bodies(server: ServerProcess, member: Member, figures: Figures, name: str) -> None:
    headers = {"Authorization": f"Bearer {token(member.who, ['mcp.context.bind', 'mcp.query'])}"}
    response = httpx2.post(
        f"{server.url}{CONTEXTS}",
        content=_content(BODIES[name][0]),
        headers={**headers, "Content-Type": "application/json"},
        timeout=30,
    )
    seen = _judge(name, response)
    body = response.json()
    assert body["code"] in {"PAYLOAD_TOO_LARGE", "INVALID_JSON", "INVALID_PARAMETER"}, body
    assert body["retryable"] is False
    figures.record(f"hostile_rest_{name}", {**seen, "code": body["code"]})


@pytest.mark.parametrize("name", list(BODIES))
def test_mcp_refuses_hostile_bodies(server: ServerProcess, member: Member, figures: Figures, name: str) -> None:
    bearer = token(member.who, ["mcp.query"])
    response = httpx2.post(
        f"{server.url}/mcp",
        content=_content(BODIES[name][1]),
        headers=rpc_headers("tools/call", bearer, name=TOOL),
        timeout=30,
    )
    figures.record(f"hostile_mcp_{name}", _judge(name, response))


@pytest.mark.parametrize("depth", [1000, 1500])
def test_rest_refuses_a_deep_json_query_parameter(
    server: ServerProcess, member: Member, figures: Figures, depth: int
) -> None:
    response = httpx2.get(
        f"{server.url}/api/v1/projects/{member.project.slug}/workbench/runtime",
        params={"part": deep(depth)},
        headers={"Authorization": f"Bearer {token(member.who, ['api.read'], settings.TJWATER_API_AUDIENCE)}"},
        timeout=30,
    )
    seen = _judge(f"query depth {depth}", response)
    assert response.json()["code"] == "INVALID_PARAMETER"
    figures.record(f"hostile_rest_query_depth_{depth}", seen)


def test_the_server_logged_no_traceback(server: ServerProcess, member: Member) -> None:
    """Last in the module: every hostile body above went through this server."""
    ok = httpx2.post(
        f"{server.url}{CONTEXTS}",
        json={"project": member.project.slug, "session_id": "after-hostile", "purpose": "ordinary_chat"},
        headers={"Authorization": f"Bearer {token(member.who, ['mcp.context.bind', 'mcp.query'])}"},
        timeout=30,
    )
    assert ok.status_code == 201, ok.text  # still serving
    assert "Traceback" not in server.log()
