"""The isolation matrix end to end (issue 5): real uvicorn processes, real HTTP, dev-issuer tokens, the
official SDK client. Contexts are created through the REST API and used on ``/mcp``; every refusal is
a business ``isError`` with a stable code, and a handle replayed by anyone else gets exactly the answer
an unknown handle gets.

Two projects hold a junction with the same id ``J1`` and different elevations, so any crossing of
project data would show in the numbers. Rows are committed (the servers are other processes): the
world once per module, and each mutation during a test (supersede, lease move, expiry, membership
removal, admin revoke) in a separate thread with its own autocommit connection — the test's own
transaction would hide them from the servers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.gis.geos import Point
from django.test import Client as DjangoClient
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from contexts import dev_issuer
from contexts.models import ContextEvent, Membership, Principal, Project, QueryContext, TaskRun
from contexts.selectors import hash_handle
from queries.models.network import Junction
from tests.contexts import factories
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

OTHER_CLIENT = "tjwater-web-iso"
ELEVATION = {"iso-alpha": 11.0, "iso-beta": 22.0}
OPERATOR = "iso-operator"


@dataclass
class IsoWorld:
    alpha: Project
    beta: Project
    alice: Principal
    bob: Principal
    carol: Principal
    dave: Principal


@pytest.fixture(scope="module")
def iso(django_db_setup: None, django_db_blocker: Any) -> Iterator[IsoWorld]:
    with django_db_blocker.unblock():
        alpha, beta = factories.project("iso-alpha"), factories.project("iso-beta")
        for project in (alpha, beta):
            Junction.objects.create(
                project=project, element_id="J1", elevation=ELEVATION[project.slug], geom=Point(117.2, 39.1, srid=4326)
            )
        world = IsoWorld(
            alpha=alpha,
            beta=beta,
            alice=factories.principal("iso-alice"),
            bob=factories.principal("iso-bob"),
            carol=factories.principal("iso-carol"),
            dave=factories.principal("iso-dave"),
        )
        factories.membership(world.alice, alpha)
        factories.membership(world.alice, beta, ["webgis.view"])
        factories.membership(world.bob, beta)
        factories.membership(world.dave, alpha)
    yield world
    with django_db_blocker.unblock():
        ContextEvent.objects.filter(project_id__in=[alpha.pk, beta.pk]).delete()
        Project.objects.filter(pk__in=[alpha.pk, beta.pk]).delete()
        Principal.objects.filter(subject__in=["iso-alice", "iso-bob", "iso-carol", "iso-dave"]).delete()
        get_user_model().objects.filter(username=OPERATOR).delete()


@pytest.fixture(scope="module")
def servers(start_server: Callable[..., ServerProcess], iso: IsoWorld) -> tuple[ServerProcess, ServerProcess]:
    """Two server processes on the same database: a revocation must stop both."""
    # The in-flight limit (R-PAGE-7, tested elsewhere) is raised so interleaved calls are not refused.
    env = {
        "TJWATER_MCP_ALLOWED_CLIENTS": f"tjwater-agent-mcp,{OTHER_CLIENT}",
        "TJWATER_MCP_MAX_CONCURRENT": "64",
    }
    return start_server(**env), start_server(**env)


def token(who: Principal, *, client_id: str = factories.HOST_CLIENT) -> str:
    with override_settings(DEBUG=True):  # pytest-django runs tests with DEBUG=False; the dev issuer needs it
        return dev_issuer.mint_token(
            subject=who.subject,
            client_id=client_id,
            scopes=["mcp.context.bind", "mcp.query", "mcp.catalog.read"],
            ttl_s=600,
        )


def bind(server: ServerProcess, who: Principal, project: Project | None, **body: Any) -> httpx2.Response:
    payload = {"session_id": "iso-chat", "purpose": "ordinary_chat", **body}
    if project is not None:
        payload["project"] = project.slug
    return httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        json=payload,
        headers={"Authorization": f"Bearer {token(who)}"},
        timeout=10,
    )


def handle_for(server: ServerProcess, who: Principal, project: Project, **body: Any) -> str:
    response = bind(server, who, project, **body)
    assert response.status_code == 201, response.text
    return str(response.json()["context_handle"])


async def _call(server: ServerProcess, bearer: str, handle: str, element_id: str = "J1") -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30)
    async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode="2026-07-28") as client:
        # Every call carries an application request key, as hosts send it: task-purpose calls need one
        # for their evidence receipt (R-EVID-2); ordinary_chat ignores it.
        return await client.call_tool(
            "get_element_properties",
            {"context_handle": handle, "element_type": "junction", "element_id": element_id},
            meta={"cn.tjwater/requestKey": uuid.uuid4().hex},
        )


def call(server: ServerProcess, who: Principal, handle: str, *, client_id: str = factories.HOST_CLIENT) -> Any:
    bearer = token(who, client_id=client_id)
    return anyio.run(_call, server, bearer, handle)


def elevation(result: Any) -> float:
    assert result.is_error is False, result.structured_content
    return float(result.structured_content["data"]["properties"]["elevation"])


def refusal(result: Any) -> dict[str, Any]:
    assert result.is_error is True
    assert result.result_type == "complete"
    return dict(result.structured_content)


def leased(project: Project, session_id: str, owner: Principal) -> factories.LeasedRun:
    return factories.committed(factories.leased_run, project, owner=owner, session_id=session_id, lease_s=3600)


def exec_body(run: factories.LeasedRun) -> dict[str, Any]:
    return {
        "purpose": "task_execution",
        "session_id": run.session_id,
        "task_id": run.task.pk,
        "run_id": run.run.pk,
        "execution_request_id": run.execution_request.request_id,
    }


# --- each principal sees its own project, concurrently too ---------------------------------------------


def test_alice_and_bob_see_only_their_own_projects_data(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    assert elevation(call(server, iso.alice, handle_for(server, iso.alice, iso.alpha))) == 11.0
    assert elevation(call(server, iso.bob, handle_for(server, iso.bob, iso.beta))) == 22.0
    assert elevation(call(server, iso.alice, handle_for(server, iso.alice, iso.beta))) == 22.0


def test_interleaved_concurrent_calls_never_return_the_others_data(
    servers: tuple[ServerProcess, ...], iso: IsoWorld
) -> None:
    server = servers[0]
    callers = [
        (iso.alice, token(iso.alice), handle_for(server, iso.alice, iso.alpha), 11.0),
        (iso.bob, token(iso.bob), handle_for(server, iso.bob, iso.beta), 22.0),
    ]
    seen: list[tuple[str, float, str]] = []

    async def one(who: Principal, bearer: str, handle: str) -> None:
        result = await _call(server, bearer, handle)
        seen.append((who.subject, elevation(result), result.structured_content["source_ref"]))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(8):
                for who, bearer, handle, _expected in callers:
                    group.start_soon(one, who, bearer, handle)

    anyio.run(main)
    assert len(seen) == 16
    expected = {
        who.subject: (value, slug) for (who, _, _, value), slug in zip(callers, ["iso-alpha", "iso-beta"], strict=True)
    }
    for subject, value, source_ref in seen:
        assert value == expected[subject][0]
        assert source_ref.startswith(f"project:{expected[subject][1]}/")


# --- replay ------------------------------------------------------------------------------------------


def test_a_handle_replayed_by_anyone_else_gets_the_unknown_handle_answer(
    servers: tuple[ServerProcess, ...], iso: IsoWorld
) -> None:
    server = servers[0]
    handle = handle_for(server, iso.alice, iso.alpha)
    unknown = refusal(call(server, iso.alice, "u" * 43))
    assert unknown["code"] == "CONTEXT_INVALID"
    assert refusal(call(server, iso.bob, handle)) == unknown  # another user (a member of another project)
    assert refusal(call(server, iso.carol, handle)) == unknown  # a user with no membership at all
    assert refusal(call(server, iso.dave, handle)) == unknown  # another member of the same project
    assert refusal(call(server, iso.alice, handle, client_id=OTHER_CLIENT)) == unknown  # another client
    assert elevation(call(server, iso.alice, handle)) == 11.0  # and it still works for alice


def test_personal_sessions_and_carol_get_no_context(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    personal = bind(server, iso.alice, None)
    assert personal.status_code == 400
    assert personal.json()["code"] == "PROJECT_CONTEXT_REQUIRED"
    for project in (iso.alpha, iso.beta):
        refused = bind(server, iso.carol, project)
        assert refused.status_code == 404
        assert refused.json()["code"] == "NOT_FOUND"


# --- revocation, expiry, membership ------------------------------------------------------------------


def test_delete_revokes_in_every_server_process(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    first, second = servers
    handle = handle_for(first, iso.alice, iso.alpha)
    assert elevation(call(second, iso.alice, handle)) == 11.0
    response = httpx2.delete(
        f"{first.url}/api/v1/mcp-query-contexts/{handle}",
        headers={"Authorization": f"Bearer {token(iso.alice)}"},
        timeout=10,
    )
    assert response.status_code == 204
    for server in servers:
        assert refusal(call(server, iso.alice, handle))["code"] == "CONTEXT_REVOKED"


def _admin_revoke(context_id: int, reason: str) -> int:
    operator, _ = get_user_model().objects.get_or_create(username=OPERATOR, defaults={"is_staff": True})
    client = DjangoClient()
    client.force_login(operator)
    changelist = reverse("admin:contexts_querycontext_changelist")
    form = {"action": "revoke_contexts", "_selected_action": [context_id], "confirm": "yes", "reason": reason}
    return client.post(changelist, form).status_code


def test_admin_revoke_stops_the_next_call_in_every_server_process(
    servers: tuple[ServerProcess, ...], iso: IsoWorld
) -> None:
    handle = handle_for(servers[0], iso.alice, iso.alpha)
    for server in servers:
        assert elevation(call(server, iso.alice, handle)) == 11.0
    context_id = QueryContext.objects.filter(handle_hash=hash_handle(handle)).values_list("pk", flat=True).first()
    assert context_id is not None

    assert factories.committed(_admin_revoke, context_id, "suspected leak") == 302

    row = QueryContext.objects.get(pk=context_id)
    assert (row.revoke_reason, row.revoked_by.split("#")[0]) == ("suspected leak", f"operator:{OPERATOR}")
    for server in servers:
        assert refusal(call(server, iso.alice, handle))["code"] == "CONTEXT_REVOKED"


def test_an_expired_handle_is_refused(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    handle = handle_for(server, iso.alice, iso.alpha)
    context_id = QueryContext.objects.filter(handle_hash=hash_handle(handle)).values_list("pk", flat=True).first()
    factories.committed(lambda: QueryContext.objects.filter(pk=context_id).update(expires_at=timezone.now()))
    assert refusal(call(server, iso.alice, handle))["code"] == "CONTEXT_EXPIRED"


def test_membership_removal_stops_the_next_call(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    handle = handle_for(server, iso.dave, iso.alpha)
    assert elevation(call(server, iso.dave, handle)) == 11.0
    factories.committed(
        lambda: Membership.objects.filter(principal=iso.dave, project=iso.alpha).update(revoked_at=timezone.now())
    )
    try:
        assert refusal(call(server, iso.dave, handle))["code"] == "PERMISSION_DENIED"
    finally:
        factories.committed(
            lambda: Membership.objects.filter(principal=iso.dave, project=iso.alpha).update(revoked_at=None)
        )


# --- task purposes -----------------------------------------------------------------------------------


def test_task_execution_stops_when_the_run_is_superseded(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    run = leased(iso.alpha, "iso-exec-superseded", iso.alice)
    handle = handle_for(server, iso.alice, iso.alpha, **exec_body(run))
    assert elevation(call(server, iso.alice, handle)) == 11.0
    factories.committed(factories.supersede, run.run, session_id=run.session_id)  # even to the same session
    assert refusal(call(server, iso.alice, handle))["code"] == "RUN_NOT_CURRENT"


def test_task_execution_stops_when_the_lease_moves_or_lapses(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    moved = leased(iso.alpha, "iso-exec-moved", iso.alice)
    lapsed = leased(iso.alpha, "iso-exec-lapsed", iso.alice)
    moved_handle = handle_for(server, iso.alice, iso.alpha, **exec_body(moved))
    lapsed_handle = handle_for(server, iso.alice, iso.alpha, **exec_body(lapsed))
    factories.committed(lambda: TaskRun.objects.filter(pk=moved.run.pk).update(lease_holder="another-session"))
    factories.committed(
        lambda: TaskRun.objects.filter(pk=lapsed.run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    )
    assert refusal(call(server, iso.alice, moved_handle))["code"] == "RUN_NOT_CURRENT"
    assert refusal(call(server, iso.alice, lapsed_handle))["code"] == "RUN_NOT_CURRENT"


def test_task_reader_follows_the_parent_sessions_lease(servers: tuple[ServerProcess, ...], iso: IsoWorld) -> None:
    server = servers[0]
    parent = leased(iso.beta, "iso-parent", iso.bob)
    body = {"purpose": "task_reader", "session_id": "iso-reader", "task_id": parent.task.pk}
    handle = handle_for(server, iso.bob, iso.beta, **body, parent_session_id=parent.session_id)
    assert elevation(call(server, iso.bob, handle)) == 22.0
    factories.committed(lambda: TaskRun.objects.filter(pk=parent.run.pk).update(lease_holder="someone-else"))
    assert refusal(call(server, iso.bob, handle))["code"] == "RUN_NOT_CURRENT"


def test_a_task_handle_cannot_be_moved_to_another_project_task_or_run(
    servers: tuple[ServerProcess, ...], iso: IsoWorld
) -> None:
    server = servers[0]
    alpha_run = leased(iso.alpha, "iso-exec-alpha", iso.alice)
    beta_run = leased(iso.beta, "iso-exec-beta", iso.bob)
    # Binding beta's task under alpha, or alpha's run under alpha's other task, is "not found".
    assert bind(server, iso.alice, iso.alpha, **exec_body(beta_run)).json()["code"] == "NOT_FOUND"
    other = leased(iso.alpha, "iso-exec-other", iso.alice)
    mixed = {**exec_body(alpha_run), "run_id": other.run.pk}
    assert bind(server, iso.alice, iso.alpha, **mixed).json()["code"] == "NOT_FOUND"
    # And a bound task handle always answers from its own project, whatever else exists.
    handle = handle_for(server, iso.alice, iso.alpha, **exec_body(alpha_run))
    assert elevation(call(server, iso.alice, handle)) == 11.0


def test_a_task_call_without_a_request_key_is_refused_naming_the_key(
    servers: tuple[ServerProcess, ...], iso: IsoWorld
) -> None:
    """R-EVID-2: task-purpose calls need the host's application request key; without it the call is a
    -32602 naming ``_meta["cn.tjwater/requestKey"]`` and nothing runs."""
    server = servers[0]
    run = leased(iso.alpha, "iso-exec-no-key", iso.alice)
    handle = handle_for(server, iso.alice, iso.alpha, **exec_body(run))
    reply = httpx2.post(
        f"{server.url}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "get_element_properties",
                "arguments": {"context_handle": handle, "element_type": "junction", "element_id": "J1"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        },
        headers={
            "authorization": f"Bearer {token(iso.alice)}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "get_element_properties",
        },
        timeout=30,
    )
    events = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
    error = json.loads(events[-1] if events else reply.text)["error"]
    assert error["code"] == -32602
    assert error["data"] == {"code": "REQUEST_KEY_REQUIRED", "meta_key": "cn.tjwater/requestKey"}
