"""Fixtures for the queries tests: the demo utility (tests/support/demo.py), one real uvicorn server,
committed context handles of the demo principals, and a helper that calls a tool over real HTTP and
validates the result against the tool's ``outputSchema``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from contexts.grants import tool_catalog
from contexts.models import ContextEvent, Project, QueryContext
from contexts.services import context_create
from tests.support.demo import BINDINGS, CLIENT, DEMO, validate_output
from tests.support.mcp_http import call_tool
from tests.support.servers import ServerProcess
from tests.support.tokens import dev_token, verified_token


@pytest.fixture(scope="session")
def demo_handles(demo_loaded: None, django_db_blocker: Any) -> Iterator[dict[tuple[str, str], str]]:
    """One committed ordinary_chat context per binding in ``BINDINGS`` (as the REST API creates them)."""
    created: list[int] = []
    handles: dict[tuple[str, str], str] = {}
    with django_db_blocker.unblock(), override_settings(TJWATER_CONTEXT_TTL_S=6 * 3600):
        catalog, task_scoped = tool_catalog()
        for subject, project in BINDINGS:
            made = context_create(
                token=verified_token(subject, client=CLIENT, issuer=settings.TJWATER_OIDC_ISSUER),
                project_slug=project,
                session_id=f"queries-tests-{subject}-{project}",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            )
            handles[(subject, project)] = made.handle
            created.append(made.context_id)
    yield handles
    with django_db_blocker.unblock():
        ContextEvent.objects.filter(context_id__in=created).delete()
        QueryContext.objects.filter(pk__in=created).delete()


@pytest.fixture(scope="session")
def demo_server(start_server: Callable[..., ServerProcess], demo_handles: dict[tuple[str, str], str]) -> ServerProcess:
    return start_server(REDIS_URL=settings.REDIS_URL)


@pytest.fixture
def demo_call(demo_server: ServerProcess, demo_handles: dict[tuple[str, str], str]) -> Callable[..., dict[str, Any]]:
    """``demo_call(tool, args, who="alice", project="tianjin-demo")`` → the JSON-RPC reply (``result`` or
    ``error``) of a real ``tools/call``; a ``result`` is validated against the tool's outputSchema."""

    def call(tool: str, args: dict[str, Any], who: str = "alice", project: str = DEMO) -> dict[str, Any]:
        bearer = dev_token(who, client=CLIENT, scopes=["mcp.query"], ttl_s=600)
        reply = call_tool(
            demo_server.url, tool, args, bearer=bearer, context_handle=demo_handles[(who, project)], timeout=60
        )
        if "result" in reply:
            validate_output(tool, reply["result"]["structuredContent"])
        return reply

    return call


@pytest.fixture
def project(db: None) -> Project:
    return Project.objects.create(slug="import-test", name="Import test")
