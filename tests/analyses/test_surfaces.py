"""The analysis tools on their surfaces (issue 42 items 3 and 6), against a real uvicorn server with
``TJWATER_MCP_ANALYSIS_TOOLS`` on and a real Celery worker on the ``analysis`` queue: a ``run_*`` call
returns the job answer at once, the run succeeds on the worker and the existing tools read it; without
``simulation.run`` or the ``mcp.analysis.run`` scope the tools are not in the context and answer as
unknown; REST's POSTs answer 202 with ``Location`` and the same body; ``Idempotency-Key`` is exact."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from django.conf import settings
from django.test import override_settings

from contexts import dev_issuer
from contexts.grants import tool_catalog
from contexts.models import Membership, Principal, Project
from contexts.services import context_create
from queries.importer.epanet import import_network
from tests.analyses.conftest import NET3, RUNNER, VIEWER, enable, import_valves, running_worker, valve_rows
from tests.support import tokens
from tests.support.mcp_http import call_tool, mcp_request
from tests.support.servers import ServerProcess
from tjwater.registry import TOOLS

pytestmark = pytest.mark.e2e
SLUG = "analyses-surfaces"
CLIENT = "tjwater-agent-mcp"
RUN_SCOPES = "mcp.query mcp.analysis.run"
BURST = {"pipe_id": "123", "start": "2026-04-01T07:00:00Z", "duration_minutes": 120, "leak_flow": 0.01}
RUN_TOOLS = {
    "run_simulation",
    "run_burst_analysis",
    "run_valve_isolation_analysis",
    "run_flushing_analysis",
    "run_contaminant_simulation",
    "cancel_analysis_run",
}


def subject(name: str) -> str:
    return f"analyses-{name}"


def mcp_token(name: str, scopes: str = RUN_SCOPES) -> str:
    return tokens.dev_token(subject(name), client=CLIENT, scopes=scopes.split(), ttl_s=600)


def api_token(name: str, scopes: tuple[str, ...] = ("api.read", "api.analysis.run")) -> str:
    return dev_issuer.mint_token(
        subject=subject(name), client_id=CLIENT, scopes=list(scopes), audience=settings.TJWATER_API_AUDIENCE, ttl_s=600
    )


@pytest.fixture(scope="module")
def world(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with django_db_blocker.unblock(), override_settings(TJWATER_MCP_ANALYSIS_TOOLS=True):
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="Analyses surfaces")
        import_network(project=project, inp_path=NET3, center=(-85.5, 38.0), scale=30.0, baseline_hours=0)
        import_valves(project, tmp_path_factory.mktemp("valves"), valve_rows())
        enable(project, concurrent=8)
        handles: dict[str, str] = {}
        for name, permissions in (("alice", RUNNER), ("bob", VIEWER)):
            principal, _ = Principal.objects.get_or_create(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=subject(name))
            Membership.objects.update_or_create(
                principal=principal, project=project, defaults={"permissions": permissions}
            )
        catalog, task_scoped = tool_catalog()
        for key, name, scopes in (
            ("alice", "alice", RUN_SCOPES),
            ("alice-unscoped", "alice", "mcp.query"),
            ("bob", "bob", RUN_SCOPES),
        ):
            token = tokens.verified_token(
                subject(name), client=CLIENT, scopes=scopes.split(), issuer=settings.TJWATER_DEV_ISSUER_ID
            )
            created = context_create(
                token=token,
                project_slug=SLUG,
                session_id=f"s-{key}",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            )
            handles[key] = created.handle
            handles[f"{key}-tools"] = created.tools  # type: ignore[assignment]
    yield {"project": project, "handles": handles}
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        Principal.objects.filter(subject__startswith="analyses-").delete()


@pytest.fixture(scope="module")
def server(world: dict[str, Any], start_server: Any) -> ServerProcess:
    return start_server(TJWATER_MCP_ANALYSIS_TOOLS="1", TJWATER_MCP_ALLOWED_CLIENTS=CLIENT)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def worker(world: dict[str, Any], django_db_blocker: Any) -> Iterator[None]:
    """A real worker of both queues, in this process (``tests.analyses.conftest.running_worker``)."""
    yield from running_worker(django_db_blocker)


def structured(reply: dict[str, Any]) -> dict[str, Any]:
    assert "result" in reply, reply
    result = reply["result"]
    assert result.get("isError") is False, result
    return result["structuredContent"]  # type: ignore[no-any-return]


def wait_for(server: ServerProcess, handle: str, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        data = structured(
            call_tool(
                server.url, "get_analysis_run", {"run_id": run_id}, bearer=mcp_token("alice"), context_handle=handle
            )
        )["data"]
        if data["status"] in ("succeeded", "failed", "cancelled"):
            return data  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"run {run_id} is still {data['status']}"
        time.sleep(0.2)


def test_the_analysis_tools_are_off_by_default_and_never_in_the_product_catalog() -> None:
    with override_settings(TJWATER_MCP_ANALYSIS_TOOLS=False):
        assert not RUN_TOOLS & {t.name for t in TOOLS.tools()}
    with override_settings(TJWATER_MCP_ANALYSIS_TOOLS=True):
        assert RUN_TOOLS <= {t.name for t in TOOLS.tools()}
        assert TOOLS.action_tools() == RUN_TOOLS
    assert not RUN_TOOLS & {t.name for t in TOOLS.product_tools()}


def test_only_a_runner_with_the_scope_gets_the_tools(world: dict[str, Any]) -> None:
    handles = world["handles"]
    assert RUN_TOOLS <= set(handles["alice-tools"])
    assert (
        not RUN_TOOLS & set(handles["alice-unscoped-tools"]) and "get_analysis_run" in handles["alice-unscoped-tools"]
    )
    assert not RUN_TOOLS & set(handles["bob-tools"])


def test_a_run_over_mcp_returns_at_once_and_the_analysis_tools_read_it(
    server: ServerProcess, worker: None, world: dict[str, Any]
) -> None:
    handle = world["handles"]["alice"]
    listed = mcp_request(f"{server.url}/mcp", mcp_token("alice"), "tools/list")
    assert listed.message is not None
    tools = {t["name"]: t for t in listed.message["result"]["tools"]}
    assert tools["run_burst_analysis"]["annotations"]["readOnlyHint"] is False
    assert tools["run_burst_analysis"]["inputSchema"]["additionalProperties"] is False
    t0 = time.monotonic()
    answer = structured(
        call_tool(server.url, "run_burst_analysis", BURST, bearer=mcp_token("alice"), context_handle=handle)
    )["data"]
    assert time.monotonic() - t0 < 10  # it only queues (the p50 is measured by make bench-analysis)
    assert (
        answer["status"] in ("queued", "running")
        and answer["created"] is True
        and answer["estimate"]["cpu_seconds"] > 0
    )
    run = wait_for(server, handle, answer["run_id"])
    assert run["status"] == "succeeded" and run["cost"]["cpu_seconds"] > 0 and run["estimate"]["cpu_seconds"] > 0
    assert run["model_version"]["version"] >= 1 and len(run["input_sha256"]) == 64
    results = structured(
        call_tool(
            server.url,
            "list_analysis_results",
            {"run_id": answer["run_id"]},
            bearer=mcp_token("alice"),
            context_handle=handle,
        )
    )["data"]["items"]
    assert {r["result_type"] for r in results} == {"leak", "affected_nodes", "customers_affected"}
    # The same question again (REST, exact by its key the second time): the same run, not a second job.
    rest = httpx2.post(
        f"{server.url}/api/v1/projects/{SLUG}/burst-analyses",
        json=BURST,
        headers={"Authorization": f"Bearer {api_token('alice')}"},
        timeout=30,
    )
    assert rest.status_code == 202, rest.text
    assert rest.headers["Location"] == f"/api/v1/projects/{SLUG}/analysis/runs/{answer['run_id']}"
    body = rest.json()
    assert body["data"]["run_id"] == answer["run_id"] and body["data"]["created"] is False
    assert {k: v for k, v in body["data"].items() if k not in ("status", "created")} == {
        k: v for k, v in answer.items() if k not in ("status", "created")
    }


def test_without_the_scope_or_the_permission_a_run_tool_is_unknown(
    server: ServerProcess, world: dict[str, Any]
) -> None:
    handles = world["handles"]
    for bearer, handle in (
        (mcp_token("alice", "mcp.query"), handles["alice"]),
        (mcp_token("alice"), handles["alice-unscoped"]),
        (mcp_token("bob"), handles["bob"]),
    ):
        reply = call_tool(server.url, "run_burst_analysis", BURST, bearer=bearer, context_handle=handle)
        assert "error" in reply and "Unknown tool" in reply["error"]["message"], reply


def test_rest_posts_need_the_run_scope_and_name_bad_fields(server: ServerProcess, world: dict[str, Any]) -> None:
    url = f"{server.url}/api/v1/projects/{SLUG}/burst-analyses"
    unscoped = httpx2.post(url, json=BURST, headers={"Authorization": f"Bearer {api_token('alice', ('api.read',))}"})
    assert unscoped.status_code == 403
    viewer = httpx2.post(url, json=BURST, headers={"Authorization": f"Bearer {api_token('bob')}"})
    assert viewer.status_code == 403 and viewer.json()["code"] == "PERMISSION_DENIED"
    bad = httpx2.post(
        url, json={**BURST, "pipe_id": "P-404"}, headers={"Authorization": f"Bearer {api_token('alice')}"}
    )
    assert bad.status_code == 400 and "'P-404'" in bad.json()["message"]
    extra = httpx2.post(url, json={**BURST, "colour": "red"}, headers={"Authorization": f"Bearer {api_token('alice')}"})
    assert extra.status_code == 400 and "colour" in extra.json()["message"]
    keyed = {"Authorization": f"Bearer {api_token('alice')}", "Idempotency-Key": "surface-1"}
    first = httpx2.post(url, json={**BURST, "duration_minutes": 30}, headers=keyed)
    again = httpx2.post(url, json={**BURST, "duration_minutes": 30}, headers=keyed)
    assert (
        first.status_code == again.status_code == 202
        and first.json()["data"]["run_id"] == again.json()["data"]["run_id"]
    )
    other = httpx2.post(url, json={**BURST, "duration_minutes": 45}, headers=keyed)
    assert other.status_code == 400 and "request_key was used before" in other.json()["message"]
    cancel = httpx2.post(
        f"{server.url}/api/v1/projects/{SLUG}/analysis/runs/{first.json()['data']['run_id']}/cancel",
        headers={"Authorization": f"Bearer {api_token('bob')}"},
    )
    assert cancel.status_code == 403  # bob holds no simulation.run: not his to cancel
