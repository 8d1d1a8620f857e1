"""The reference agent host (examples/agent_host.py) end to end against the real provider and a real
server: discovery from the 401 challenge, the catalog by client_credentials, token exchange, an
ordinary_chat context with the handle hidden from the model, a task_execution → task_reader pair on the
demo investigation, renew once on 401 (concurrent renewals merged), never escalate on 403, and every
context deleted on exit."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from contexts.models import ExecutionRequest, Membership, Principal, QueryContext, Task, TaskRun
from contexts.onboarding import membership_grant
from contexts.services import Actor
from examples.agent_host import AgentHost, Forbidden, HostError, TokenSource
from tests.conftest import ROOT, ServerProcess
from tests.interop.idp import AGENT_CLIENT_ID, AGENT_CLIENT_SECRET, USERS, IdentityProvider

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]
PROJECT = "tianjin-demo"


@pytest.fixture(scope="module")
def alice_member(idp: IdentityProvider, django_db_blocker: Any) -> Iterator[str]:
    """alice (the provider's subject) granted every permission on the demo, with the onboarding service."""
    subject = USERS["alice"][0]
    with django_db_blocker.unblock():
        membership_grant(
            project_slug=PROJECT,
            issuer=idp.issuer,
            subject=subject,
            permissions=["webgis.view", "scada.view", "simulation.view"],
            actor=Actor(label="test:agent-host"),
        )
    yield subject
    with django_db_blocker.unblock():
        QueryContext.objects.filter(principal__issuer=idp.issuer, principal__subject=subject).delete()
        Membership.objects.filter(principal__issuer=idp.issuer, principal__subject=subject).delete()
        Principal.objects.filter(issuer=idp.issuer, subject=subject, memberships__isnull=True).delete()


def _demo_run(django_db_blocker: Any) -> tuple[TaskRun, str]:
    """The demo investigation's current run and its execution request id."""
    with django_db_blocker.unblock():
        task = Task.objects.filter(project__slug=PROJECT).order_by("id").first()
        assert task is not None
        run = TaskRun.objects.get(task=task, superseded_at__isnull=True)
        return run, ExecutionRequest.objects.filter(run=run).values_list("request_id", flat=True)[0]


def test_the_host_runs_end_to_end(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str, django_db_blocker: Any
) -> None:
    run, execution_request = _demo_run(django_db_blocker)
    user_token = idp.user_token("alice")
    env = {**os.environ, "TJWATER_USER_TOKEN": user_token, "TJWATER_HOST_CLIENT_SECRET": AGENT_CLIENT_SECRET}
    result = subprocess.run(
        [sys.executable, "examples/agent_host.py", "--mcp-url", f"{idp_server.url}/mcp", "--project", PROJECT,
         "--task-id", str(run.task_id), "--run-id", str(run.pk), "--session-id", run.lease_holder,
         "--execution-request", execution_request],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == f"authorization: issuer={idp.issuer} resource={idp_server.url}/mcp"
    assert lines[1].startswith("catalog: ") and int(lines[1].split()[1]) >= 4
    assert lines[2].startswith("ordinary_chat: ") and lines[2].endswith("model view hides the handle: True")
    assert lines[3] == "call get_element_properties: ok source=model_network evidence_id=None"
    assert lines[4].startswith("task_execution call: ok source=model_network")
    assert lines[5].startswith("task_reader call: ok source=model_network")
    assert lines[6] == "contexts deleted: 3; token renewals: 1"
    with django_db_blocker.unblock():
        live = QueryContext.objects.filter(principal__subject=alice_member, revoked_at__isnull=True).count()
    assert live == 0
    # The handle never reached the host's output.
    assert "context_handle" not in result.stdout


def test_renew_once_on_401_merged_and_never_escalate_on_403(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str
) -> None:
    async def scenario() -> tuple[int, list[bool], int, Forbidden | None]:
        host = AgentHost(f"{idp_server.url}/mcp", AGENT_CLIENT_ID, AGENT_CLIENT_SECRET)
        await host.start()
        user_token = idp.user_token("alice")
        source = TokenSource(host, user_token)
        binding = await host.bind(source, project=PROJECT, purpose="ordinary_chat", session_id="host-renew-test")
        # The host holds a token the server no longer accepts: three concurrent calls all get 401, and the
        # renewals they trigger are merged into one exchange. (Three: within the per-principal limit of 4.)
        stale = TokenSource(host, user_token, token="no-longer-valid")
        results = await asyncio.gather(
            *(
                host.call(stale, binding, "get_network_options", {"kind": "hydraulic"}, request_key=f"k{i}")
                for i in range(3)
            )
        )
        # A catalog token may not call tools: 403, returned as it is — no renewal, no wider token.
        catalog_only = TokenSource(host, user_token, token=await host.catalog_token())
        refusal: Forbidden | None = None
        try:
            await host.call(catalog_only, binding, "get_network_options", {"kind": "hydraulic"}, request_key="x")
        except Forbidden as exc:
            refusal = exc
        await host.close(source)
        return stale.renewals, [not r.is_error for r in results], catalog_only.renewals, refusal

    renewals, oks, catalog_renewals, refusal = asyncio.run(scenario())
    assert oks == [True] * 3
    assert renewals == 1
    assert catalog_renewals == 0
    assert refusal is not None and str(refusal) == "insufficient_scope"


def test_discovery_refuses_a_mismatching_resource(idp_server: ServerProcess) -> None:
    async def scenario() -> None:
        host = AgentHost(f"{idp_server.url}/mcp/", AGENT_CLIENT_ID, AGENT_CLIENT_SECRET)  # not the resource URI
        try:
            await host.start()
        finally:
            await host.http.aclose()

    with pytest.raises(HostError):
        asyncio.run(scenario())
