"""Fixtures for the queries tests: the demo utility, one real uvicorn server, committed context handles
of the demo principals, and a helper that calls a tool over real HTTP and validates the result against the
tool's ``outputSchema``.

Demo principals (``queries.demo.seed``): alice holds every permission on ``tianjin-demo``; bob holds
``webgis.view`` only on ``tianjin-demo`` and every permission on ``demo-b``; carol has no membership.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from jsonschema import Draft202012Validator
from referencing import Registry

from contexts import dev_issuer
from contexts.grants import tool_catalog
from contexts.models import ContextEvent, Project, QueryContext
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from queries.registry import tools_by_name
from tests.conftest import ServerProcess
from tests.mcp_app.conftest import call_tool_raw

CLIENT = "tjwater-agent-mcp"
DEMO = "tianjin-demo"
DEMO_B = "demo-b"
# (principal, project) pairs that get an ordinary_chat context for the session.
BINDINGS = [("alice", DEMO), ("bob", DEMO), ("bob", DEMO_B)]
_HANDLES: dict[tuple[str, str], str] = {}


def _verified(subject: str) -> VerifiedToken:
    return VerifiedToken(
        issuer=settings.TJWATER_OIDC_ISSUER,
        subject=subject,
        client_id=CLIENT,
        scopes=frozenset({"mcp.context.bind"}),
        audience=(settings.TJWATER_MCP_AUDIENCE,),
        expires_at=0,
    )


@pytest.fixture(scope="session")
def demo_handles(demo_loaded: None, django_db_blocker: Any) -> Iterator[dict[tuple[str, str], str]]:
    """One committed ordinary_chat context per binding in ``BINDINGS`` (as the REST API creates them)."""
    created: list[int] = []
    with django_db_blocker.unblock(), override_settings(TJWATER_CONTEXT_TTL_S=6 * 3600):
        catalog, task_scoped = tool_catalog()
        for subject, project in BINDINGS:
            made = context_create(
                token=_verified(subject),
                project_slug=project,
                session_id=f"queries-tests-{subject}-{project}",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            )
            _HANDLES[(subject, project)] = made.handle
            created.append(made.context_id)
    yield dict(_HANDLES)
    _HANDLES.clear()
    with django_db_blocker.unblock():
        ContextEvent.objects.filter(context_id__in=created).delete()
        QueryContext.objects.filter(pk__in=created).delete()


@pytest.fixture(scope="session")
def demo_server(start_server: Callable[..., ServerProcess], demo_handles: dict[tuple[str, str], str]) -> ServerProcess:
    return start_server(REDIS_URL=settings.REDIS_URL)


def validate_output(tool: str, structured: dict[str, Any]) -> None:
    """Raise unless ``structured`` validates against the tool's ``outputSchema`` (R-PROTO-4)."""
    schema = tools_by_name()[tool].output_schema
    Draft202012Validator(schema, registry=Registry()).validate(structured)


@pytest.fixture
def demo_call(demo_server: ServerProcess) -> Callable[..., dict[str, Any]]:
    """``demo_call(tool, args, who="alice", project="tianjin-demo")`` → the JSON-RPC reply (``result`` or
    ``error``) of a real ``tools/call``; a ``result`` is validated against the tool's outputSchema."""

    def call(tool: str, args: dict[str, Any], who: str = "alice", project: str = DEMO) -> dict[str, Any]:
        bearer = dev_issuer.mint_token(subject=who, client_id=CLIENT, scopes=["mcp.query"], ttl_s=600)
        reply = call_tool_raw(
            demo_server, tool, args, bearer=bearer, context_handle=_HANDLES[(who, project)], timeout=60
        )
        if "result" in reply:
            validate_output(tool, reply["result"]["structuredContent"])
        return reply

    return call


def structured(reply: dict[str, Any]) -> dict[str, Any]:
    """The ``structuredContent`` of a successful (not ``isError``) reply."""
    assert "result" in reply, reply
    assert reply["result"].get("isError") is not True, reply["result"]["structuredContent"]
    return reply["result"]["structuredContent"]


def business_error(reply: dict[str, Any]) -> str:
    """The stable code of an ``isError`` reply."""
    assert "result" in reply and reply["result"].get("isError") is True, reply
    return reply["result"]["structuredContent"]["code"]


@pytest.fixture
def project(db: None) -> Project:
    return Project.objects.create(slug="import-test", name="Import test")
