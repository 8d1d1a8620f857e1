"""The MCP Tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``) as the second face of an analysis
run (issue 42 item 6, R-RUN-5), with a raw JSON-RPC client against a real uvicorn server and a real Celery
worker: discover advertises the extension; a client that declares it on the request gets a
``CreateTaskResult`` from a ``run_*`` call and follows it with ``tasks/get`` to the inlined
``CallToolResult`` (what ``get_analysis_run`` answers); ``tasks/cancel`` cancels the run; a client that
does not declare it gets the job answer and ``-32021`` on ``tasks/*``; another principal's ``tasks/get``
is "Task not found", like an unknown id; an investigation (``task_execution``) never gets a task; the
``Mcp-Name`` header must name the task."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx2
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from jsonschema import Draft202012Validator

from contexts.grants import tool_catalog
from contexts.models import ExecutionRequest, Membership, Principal, Project, ProjectCompute, Task, TaskRun
from contexts.services import context_create
from mcp_app.models import McpTask
from mcp_app.task_records import task_key
from queries.importer.epanet import import_network
from tests.analyses.conftest import NET3, RUNNER, enable, import_valves, running_worker, valve_rows
from tests.support import tokens
from tests.support.mcp_http import call_tool, parse_rpc_response, rpc_body, rpc_headers
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e
SLUG = "mcp-tasks"
CLIENT = "tjwater-agent-mcp"
RUN_SCOPES = "mcp.query mcp.analysis.run"
TASKS = "io.modelcontextprotocol/tasks"
DECLARES = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}
HANDLE_KEY = "cn.tjwater/contextHandle"
BURST = {"pipe_id": "123", "start": "2026-04-01T07:00:00Z", "duration_minutes": 120, "leak_flow": 0.01}
#: Principals of this module: each test submits as its own (two active runs per principal at most).
PEOPLE = ("alice", "bob", "carol", "dave", "erin")
NOT_FOUND = {"code": -32602, "message": "Failed to retrieve task: Task not found"}


def subject(name: str) -> str:
    return f"mcptasks-{name}"


def bearer(name: str, scopes: str = RUN_SCOPES) -> str:
    return tokens.dev_token(subject(name), client=CLIENT, scopes=scopes.split(), ttl_s=600)


def rpc(
    server: ServerProcess,
    token: str,
    method: str,
    params: dict[str, Any],
    *,
    meta: dict[str, Any] | None = None,
    name: str | None = None,
) -> httpx2.Response:
    """One raw JSON-RPC POST (``name``: the ``Mcp-Name`` header)."""
    return httpx2.post(
        f"{server.url}/mcp",
        headers=rpc_headers(method, token, name),
        json=rpc_body(method, params, 7, meta),
        timeout=30,
    )


def run_burst(server: ServerProcess, who: str, handle: str, *, declare: bool) -> dict[str, Any]:
    params = {"name": "run_burst_analysis", "arguments": {"context_handle": handle, **BURST}}
    response = rpc(server, bearer(who), "tools/call", params, meta=DECLARES if declare else None, name=params["name"])
    assert response.status_code == 200, response.text
    return parse_rpc_response(response)["result"]  # type: ignore[no-any-return]


def task_request(
    server: ServerProcess,
    who: str,
    method: str,
    task_id: str,
    handle: str | None,
    *,
    declare: bool = True,
    name: str | None = None,
    scopes: str = RUN_SCOPES,
) -> tuple[int, dict[str, Any]]:
    meta = {**(DECLARES if declare else {}), **({HANDLE_KEY: handle} if handle else {})}
    response = rpc(server, bearer(who, scopes), method, {"taskId": task_id}, meta=meta, name=name or task_id)
    return response.status_code, response.json() if response.content else {}


@pytest.fixture(scope="module")
def world(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with django_db_blocker.unblock(), override_settings(TJWATER_MCP_ANALYSIS_TOOLS=True):
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="MCP tasks")
        import_network(project=project, inp_path=NET3, center=(-85.5, 38.0), scale=30.0, baseline_hours=0)
        import_valves(project, tmp_path_factory.mktemp("valves"), valve_rows())
        enable(project, concurrent=10)
        ProjectCompute.objects.filter(project=project).update(retention_days=12)  # a task lives as long as its run
        catalog, task_scoped = tool_catalog()
        handles: dict[str, str] = {}
        for name in PEOPLE:
            principal, _ = Principal.objects.get_or_create(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=subject(name))
            Membership.objects.update_or_create(principal=principal, project=project, defaults={"permissions": RUNNER})
            token = tokens.verified_token(
                subject(name), client=CLIENT, scopes=RUN_SCOPES.split(), issuer=settings.TJWATER_DEV_ISSUER_ID
            )
            handles[name] = context_create(
                token=token,
                project_slug=SLUG,
                session_id=f"tasks-{name}",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            ).handle
        # alice's second context of the project (a run outlives a 10-minute context: any live one follows it).
        alice_token = tokens.verified_token(
            subject("alice"), client=CLIENT, scopes=RUN_SCOPES.split(), issuer=settings.TJWATER_DEV_ISSUER_ID
        )
        handles["alice-2"] = context_create(
            token=alice_token,
            project_slug=SLUG,
            session_id="tasks-alice-2",
            purpose="ordinary_chat",
            catalog=catalog,
            task_scoped=task_scoped,
        ).handle
        # erin also runs an investigation whose execution request approved simulation.run.
        erin = Principal.objects.get(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=subject("erin"))
        task = Task.objects.create(project=project, title="tasks investigation", status=Task.Status.IN_PROGRESS)
        session = f"tasks-investigation-{uuid.uuid4().hex[:8]}"
        run = TaskRun.objects.create(
            task=task,
            sequence=1,
            owner=erin,
            lease_holder=session,
            lease_expires_at=timezone.now() + timedelta(hours=2),
        )
        request = ExecutionRequest.objects.create(
            run=run, request_id=f"tasks-exec-{uuid.uuid4().hex[:8]}", approved_permissions=["simulation.run"]
        )
        handles["erin-investigation"] = context_create(
            token=tokens.verified_token(
                subject("erin"), client=CLIENT, scopes=RUN_SCOPES.split(), issuer=settings.TJWATER_DEV_ISSUER_ID
            ),
            project_slug=SLUG,
            session_id=session,
            purpose="task_execution",
            task_id=task.pk,
            run_id=run.pk,
            execution_request_id=request.request_id,
            catalog=catalog,
            task_scoped=task_scoped,
        ).handle
    yield {"project": project, "handles": handles}
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        Principal.objects.filter(subject__startswith="mcptasks-").delete()


@pytest.fixture(scope="module")
def server(world: dict[str, Any], start_server: Any) -> ServerProcess:
    return start_server(TJWATER_MCP_ANALYSIS_TOOLS="1", TJWATER_MCP_ALLOWED_CLIENTS=CLIENT)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def worker(world: dict[str, Any], django_db_blocker: Any) -> Iterator[None]:
    """A real worker of both queues, in this process (``tests.analyses.conftest.running_worker``)."""
    yield from running_worker(django_db_blocker)


def assert_created_task(result: dict[str, Any]) -> str:
    assert result["resultType"] == "task" and result["status"] == "working", result
    assert "content" not in result and "result" not in result and "structuredContent" not in result
    assert result["ttlMs"] == 12 * 24 * 3600 * 1000 and 250 <= result["pollIntervalMs"] <= 5000
    assert result["createdAt"].endswith("Z") and result["lastUpdatedAt"].endswith("Z") and result["statusMessage"]
    task_id = result["taskId"]
    assert isinstance(task_id, str) and len(task_id) >= 43  # 256 random bits, URL-safe
    return task_id  # type: ignore[no-any-return]


def test_discover_advertises_the_tasks_extension(server: ServerProcess) -> None:
    response = rpc(server, bearer("alice", "mcp.catalog.read"), "server/discover", {})
    capabilities = parse_rpc_response(response)["result"]["capabilities"]
    assert capabilities["extensions"] == {
        "io.modelcontextprotocol/oauth-client-credentials": {},
        TASKS: {},
    }
    assert set(capabilities) == {"tools", "resources", "extensions"}


def test_a_client_that_does_not_declare_the_extension_gets_the_job_answer(
    server: ServerProcess, world: dict[str, Any]
) -> None:
    handle = world["handles"]["dave"]
    result = run_burst(server, "dave", handle, declare=False)
    assert result["resultType"] == "complete" and result["isError"] is False and "taskId" not in result
    assert result["structuredContent"]["data"]["status"] in ("queued", "running")
    # …and tasks/* without declaring it on the request is -32021 (SEP-2663 "Protocol Errors").
    status, reply = task_request(server, "dave", "tasks/get", "any-id", handle, declare=False)
    assert status == 400 and reply["error"]["code"] == -32021, reply
    assert reply["error"]["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}


@pytest.mark.django_db
def test_an_investigation_never_gets_a_task(server: ServerProcess, world: dict[str, Any]) -> None:
    result = run_burst(server, "erin", world["handles"]["erin-investigation"], declare=True)
    assert result["resultType"] == "complete" and result["isError"] is False and "taskId" not in result
    assert result["structuredContent"]["data"]["run_id"]
    assert not McpTask.objects.filter(principal__subject=subject("erin")).exists()


@pytest.mark.django_db
def test_tasks_cancel_cancels_the_run_and_only_its_owner_reaches_it(
    server: ServerProcess, world: dict[str, Any]
) -> None:
    # No worker has started yet in this module: the run stays queued until it is cancelled.
    handles = world["handles"]
    task_id = assert_created_task(run_burst(server, "carol", handles["carol"], declare=True))
    row = McpTask.objects.get(key=task_key(task_id))
    assert row.principal.subject == subject("carol") and row.tool == "run_burst_analysis"
    assert not McpTask.objects.filter(key=task_id).exists()  # only its hash is stored
    # The routing header must name the task (SEP-2663 "Streamable HTTP: Routing Headers").
    status, reply = task_request(server, "carol", "tasks/get", task_id, handles["carol"], name="another-task")
    assert status == 400 and reply["error"]["code"] == -32020, reply
    # Someone else with a live context of the same project: the answer of an unknown id, and nothing cancelled.
    status, foreign = task_request(server, "bob", "tasks/cancel", task_id, handles["bob"])
    _, unknown = task_request(server, "bob", "tasks/cancel", "no-such-task-" + "x" * 40, handles["bob"])
    assert status == 400 and foreign["error"] == unknown["error"], (foreign, unknown)
    assert foreign["error"] == NOT_FOUND
    # Without a context: refused before any task is looked at.
    status, bare = task_request(server, "carol", "tasks/get", task_id, None)
    assert status == 400 and bare["error"]["data"]["code"] == "PROJECT_CONTEXT_REQUIRED", bare
    # A token that cannot call tools cannot reach tasks either (HTTP 403, like tools/call).
    status, _ = task_request(server, "carol", "tasks/get", task_id, handles["carol"], scopes="mcp.catalog.read")
    assert status == 403
    # Cancelling is the cancel tool's: a token without the run scope may read the task, not cancel it.
    status, refused = task_request(server, "carol", "tasks/cancel", task_id, handles["carol"], scopes="mcp.query")
    assert status == 400 and refused["error"]["message"] == "Unknown tool: cancel_analysis_run", refused
    _, still = task_request(server, "carol", "tasks/get", task_id, handles["carol"], scopes="mcp.query")
    assert still["result"]["status"] == "working" and still["result"]["statusMessage"] == "queued", still
    status, ack = task_request(server, "carol", "tasks/cancel", task_id, handles["carol"])
    assert status == 200 and ack["result"]["resultType"] == "complete", ack
    assert set(ack["result"]) <= {"resultType", "_meta"}
    status, got = task_request(server, "carol", "tasks/get", task_id, handles["carol"])
    task = got["result"]
    assert status == 200 and task["status"] == "cancelled" and task["taskId"] == task_id, got
    assert task["resultType"] == "complete" and "result" not in task and task["statusMessage"]
    run_id = row.arguments["run_id"]
    run = call_tool(
        server.url, "get_analysis_run", {"run_id": run_id}, bearer=bearer("carol"), context_handle=handles["carol"]
    )
    assert run["result"]["structuredContent"]["data"]["status"] == "cancelled"
    # tasks/update is acknowledged for the owner (no job here asks for input), not found for anyone else.
    status, ack = task_request(server, "carol", "tasks/update", task_id, handles["carol"])
    assert status == 200 and ack["result"]["resultType"] == "complete"
    status, _ = task_request(server, "bob", "tasks/update", task_id, handles["bob"])
    assert status == 400


def test_a_declaring_client_follows_the_task_to_the_inlined_result(
    server: ServerProcess, worker: None, world: dict[str, Any], django_db_blocker: Any
) -> None:
    handles = world["handles"]
    task_id = assert_created_task(run_burst(server, "alice", handles["alice"], declare=True))
    # Another principal polling alice's task: not found, exactly like an unknown id.
    _, foreign = task_request(server, "bob", "tasks/get", task_id, handles["bob"])
    _, unknown = task_request(server, "alice", "tasks/get", task_id[::-1], handles["alice"])
    assert foreign["error"] == unknown["error"] == NOT_FOUND
    deadline = time.monotonic() + 90
    while True:
        status, reply = task_request(server, "alice", "tasks/get", task_id, handles["alice"])
        assert status == 200, reply
        task = reply["result"]
        assert task["taskId"] == task_id and task["resultType"] == "complete" and task["ttlMs"] > 0
        if task["status"] != "working":
            break
        assert task["statusMessage"] and "result" not in task
        assert time.monotonic() < deadline, task
        time.sleep(task["pollIntervalMs"] / 1000)
    assert task["status"] == "completed", task
    result = task["result"]
    assert result["isError"] is False and result["content"][0]["type"] == "text" and task["statusMessage"]
    data = result["structuredContent"]["data"]
    assert data["status"] == "succeeded" and data["cost"]["cpu_seconds"] > 0
    assert {r["result_type"] for r in data["result_types"]} == {"leak", "affected_nodes", "customers_affected"}
    # The inlined result is what get_analysis_run answers for the run.
    direct = call_tool(
        server.url,
        "get_analysis_run",
        {"run_id": data["run_id"]},
        bearer=bearer("alice"),
        context_handle=handles["alice"],
    )["result"]
    assert {k: v for k, v in direct["structuredContent"].items() if k != "queried_at"} == {
        k: v for k, v in result["structuredContent"].items() if k != "queried_at"
    }
    assert direct["content"] == result["content"]
    # ...and it is what run_burst_analysis's own outputSchema admits: a client validating the task's result
    # against the tool it called passes (the acceptance alone would not admit it).
    listed = parse_rpc_response(rpc(server, bearer("alice"), "tools/list", {}))["result"]["tools"]
    schema = next(t["outputSchema"] for t in listed if t["name"] == "run_burst_analysis")
    Draft202012Validator(schema).validate(result["structuredContent"])
    accepted_only = {"$defs": schema["$defs"], "$ref": "#/$defs/RunAccepted"}
    assert not Draft202012Validator(accepted_only).is_valid(result["structuredContent"]["data"])
    # A finished run cannot be cancelled any more: tasks/cancel still acknowledges, the task stays completed.
    status, ack = task_request(server, "alice", "tasks/cancel", task_id, handles["alice"])
    assert status == 200 and ack["result"]["resultType"] == "complete"
    _, again = task_request(server, "alice", "tasks/get", task_id, handles["alice-2"])
    assert again["result"]["status"] == "completed" and again["result"]["result"] == result | {
        "structuredContent": again["result"]["result"]["structuredContent"]
    }
    # Past its ttl the task is gone: the answer of an unknown id.
    with django_db_blocker.unblock():
        McpTask.objects.filter(key=task_key(task_id)).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, expired = task_request(server, "alice", "tasks/get", task_id, handles["alice"])
    assert expired["error"] == NOT_FOUND
