"""The context REST API end to end: a real uvicorn process, real HTTP, tokens from the dev issuer.

The rows live in the committed test database (the server is another process), created once for the
module and deleted afterwards. Refusals of handles are checked against ``resolve_context`` in this
process — a second process reading the same database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx2
import pytest
from django.test import override_settings

from contexts import dev_issuer, grants, selectors
from contexts.errors import ContextInvalid, ContextRevoked
from contexts.models import ContextEvent, Principal, Project, QueryContext, TaskReport
from tests.contexts import factories
from tests.support.servers import ServerProcess, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

BIND = ["mcp.context.bind", "mcp.query"]
OTHER_CLIENT = "tjwater-web-e2e"


@dataclass
class E2EWorld:
    alpha: Project
    beta: Project
    alice: Principal
    bob: Principal
    carol: Principal
    run_alpha: factories.LeasedRun


@pytest.fixture(scope="module")
def e2e(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[E2EWorld]:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        alpha, beta = factories.project("e2e-ctx-alpha"), factories.project("e2e-ctx-beta")
        alice, bob = factories.principal("e2e-ctx-alice"), factories.principal("e2e-ctx-bob")
        carol = factories.principal("e2e-ctx-carol")
        factories.membership(alice, alpha)
        factories.membership(bob, beta)
        world = E2EWorld(
            alpha=alpha,
            beta=beta,
            alice=alice,
            bob=bob,
            carol=carol,
            run_alpha=factories.leased_run(alpha, owner=alice, session_id="e2e-ctx-exec-session", lease_s=3600),
        )
        for revision in (1, 2):
            TaskReport.objects.create(task=world.run_alpha.task, revision=revision, sections={})
    yield world
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        ContextEvent.objects.filter(project_id__in=[alpha.pk, beta.pk]).delete()
        Project.objects.filter(pk__in=[alpha.pk, beta.pk]).delete()
        Principal.objects.filter(pk__in=[alice.pk, bob.pk, carol.pk]).delete()


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    # A second allowed client, to show that only the host client may create task contexts.
    return start_server(TJWATER_MCP_ALLOWED_CLIENTS=f"tjwater-agent-mcp,{OTHER_CLIENT}")


def bearer(who: Principal, *, scopes: list[str] = BIND, client_id: str = factories.HOST_CLIENT) -> dict[str, str]:
    # pytest-django runs tests with DEBUG=False; the dev issuer (like the server process) needs DEBUG on.
    with override_settings(DEBUG=True):
        token = dev_issuer.mint_token(subject=who.subject, client_id=client_id, scopes=scopes, ttl_s=600)
    return {"Authorization": f"Bearer {token}"}


def post(server: ServerProcess, headers: dict[str, str], body: object) -> httpx2.Response:
    return httpx2.post(f"{server.url}/api/v1/mcp-query-contexts", json=body, headers=headers, timeout=10)


def delete(server: ServerProcess, headers: dict[str, str], handle: str) -> httpx2.Response:
    return httpx2.delete(f"{server.url}/api/v1/mcp-query-contexts/{handle}", headers=headers, timeout=10)


def chat(world: E2EWorld, project: str | None = None) -> dict[str, object]:
    return {"project": project or world.alpha.slug, "session_id": "e2e-chat", "purpose": "ordinary_chat"}


def test_create_ordinary_chat_returns_the_handle_once(server: ServerProcess, e2e: E2EWorld) -> None:
    response = post(server, bearer(e2e.alice), chat(e2e))
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"context_handle", "expires_at", "purpose", "project", "tools", "report_revision"}
    assert body["report_revision"] is None
    assert (body["purpose"], body["project"]) == ("ordinary_chat", e2e.alpha.slug)
    assert "get_element_properties" in body["tools"]
    assert body["tools"] == sorted(body["tools"])
    assert response.headers["cache-control"] == "no-store"
    handle = body["context_handle"]
    scope = selectors.resolve_context(
        handle=handle, token=factories.token(e2e.alice), tool_name="get_element_properties", required_permissions=[]
    )
    assert scope.project_id == e2e.alpha.pk
    assert not QueryContext.objects.filter(handle_hash=handle).exists()
    assert handle not in server.log()


def test_missing_and_invalid_tokens_get_bearer_challenges(server: ServerProcess, e2e: E2EWorld) -> None:
    missing = post(server, {}, chat(e2e))
    assert missing.status_code == 401
    assert missing.json()["code"] == "AUTHENTICATION_REQUIRED"
    challenge = missing.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and "error=" not in challenge and "resource_metadata=" in challenge

    invalid = post(server, {"Authorization": "Bearer not.a.jwt"}, chat(e2e))
    assert invalid.status_code == 401
    assert invalid.json()["code"] == "INVALID_TOKEN"
    assert 'error="invalid_token"' in invalid.headers["www-authenticate"]


def test_a_token_without_the_bind_scope_is_insufficient_scope(server: ServerProcess, e2e: E2EWorld) -> None:
    response = post(server, bearer(e2e.alice, scopes=["mcp.query"]), chat(e2e))
    assert response.status_code == 403
    assert response.json()["code"] == "INSUFFICIENT_SCOPE"
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="mcp.context.bind"' in challenge


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"session_id": "s", "purpose": "ordinary_chat"}, 400, "PROJECT_CONTEXT_REQUIRED"),
        ({"project": None, "session_id": "s", "purpose": "ordinary_chat"}, 400, "PROJECT_CONTEXT_REQUIRED"),
        ({"project": "e2e-ctx-alpha", "session_id": "s", "purpose": "ordinary_chat", "user": "bob"}, 400,
         "INVALID_PARAMETER"),
        ({"project": "e2e-ctx-alpha", "session_id": "s", "purpose": "root"}, 400, "INVALID_PARAMETER"),
        ({"project": "e2e-ctx-alpha", "purpose": "ordinary_chat"}, 400, "INVALID_PARAMETER"),
        ({"project": "e2e-ctx-beta", "session_id": "s", "purpose": "ordinary_chat"}, 404, "NOT_FOUND"),
        ({"project": "no-such-project", "session_id": "s", "purpose": "ordinary_chat"}, 404, "NOT_FOUND"),
    ],
)  # fmt: skip
def test_create_refusals(server: ServerProcess, e2e: E2EWorld, body: dict[str, object], status: int, code: str) -> None:
    response = post(server, bearer(e2e.alice), body)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code


def test_a_body_that_is_not_json_is_refused(server: ServerProcess, e2e: E2EWorld) -> None:
    response = httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        content=b"{not json",
        headers={**bearer(e2e.alice), "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_JSON"


def test_carol_gets_nothing(server: ServerProcess, e2e: E2EWorld) -> None:
    for project in (e2e.alpha.slug, e2e.beta.slug):
        response = post(server, bearer(e2e.carol), chat(e2e, project))
        assert response.status_code == 404
        assert response.json()["code"] == "NOT_FOUND"


def test_task_execution_for_the_host_client_only(server: ServerProcess, e2e: E2EWorld) -> None:
    leased = e2e.run_alpha
    body = {
        "project": e2e.alpha.slug,
        "session_id": leased.session_id,
        "purpose": "task_execution",
        "task_id": leased.task.pk,
        "run_id": leased.run.pk,
        "execution_request_id": leased.execution_request.request_id,
    }
    refused = post(server, bearer(e2e.alice, client_id=OTHER_CLIENT), body)
    assert refused.status_code == 403
    assert refused.json()["code"] == "PERMISSION_DENIED"

    created = post(server, bearer(e2e.alice), body)
    assert created.status_code == 201, created.text
    assert created.json()["purpose"] == "task_execution"
    scope = selectors.resolve_context(
        handle=created.json()["context_handle"], token=factories.token(e2e.alice), tool_name=None,
        required_permissions=[],
    )  # fmt: skip
    assert (scope.task_id, scope.run_id) == (leased.task.pk, leased.run.pk)
    assert created.json()["report_revision"] == 2  # the task's newest, pinned

    moved = post(server, bearer(e2e.alice), {**body, "session_id": "not-the-lease-holder"})
    assert moved.status_code == 409
    assert moved.json()["code"] == "RUN_NOT_CURRENT"


def test_a_task_binding_takes_the_report_revision_to_pin(server: ServerProcess, e2e: E2EWorld) -> None:
    """Issue 23 item 8: ``report_revision`` is pinned when it is a revision of the bound task; otherwise a
    404 (not a revision of this task) or a 400 (not a revision number; ordinary chat) naming the field."""
    leased = e2e.run_alpha
    body = {
        "project": e2e.alpha.slug,
        "session_id": leased.session_id,
        "purpose": "task_execution",
        "task_id": leased.task.pk,
        "run_id": leased.run.pk,
        "execution_request_id": leased.execution_request.request_id,
    }
    pinned = post(server, bearer(e2e.alice), {**body, "report_revision": 1})
    assert pinned.status_code == 201, pinned.text
    assert pinned.json()["report_revision"] == 1
    handle_hash = selectors.hash_handle(pinned.json()["context_handle"])
    assert QueryContext.objects.get(handle_hash=handle_hash).report_revision == 1

    unknown = post(server, bearer(e2e.alice), {**body, "report_revision": 3})
    assert unknown.status_code == 404
    assert unknown.json()["details"] == {"field": "report_revision"}
    for bad in ("first", 0):
        invalid = post(server, bearer(e2e.alice), {**body, "report_revision": bad})
        assert invalid.status_code == 400
        assert list(invalid.json()["details"]) == ["report_revision"]
    refused = post(server, bearer(e2e.alice), {**chat(e2e), "report_revision": 1})
    assert refused.status_code == 400
    assert refused.json()["details"]["unexpected"] == ["report_revision"]


def test_task_reader_tools_are_a_subset_of_the_executors(server: ServerProcess, e2e: E2EWorld) -> None:
    leased = e2e.run_alpha
    reader = post(
        server,
        bearer(e2e.alice),
        {
            "project": e2e.alpha.slug,
            "session_id": "e2e-reader",
            "purpose": "task_reader",
            "task_id": leased.task.pk,
            "parent_session_id": leased.session_id,
        },
    )
    assert reader.status_code == 201, reader.text
    executor_tools = set(post(server, bearer(e2e.alice), chat(e2e)).json()["tools"])
    assert set(reader.json()["tools"]) <= executor_tools | set(grants.tool_catalog()[1])


def test_only_the_owner_deletes_and_everyone_else_gets_the_same_404(server: ServerProcess, e2e: E2EWorld) -> None:
    handle = post(server, bearer(e2e.alice), chat(e2e)).json()["context_handle"]

    by_bob = delete(server, bearer(e2e.bob), handle)
    by_other_client = delete(server, bearer(e2e.alice, client_id=OTHER_CLIENT), handle)
    unknown = delete(server, bearer(e2e.alice), "z" * 43)
    assert by_bob.status_code == by_other_client.status_code == unknown.status_code == 404
    assert by_bob.json() == by_other_client.json() == unknown.json()
    alice = factories.token(e2e.alice)
    selectors.resolve_context(handle=handle, token=alice, tool_name=None, required_permissions=[])

    # Revoking needs no more than a valid token of the owner.
    owner = delete(server, bearer(e2e.alice, scopes=["mcp.query"]), handle)
    assert owner.status_code == 204
    assert delete(server, bearer(e2e.alice), handle).status_code == 204
    with pytest.raises(ContextRevoked):
        selectors.resolve_context(handle=handle, token=alice, tool_name=None, required_permissions=[])
    with pytest.raises(ContextInvalid):
        selectors.resolve_context(
            handle=handle, token=factories.token(e2e.bob), tool_name=None, required_permissions=[]
        )
    assert delete(server, {}, handle).status_code == 401


def test_logs_never_carry_handles_or_tokens(server: ServerProcess, e2e: E2EWorld) -> None:
    headers = bearer(e2e.alice)
    handle = post(server, headers, chat(e2e)).json()["context_handle"]
    delete(server, bearer(e2e.bob), handle)  # a 404 whose path holds the handle
    delete(server, headers, handle)
    log = server.log()
    assert "context created" in log
    assert handle not in log
    assert headers["Authorization"].split()[1] not in log


def test_an_unreachable_issuer_is_a_retryable_503(start_server: Callable[..., ServerProcess], e2e: E2EWorld) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens here: a real connection refusal
    server = start_server(
        TJWATER_DEV_ISSUER="0", TJWATER_OIDC_ISSUER=f"{closed}/realms/t", TJWATER_OIDC_JWKS_URL=f"{closed}/jwks"
    )
    response = post(server, bearer(e2e.alice), chat(e2e))
    assert response.status_code == 503
    assert response.json() == {
        "code": "AUTH_UNAVAILABLE",
        "message": "Authentication is temporarily unavailable; retry shortly.",
        "retryable": True,
    }
    assert response.headers["retry-after"] == "5"
    server.stop()
