"""The MCP Tasks face's pure parts (``mcp_app.task_records``, ``mcp_app.tasks_extension``): who declared the
extension, how the extension is applied to the low-level server (the SDK's ``Extension`` contract), and how
a job's state read through its follow tool becomes the task's. The whole flow over HTTP, with a real
worker, is tests/e2e/test_mcp_tasks.py."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server import Server
from mcp.server.extension import Extension, MethodBinding
from mcp_types import RequestParams

from mcp_app.task_records import TASKS_EXTENSION, declares_tasks, ttl_ms
from mcp_app.tasks_extension import TASK_METHOD_SCOPES, TasksExtension, install

CAPS = "io.modelcontextprotocol/clientCapabilities"


@pytest.mark.parametrize(
    ("meta", "declared"),
    [
        ({CAPS: {"extensions": {TASKS_EXTENSION: {}}}}, True),
        ({CAPS: {"extensions": {"io.modelcontextprotocol/oauth-client-credentials": {}}}}, False),
        ({CAPS: {}}, False),
        ({CAPS: {"extensions": [TASKS_EXTENSION]}}, False),  # not the schema's map
        ({CAPS: "tasks"}, False),
        ({"tasks": True}, False),
        (None, False),
    ],
)
def test_only_the_requests_own_declaration_counts(meta: dict[str, Any] | None, declared: bool) -> None:
    assert declares_tasks(meta) is declared


class _Methods(Extension):
    identifier = "io.example/methods"

    def methods(self) -> tuple[MethodBinding, ...]:
        async def handler(ctx: Any, params: Any) -> dict[str, Any]:
            return {}

        return (MethodBinding("example/get", RequestParams, handler),)


def test_install_adds_the_methods_and_advertises_the_extension_once() -> None:
    server: Server[Any] = Server("t")
    assert install(server, _Methods()) == ["example/get"]
    assert server.get_request_handler("example/get") is not None
    assert server.extensions == {"io.example/methods": {}}
    assert server.get_capabilities().extensions == {"io.example/methods": {}}
    with pytest.raises(ValueError, match="already installed"):
        install(server, _Methods())


def test_install_never_replaces_a_registered_method() -> None:
    server: Server[Any] = Server("t")

    async def taken(ctx: Any, params: Any) -> dict[str, Any]:
        return {}

    server.add_request_handler("example/get", RequestParams, taken)
    with pytest.raises(ValueError, match="registered"):
        install(server, _Methods())
    assert server.extensions == {}


def test_the_tasks_methods_are_extension_methods_opened_like_tools_call() -> None:
    # MethodBinding refuses spec methods at construction: building the bindings proves tasks/* are not.
    methods = [b.method for b in TasksExtension(None, token_of=lambda ctx: None).methods()]  # type: ignore[arg-type]
    assert methods == ["tasks/get", "tasks/update", "tasks/cancel"]
    assert set(TASK_METHOD_SCOPES) == set(methods) and set(TASK_METHOD_SCOPES.values()) == {"tools/call"}
    assert TasksExtension.identifier == TASKS_EXTENSION == "io.modelcontextprotocol/tasks"


def _answer(status: str, *, error: bool = False, **data: Any) -> dict[str, Any]:
    body = {"run_id": "r-1", "status": status, **data}
    return {
        "content": [{"type": "text", "text": f"Run r-1 is {status}."}],
        "structuredContent": {"data": body},
        "isError": error,
        "resultType": "complete",
    }


def test_the_task_state_is_the_jobs() -> None:
    state = TasksExtension._state
    started = "2026-04-01T07:00:00+00:00"
    running = state(_answer("running", progress=0.4, status_message="Solving", started_at=started), None)
    assert running == {
        "status": "working",
        "statusMessage": "running, 40%: Solving",
        "lastUpdatedAt": "2026-04-01T07:00:00Z",
    }
    assert state(_answer("queued", progress=None), None)["statusMessage"] == "queued"
    done = state(_answer("succeeded"), None)
    assert done["status"] == "completed" and done["result"] == _answer("succeeded")
    assert done["statusMessage"] == "Run r-1 is succeeded."
    # A run that failed is a finished tool call with a tool-level error (SEP-2663: not "failed").
    failed = state(_answer("failed", error_code="EPANET_110"), None)
    assert failed["status"] == "completed" and failed["result"]["isError"] is True
    cancelled = state(_answer("cancelled", status_message="Cancelled by alice."), None)
    assert cancelled == {"status": "cancelled", "statusMessage": "Cancelled by alice."}
    # A business error of the read (isError) is a completed call; a JSON-RPC refusal is "failed" with it.
    refused = _answer("?", error=True)
    assert state(refused, None) == {"status": "completed", "statusMessage": "Run r-1 is ?.", "result": refused}
    error = {"code": -32602, "message": "Unknown tool: get_analysis_run"}
    assert state(None, error) == {"status": "failed", "statusMessage": error["message"], "error": error}


def test_ttl_is_milliseconds_from_creation() -> None:
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 4, 1, tzinfo=UTC)
    assert ttl_ms(start, start + timedelta(days=30)) == 30 * 86_400_000


def test_the_run_tools_are_job_backed_only_with_their_follow_tools_in_the_catalog() -> None:
    from django.test import override_settings

    from mcp_app.catalog import Catalog
    from mcp_app.task_records import JobTools
    from queries.registry import all_tools

    declared = {CAPS: {"extensions": {TASKS_EXTENSION: {}}}}
    with override_settings(TJWATER_MCP_ANALYSIS_TOOLS=True):
        catalog = Catalog(all_tools())
        jobs = JobTools(catalog)
        burst = catalog.get("run_burst_analysis")
        assert burst is not None and {"run_burst_analysis", "run_valve_isolation_analysis"} <= set(jobs.by_tool)
        job = jobs.offer(burst, declared)
        assert job is not None and job.keys == ("run_id",)
        assert (job.read.spec.name, job.cancel.spec.name) == ("get_analysis_run", "cancel_analysis_run")
        assert jobs.offer(burst, {CAPS: {}}) is None
        cancel = catalog.get("cancel_analysis_run")
        assert cancel is not None and jobs.offer(cancel, declared) is None  # only a submit has a job to follow
        exposed = [t.name for t in all_tools() if t.name != "get_analysis_run"]
        with override_settings(TJWATER_MCP_EXPOSED_TOOLS=exposed):
            assert not JobTools(Catalog(all_tools()))  # no read tool to follow with: answered as jobs only
    assert not JobTools(Catalog(all_tools()))  # analysis tools off: nothing is job-backed, nothing advertised
