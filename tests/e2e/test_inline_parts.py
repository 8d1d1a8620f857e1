"""``part`` in an investigation (issue 23 item 9), end to end: a task context saves the whole result as
evidence and pages it with ``get_task_evidence``, so a ``part`` argument there is refused with a clear
error naming the field — before any query runs or any evidence is saved — while an ordinary chat reads
the same part."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer
from contexts.models import Task
from evidence.models import EvidenceSnapshot
from queries.demo.seed import DEMO_SESSION_ID, DEMO_SLUG
from tests.contexts import factories
from tests.support.net1 import call_tool_raw
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

PART_ARGS = {
    "element_type": "pipe",
    "element_id": "LINK-1523",
    "part": {"data_path": ["data", "properties"], "offset": 0, "limit": 2},
}


def token(subject: str) -> str:
    with override_settings(DEBUG=True):
        return dev_issuer.mint_token(
            subject=subject, client_id=factories.HOST_CLIENT, scopes=["mcp.context.bind", "mcp.query"], ttl_s=600
        )


@pytest.fixture(scope="module")
def server(demo_loaded: None, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server()


def bind(server: ServerProcess, subject: str, body: dict[str, Any]) -> str:
    response = httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        json={"project": DEMO_SLUG, **body},
        headers={"Authorization": f"Bearer {token(subject)}"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["context_handle"]


def test_part_is_refused_in_a_task_context_and_read_in_ordinary_chat(server: ServerProcess) -> None:
    task = Task.objects.get(project__slug=DEMO_SLUG)
    reader = bind(
        server,
        "svc-worker",
        {
            "purpose": "task_reader",
            "session_id": f"reader-{uuid.uuid4().hex[:8]}",
            "task_id": task.pk,
            "parent_session_id": DEMO_SESSION_ID,
        },
    )
    saved_before = EvidenceSnapshot.objects.filter(task=task).count()
    reply = call_tool_raw(
        server, "get_element_gis_properties", PART_ARGS, bearer=token("svc-worker"), context_handle=reader
    )
    body = reply["result"]["structuredContent"]
    assert reply["result"]["isError"] is True and body["code"] == "INVALID_PARAMETER"
    assert body["message"].startswith("part:") and "get_task_evidence" in body["message"]
    assert EvidenceSnapshot.objects.filter(task=task).count() == saved_before
    chat = bind(server, "alice", {"purpose": "ordinary_chat", "session_id": f"chat-{uuid.uuid4().hex[:8]}"})
    read = call_tool_raw(server, "get_element_gis_properties", PART_ARGS, bearer=token("alice"), context_handle=chat)
    out = read["result"]["structuredContent"]
    assert read["result"]["isError"] is False and out["part"]["offset"] == 0 and out["part"]["limit"] == 2
    assert len(out["data"]["properties"]) == 2 and out["truncated"] is True
