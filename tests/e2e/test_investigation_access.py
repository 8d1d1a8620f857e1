"""Investigations belong to their principal, end to end (issue 17): a real server on the demo, the
binding API over HTTP with dev-issuer tokens. ``bob`` (only ``webgis.view`` on the demo, signing in
through the same host client as everyone) could bind a reader on svc-worker's investigation and read its
SCADA evidence; now any task bind of his is refused exactly as a task that does not exist, while the
run's owner binds as before. Also the binding API's limits (issue 17 item 11): the live-context cap and
the per-principal rate, each refused with a stable code."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer
from contexts.models import ContextEvent, Principal, Project, Task
from queries.demo.seed import DEMO_EXECUTION_REQUEST_ID, DEMO_SESSION_ID, DEMO_SLUG
from tests.contexts import factories
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def token(subject: str) -> str:
    with override_settings(DEBUG=True):
        return dev_issuer.mint_token(
            subject=subject, client_id=factories.HOST_CLIENT, scopes=["mcp.context.bind", "mcp.query"], ttl_s=600
        )


def bind(server: ServerProcess, subject: str, **body: Any) -> httpx2.Response:
    return httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        json={"project": DEMO_SLUG, **body},
        headers={"Authorization": f"Bearer {token(subject)}"},
        timeout=10,
    )


@pytest.fixture(scope="module")
def server(demo_loaded: None, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(TJWATER_CONTEXT_MAX_LIVE="3", TJWATER_BIND_RATE_PER_S="1", TJWATER_BIND_BURST="4")


@pytest.fixture(scope="module")
def demo_task(demo_loaded: None, django_db_blocker: Any) -> Task:
    with django_db_blocker.unblock():
        return Task.objects.get(project__slug=DEMO_SLUG)


def reader_body(task_id: int) -> dict[str, Any]:
    return {
        "purpose": "task_reader",
        "session_id": f"reader-{uuid.uuid4().hex[:8]}",
        "task_id": task_id,
        "parent_session_id": DEMO_SESSION_ID,
    }


def execution_body(task: Task) -> dict[str, Any]:
    run = task.runs.get(superseded_at__isnull=True)
    return {
        "purpose": "task_execution",
        "session_id": DEMO_SESSION_ID,
        "task_id": task.pk,
        "run_id": run.pk,
        "execution_request_id": DEMO_EXECUTION_REQUEST_ID,
    }


def test_only_the_runs_owner_binds_its_investigation(server: ServerProcess, demo_task: Task, db: None) -> None:
    nowhere = 2**31 - 1
    for body in (reader_body(demo_task.pk), execution_body(demo_task)):
        refused = bind(server, "bob", **body)
        missing = bind(server, "bob", **{**body, "task_id": nowhere})
        assert refused.status_code == missing.status_code == 404
        assert (
            refused.json()
            == missing.json()
            == {
                "code": "NOT_FOUND",
                "message": "No such task in this project.",
                "retryable": False,
            }
        )
    # alice holds every permission on the demo, but the investigation is svc-worker's.
    assert bind(server, "alice", **reader_body(demo_task.pk)).status_code == 404
    owner = bind(server, "svc-worker", **reader_body(demo_task.pk))
    assert owner.status_code == 201, owner.text
    assert "get_task_evidence" in owner.json()["tools"]


def _newcomer(subject: str) -> Principal:
    who = factories.principal(subject)
    factories.membership(who, Project.objects.get(slug=DEMO_SLUG), ["webgis.view"])
    return who


def _forget(who: Principal) -> None:
    ContextEvent.objects.filter(principal_id=who.pk).delete()
    Principal.objects.filter(pk=who.pk).delete()


@pytest.fixture
def newcomer(db: None) -> Iterator[str]:
    """A principal of its own (its own rate bucket and context count) with a membership on the demo,
    committed so the server sees it."""
    subject = f"limits-{uuid.uuid4().hex[:8]}"
    who = factories.committed(_newcomer, subject)
    yield subject
    factories.committed(_forget, who)


def test_live_contexts_are_capped_per_principal_and_project(server: ServerProcess, newcomer: str) -> None:
    chat = {"purpose": "ordinary_chat", "session_id": "s"}
    handles = [bind(server, newcomer, **chat).json()["context_handle"] for _ in range(3)]
    refused = bind(server, newcomer, **chat)
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "CONTEXT_LIMIT_REACHED" and body["retryable"] is False
    assert body["details"] == {"live_contexts": 3, "max_live_contexts": 3}
    # The oldest was not revoked to make room; deleting one makes room for one.
    deleted = httpx2.delete(
        f"{server.url}/api/v1/mcp-query-contexts/{handles[0]}",
        headers={"Authorization": f"Bearer {token(newcomer)}"},
        timeout=10,
    )
    assert deleted.status_code == 204
    time.sleep(1.2)  # the burst of 4 is spent (each bind counts, refused by the cap or not): one more token
    assert bind(server, newcomer, **chat).status_code == 201


def test_binds_are_rate_limited_per_principal(server: ServerProcess, newcomer: str) -> None:
    """A burst of 4, then 1 per second: the fifth bind in a row is RATE_LIMITED with Retry-After (the
    cap of 3 live contexts is kept out of the way by deleting each context right away)."""
    answers = []
    for _ in range(5):
        response = bind(server, newcomer, purpose="ordinary_chat", session_id="s")
        answers.append(response)
        if response.status_code == 201:
            httpx2.delete(
                f"{server.url}/api/v1/mcp-query-contexts/{response.json()['context_handle']}",
                headers={"Authorization": f"Bearer {token(newcomer)}"},
                timeout=10,
            )
    assert [a.status_code for a in answers[:4]] == [201] * 4
    limited = answers[4]
    assert limited.status_code == 429
    assert limited.json()["code"] == "RATE_LIMITED" and limited.json()["retryable"] is True
    assert int(limited.headers["Retry-After"]) >= 1
    # Another principal is not affected.
    assert bind(server, "alice", purpose="ordinary_chat", session_id="s").status_code == 201
