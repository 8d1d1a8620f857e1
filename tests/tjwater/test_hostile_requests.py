"""Hostile bodies on the REST edge (issue 41 item 2): each refused with its status and stable code, and
nothing logged with a traceback — through Django's test client in this process (the middleware, the DRF
parser, the query-parameter parser) and through a real uvicorn server (the ASGI body bound:
``tjwater.bounds.BoundedBody``, declared and chunked bodies).

The issue's three cases first: a 3 MB ``POST /api/v1/mcp-query-contexts`` (was 500 ``RequestDataTooBig``),
JSON nested 1,000 deep in that body (was 500 ``RecursionError``), and a JSON query parameter nested 1,500
deep on a REST read (was 500: ``queries.api`` caught only ``ValueError``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx2
import pytest
from django.conf import settings
from django.test import Client, override_settings

from contexts import dev_issuer
from contexts.errors import InvalidParameter
from contexts.models import Principal, Project
from queries.api import _convert as parse_value
from tests.contexts import factories
from tests.support.servers import ServerProcess
from tjwater import bounds

pytestmark = pytest.mark.django_db

CONTEXTS = "/api/v1/mcp-query-contexts"
BIND = ["mcp.context.bind", "mcp.query"]
MB = 1024 * 1024


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def chat_body(project: str) -> str:
    return json.dumps({"project": project, "session_id": "hostile", "purpose": "ordinary_chat"})


def bind_token(who: Principal) -> str:
    with override_settings(DEBUG=True):  # the dev issuer mints only in development, like the servers
        return dev_issuer.mint_token(subject=who.subject, client_id=factories.HOST_CLIENT, scopes=BIND, ttl_s=600)


def api_token(who: Principal) -> str:
    with override_settings(DEBUG=True):
        return dev_issuer.mint_token(
            subject=who.subject,
            client_id=factories.HOST_CLIENT,
            scopes=["api.read"],
            audience=settings.TJWATER_API_AUDIENCE,
            ttl_s=600,
        )


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing logged at ERROR, nothing with exception info, no traceback text."""
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info or "Traceback" in r.getMessage()]
    assert bad == [], [f"{r.name}: {r.getMessage()}" for r in bad]


@dataclass
class Member:
    project: Project
    who: Principal


@pytest.fixture
def member(db: None) -> Member:
    where = factories.project()
    who = factories.principal()
    factories.membership(who, where)
    return Member(project=where, who=who)


def post(client: Client, token: str, body: bytes | str, content_type: str = "application/json") -> tuple[int, dict]:
    response = client.post(CONTEXTS, data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


# --- the three cases --------------------------------------------------------------------


def test_a_3_mb_context_body_is_413_before_it_is_parsed(member: Member, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    body = json.dumps({"project": member.project.slug, "session_id": "x" * 3 * MB, "purpose": "ordinary_chat"})
    status, answer = post(Client(), bind_token(member.who), body)
    assert status == 413
    assert answer["code"] == "PAYLOAD_TOO_LARGE"
    assert str(settings.TJWATER_REQUEST_MAX_BYTES) in answer["message"]
    assert answer["retryable"] is False
    no_traceback(caplog)


def test_a_body_over_the_limit_is_refused_without_a_token_too(settings: object, db: None) -> None:
    """The bound comes before authentication: nobody makes the server read a big body."""
    settings.TJWATER_REQUEST_MAX_BYTES = 100  # type: ignore[attr-defined]
    response = Client().post(CONTEXTS, data=b"{" + b" " * 200 + b"}", content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert "100 bytes" in response.json()["message"]


def test_json_nested_1000_deep_in_a_context_body_is_400(member: Member, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    status, answer = post(Client(), bind_token(member.who), deep(1000))
    assert status == 400
    assert answer["code"] == "INVALID_JSON"
    assert f"deeper than the limit of {settings.TJWATER_JSON_MAX_DEPTH}" in answer["message"]
    no_traceback(caplog)


def test_a_json_query_parameter_nested_1500_deep_is_400(member: Member, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    response = Client().get(
        f"/api/v1/projects/{member.project.slug}/workbench/runtime",
        {"part": '{"a": ' + deep(1500) + "}"},
        HTTP_AUTHORIZATION=f"Bearer {api_token(member.who)}",
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "INVALID_PARAMETER"
    assert response.json()["message"] == (
        f"part is not valid JSON: it is nested deeper than the limit of {settings.TJWATER_JSON_MAX_DEPTH}."
    )
    no_traceback(caplog)


def test_the_depth_limit_is_the_setting(member: Member, settings: object) -> None:
    settings.TJWATER_JSON_MAX_DEPTH = 3  # type: ignore[attr-defined]
    status, answer = post(Client(), bind_token(member.who), '{"a": [[1]]}')
    assert (status, answer["code"]) == (400, "INVALID_PARAMETER")  # depth 3: parsed, then the serializer
    status, answer = post(Client(), bind_token(member.who), '{"a": [[[1]]]}')
    assert (status, answer["code"]) == (400, "INVALID_JSON")
    assert "limit of 3" in answer["message"]


# --- other hostile bodies -----------------------------------------------------------------------

HOSTILE_BODIES = [
    pytest.param(b"{not json", 400, "INVALID_JSON", "malformed at line 1, column 2", id="malformed"),
    pytest.param(b'{"session_id": "\xff\xfe"}', 400, "INVALID_JSON", "not UTF-8", id="invalid-utf8"),
    pytest.param(b'{"session_id": "a\x00b"}', 400, "INVALID_JSON", "malformed", id="raw-nul"),
    pytest.param(b'{"session_id": "a\\u0000b"}', 400, "INVALID_JSON", "at /session_id", id="escaped-nul"),
    pytest.param(b'{"session_id": "\\ud800"}', 400, "INVALID_JSON", "lone surrogate", id="lone-surrogate"),
    pytest.param(b'{"task_id": 1e999999}', 400, "INVALID_JSON", "a number is too large", id="huge-float"),
    pytest.param(b'{"task_id": ' + b"9" * 100_000 + b"}", 400, "INVALID_JSON", "4300 digits", id="100k-digits"),
    pytest.param(b'{"task_id": NaN}', 400, "INVALID_JSON", "NaN is not a JSON number", id="nan"),
    pytest.param(b"[1, 2, 3]", 400, "INVALID_PARAMETER", "not valid", id="array-not-object"),
    pytest.param(b'"a string"', 400, "INVALID_PARAMETER", "not valid", id="string-not-object"),
    pytest.param(b"null", 400, "INVALID_PARAMETER", "not valid", id="null"),
    pytest.param(b'{"task_id": 99999999999999999999}', 400, "INVALID_PARAMETER", "not valid", id="int-overflow"),
]


@pytest.mark.parametrize(("body", "status", "code", "says"), HOSTILE_BODIES)
def test_hostile_context_bodies(
    member: Member, caplog: pytest.LogCaptureFixture, body: bytes, status: int, code: str, says: str
) -> None:
    caplog.set_level(logging.INFO)
    got, answer = post(Client(), bind_token(member.who), body)
    assert (got, answer["code"]) == (status, code), answer
    assert says in answer["message"]
    assert answer["retryable"] is False
    no_traceback(caplog)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_not_json_by_type_is_415(
    member: Member, caplog: pytest.LogCaptureFixture, content_type: str
) -> None:
    caplog.set_level(logging.INFO)
    got, answer = post(Client(), bind_token(member.who), chat_body(member.project.slug), content_type)
    assert (got, answer["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert content_type not in answer["message"]  # the client's header is not echoed
    no_traceback(caplog)


def test_a_valid_body_still_binds(member: Member) -> None:
    got, answer = post(Client(), bind_token(member.who), chat_body(member.project.slug))
    assert got == 201, answer
    assert answer["project"] == member.project.slug


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"part": "{not json"}, "part is not valid JSON: malformed at line 1, column 2."),
        ({"part": '{"a": 1e999999}'}, "part is not valid JSON: a number is too large."),
        ({"part": '{"a": ' + "7" * 100_000 + "}"}, "part is not valid JSON: an integer has more than 4300 digits."),
        ({"part": '{"a": "\\u0000"}'}, "part is not valid JSON: it holds text that is not valid"),
    ],
)
def test_hostile_json_query_parameters(
    member: Member, caplog: pytest.LogCaptureFixture, query: dict[str, str], says: str
) -> None:
    caplog.set_level(logging.INFO)
    response = Client().get(
        f"/api/v1/projects/{member.project.slug}/workbench/runtime",
        query,
        HTTP_AUTHORIZATION=f"Bearer {api_token(member.who)}",
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "INVALID_PARAMETER"
    assert response.json()["message"].startswith(says)
    no_traceback(caplog)


@pytest.mark.parametrize("value", ["1e999999", "9" * 100_000, "9" * 30, "1.5"])
def test_hostile_integer_query_parameters(member: Member, value: str) -> None:
    """An integer Python refuses (100k digits) or would take past bigint (30 digits) is refused by name."""
    response = Client().get(
        f"/api/v1/projects/{member.project.slug}/scada-devices",
        {"limit": value},
        HTTP_AUTHORIZATION=f"Bearer {api_token(member.who)}",
    )
    assert response.status_code == 400, response.content
    assert response.json() == {
        "code": "INVALID_PARAMETER",
        "message": "limit must be an integer (64-bit).",
        "retryable": False,
    }


@pytest.mark.parametrize("value", ["1e999999", "-1e999999", "inf", "nan"])
def test_a_number_parameter_must_be_finite(value: str) -> None:
    with pytest.raises(InvalidParameter, match="x must be a finite number"):
        parse_value("x", [value], {"type": "number"})


def test_too_many_query_parameters_is_400_not_500(member: Member, caplog: pytest.LogCaptureFixture) -> None:
    """Django's own refusal (``TooManyFieldsSent``, past ``DATA_UPLOAD_MAX_NUMBER_FIELDS``) is the caller's."""
    caplog.set_level(logging.INFO)
    query = "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = Client().get(
        f"/api/v1/projects/{member.project.slug}/scada-devices?{query}",
        HTTP_AUTHORIZATION=f"Bearer {api_token(member.who)}",
    )
    assert (response.status_code, response.json()["code"]) == (400, "INVALID_REQUEST")
    no_traceback(caplog)


# --- the depth scan itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        (deep(64), False),
        (deep(65), True),
        ('["' + "[" * 1000 + '"]', False),  # brackets inside a string do not nest
        ('["\\"' + "[" * 1000 + '"]', False),  # nor after an escaped quote
        ('{"a": ' * 65 + "1" + "}" * 65, True),
        ("[" * 100_000, True),  # unbalanced: refused as too deep, never parsed
    ],
)
def test_the_depth_scan(text: str, too_deep: bool) -> None:
    assert bounds.json_depth_exceeds(text, 64) is too_deep


# --- a real server: the ASGI bound ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server()


@pytest.fixture(scope="module")
def bound_member(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[Member]:
    """Committed rows (the server is another process), deleted afterwards."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        where, who = factories.project("hostile-requests"), factories.principal("hostile-requests-alice")
        factories.membership(who, where)
    yield Member(project=where, who=who)
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        from contexts.models import ContextEvent

        ContextEvent.objects.filter(project_id=where.pk).delete()
        Project.objects.filter(pk=where.pk).delete()
        Principal.objects.filter(pk=who.pk).delete()


def _chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    yield b'{"session_id": "'
    for _ in range(total // size):
        yield b"x" * size
    yield b'"}'


@pytest.mark.e2e
def test_a_real_server_refuses_big_and_deep_bodies(server: ServerProcess, bound_member: Member) -> None:
    headers = {"Authorization": f"Bearer {bind_token(bound_member.who)}", "Content-Type": "application/json"}
    declared = httpx2.post(f"{server.url}{CONTEXTS}", content=b"x" * 3 * MB, headers=headers, timeout=30)
    assert (declared.status_code, declared.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    chunked = httpx2.post(f"{server.url}{CONTEXTS}", content=_chunks(3 * MB), headers=headers, timeout=30)
    assert (chunked.status_code, chunked.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    nested = httpx2.post(f"{server.url}{CONTEXTS}", content=deep(1000).encode(), headers=headers, timeout=30)
    assert (nested.status_code, nested.json()["code"]) == (400, "INVALID_JSON")
    query = httpx2.get(
        f"{server.url}/api/v1/projects/{bound_member.project.slug}/workbench/runtime",
        params={"part": deep(1500)},
        headers={"Authorization": f"Bearer {api_token(bound_member.who)}"},
        timeout=30,
    )
    assert (query.status_code, query.json()["code"]) == (400, "INVALID_PARAMETER")
    # The same connection pool, a small body: still served (the refusals left the server healthy).
    ok = httpx2.post(f"{server.url}{CONTEXTS}", content=chat_body(bound_member.project.slug), headers=headers)
    assert ok.status_code == 201, ok.text
    assert "Traceback" not in server.log()
