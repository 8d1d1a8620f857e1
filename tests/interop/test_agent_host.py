"""The reference agent host (examples/agent_host.py) end to end against the real Keycloak-shaped provider
(devtools/) and a real server: discovery with the configured issuer, the catalog by client_credentials,
token exchange, an ordinary_chat context with the handle hidden from the model and model input checked, an
investigation under the worker's service identity (task_execution → resources/read → task_reader), renew
once on 401 (concurrent renewals merged), credential_refresh_required, never escalate on 403, and logout
(calls in flight cancelled, bindings revoked, caches cleared). The discovery rules against hostile
providers are in test_agent_host_discovery.py."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from contexts.models import (
    ExecutionRequest,
    Membership,
    Principal,
    Project,
    QueryContext,
    Task,
    TaskReport,
    TaskRun,
)
from contexts.onboarding import membership_grant
from contexts.services import Actor
from examples.agent_host import (
    RESERVED_FIELDS,
    AgentHost,
    DiscoveryRefused,
    Forbidden,
    ModelInputRefused,
    Session,
    Worker,
)
from tests.support.idp import AGENT_CLIENT_ID, AGENT_CLIENT_SECRET, USERS, IdentityProvider
from tests.support.postgres import active_sleeps
from tests.support.servers import ROOT, ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]
PROJECT = "tianjin-demo"
WORKER_CLIENT_ID = "tjwater-worker"
WORKER_CLIENT_SECRET = "tjwater-worker-dev-secret"  # noqa: S105 - the dev provider's documented default
PERMISSIONS = ["webgis.view", "scada.view", "simulation.view"]
HOST_TASK_TITLE = "agent host investigation (worker identity)"


@pytest.fixture(scope="module")
def alice_member(idp: IdentityProvider, django_db_blocker: Any) -> Iterator[str]:
    """alice (the provider's subject) and the worker's service identity, granted every permission on
    the demo with the onboarding service."""
    subject = USERS["alice"][0]
    with django_db_blocker.unblock():
        for who in (subject, WORKER_CLIENT_ID):
            membership_grant(
                project_slug=PROJECT,
                issuer=idp.issuer,
                subject=who,
                permissions=PERMISSIONS,
                actor=Actor(label="test:agent-host"),
            )
        # The investigation the host runs belongs to the worker's service identity (issue 17: only a run's
        # owner binds task contexts on it).
        worker = Principal.objects.get(issuer=idp.issuer, subject=WORKER_CLIENT_ID)
        task = Task.objects.create(project=Project.objects.get(slug=PROJECT), title=HOST_TASK_TITLE)
        run = TaskRun.objects.create(
            task=task,
            sequence=1,
            owner=worker,
            lease_holder=f"host-session-{uuid.uuid4().hex[:8]}",
            lease_expires_at=timezone.now() + timedelta(hours=2),
        )
        ExecutionRequest.objects.create(run=run, request_id=f"host-exec-{uuid.uuid4().hex[:8]}")
    yield subject
    with django_db_blocker.unblock():
        Task.objects.filter(pk=task.pk).delete()
        for who in (subject, WORKER_CLIENT_ID):
            QueryContext.objects.filter(principal__issuer=idp.issuer, principal__subject=who).delete()
            Membership.objects.filter(principal__issuer=idp.issuer, principal__subject=who).delete()
            Principal.objects.filter(issuer=idp.issuer, subject=who, memberships__isnull=True).delete()


def _demo_run(django_db_blocker: Any) -> tuple[TaskRun, str]:
    """The worker's investigation (``alice_member``): its current run and its execution request id."""
    with django_db_blocker.unblock():
        task = Task.objects.filter(project__slug=PROJECT, title=HOST_TASK_TITLE).order_by("id").first()
        assert task is not None
        run = TaskRun.objects.get(task=task, superseded_at__isnull=True)
        return run, ExecutionRequest.objects.filter(run=run).values_list("request_id", flat=True)[0]


def _host(idp: IdentityProvider, server: ServerProcess) -> AgentHost:
    return AgentHost(f"{server.url}/mcp", idp.issuer, AGENT_CLIENT_ID, AGENT_CLIENT_SECRET)


def _wait(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_the_host_runs_end_to_end(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str, django_db_blocker: Any
) -> None:
    run, execution_request = _demo_run(django_db_blocker)
    user_token = idp.user_token("alice")
    env = {
        **os.environ,
        "TJWATER_USER_TOKEN": user_token,
        "TJWATER_HOST_CLIENT_SECRET": AGENT_CLIENT_SECRET,
        "TJWATER_HOST_ISSUER": idp.issuer,
        "TJWATER_WORKER_CLIENT_SECRET": WORKER_CLIENT_SECRET,
    }
    result = subprocess.run(
        [sys.executable, "examples/agent_host.py", "--mcp-url", f"{idp_server.url}/mcp", "--project", PROJECT,
         "--task-id", str(run.task_id), "--run-id", str(run.pk), "--session-id", run.lease_holder,
         "--execution-request", execution_request],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"authorization: issuer={idp.issuer} resource={idp_server.url}/mcp client_auth=client_secret_basic"
    )
    assert lines[1].startswith("catalog: ") and int(lines[1].split()[1]) >= 4
    assert lines[2].startswith("ordinary_chat: ") and lines[2].endswith("model view hides the handle: True")
    assert lines[3] == "call get_element_properties: ok source=model_network evidence_id=None"
    assert re.fullmatch(r"task_execution call \(worker identity\): ok source=model_network evidence_id=\S+", lines[4])
    assert lines[4].split("evidence_id=")[1] != "None"  # saved as evidence first
    assert lines[5] == "resources/read evidence: 1 content(s)"  # item 6: the handle went in _meta
    assert lines[6].startswith("task_reader call: ok source=model_network")
    # Two exchanges: alice's token and the worker's service token; every context revoked at logout.
    assert lines[7] == "contexts revoked at logout: 3; token exchanges: 2"
    with django_db_blocker.unblock():
        contexts = QueryContext.objects.filter(principal__issuer=idp.issuer, session_id__startswith=run.lease_holder)
        # Item 5: the investigation's contexts belong to the worker's service identity, not to alice.
        assert set(contexts.values_list("purpose", "principal__subject")) >= {
            ("task_execution", WORKER_CLIENT_ID),
            ("task_reader", WORKER_CLIENT_ID),
        }
        live = QueryContext.objects.filter(
            principal__subject__in=[alice_member, WORKER_CLIENT_ID], revoked_at__isnull=True
        ).count()
    assert live == 0
    # The handle never reached the host's output.
    assert "context_handle" not in result.stdout
    # Item 14: the per-call log line of the investigation's call carries its task and run.
    call_line = rf"mcp call principal=\d+ project={PROJECT} task={run.task_id} run={run.pk} tool=get_element_properties"
    assert re.search(call_line, idp_server.log())


def test_renew_once_on_401_merged_and_never_escalate_on_403(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str
) -> None:
    async def scenario() -> tuple[int, list[bool], int, Forbidden | None, int]:
        host = _host(idp, idp_server)
        user = Session(principal=alice_member, credential=idp.user_token("alice"))
        binding = await host.bind(user, project=PROJECT, purpose="ordinary_chat", session_id="host-renew-test")
        # The host holds a token the server no longer accepts: three concurrent calls all get 401, and the
        # renewals they trigger are merged into one exchange. (Three: within the per-principal limit of 4.)
        host.hold(user, "no-longer-valid")
        before, discoveries = host.exchanges, host.discovery.runs
        results = await asyncio.gather(
            *(
                host.call(user, binding, "get_network_options", {"kind": "hydraulic"}, request_key=f"k{i}")
                for i in range(3)
            )
        )
        renewals = host.exchanges - before
        rediscovered = host.discovery.runs - discoveries  # the 401 dropped the discovery cache once
        # A catalog token may not call tools: 403, returned as it is — no renewal, no wider token.
        catalog_only = Session(principal=f"{alice_member}-catalog", credential=user.credential)
        host.hold(catalog_only, await host.catalog_token())
        before = host.exchanges
        refusal: Forbidden | None = None
        try:
            await host.call(catalog_only, binding, "get_network_options", {"kind": "hydraulic"}, request_key="x")
        except Forbidden as exc:
            refusal = exc
        await host.logout(user)
        return renewals, [not r.is_error for r in results], host.exchanges - before, refusal, rediscovered

    renewals, oks, catalog_renewals, refusal, rediscovered = asyncio.run(scenario())
    assert oks == [True] * 3
    assert renewals == 1
    assert rediscovered == 1
    assert catalog_renewals == 0
    assert refusal is not None and str(refusal) == "insufficient_scope"


def test_model_input_is_refused_before_any_call(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str
) -> None:
    """Item 4: the handle, identity and reserved scope fields are refused (not overwritten), and arguments
    are checked against the projected schema — none of these reach the server."""

    async def scenario() -> tuple[list[str], set[str]]:
        host = _host(idp, idp_server)
        user = Session(principal=alice_member, credential=idp.user_token("alice"))
        binding = await host.bind(user, project=PROJECT, purpose="ordinary_chat", session_id="host-model-input")
        refusals = []
        for tool, arguments in [
            ("get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523", "context_handle": "x"}),
            ("get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523", "project": "demo-b"}),
            ("get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523", "sub": "bob"}),
            ("get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523", "scope": "mcp.admin"}),
            ("get_element_properties", {"element_type": "pipe"}),  # element_id missing
            ("get_element_properties", {"element_type": "hydrant", "element_id": "1"}),  # not in the enum
            ("publish_report", {}),  # not a tool of this context
        ]:
            try:
                await host.call(user, binding, tool, arguments, request_key="never-sent")
                refusals.append("called")
            except ModelInputRefused as exc:
                refusals.append(str(exc).split(":")[0])
        properties = {p for t in host.model_view(await host.list_catalog()) for p in t["input_schema"]["properties"]}
        await host.logout(user)
        return refusals, properties

    calls_before = idp_server.log().count("tool=get_element_properties")
    refusals, properties = asyncio.run(scenario())
    assert refusals == [
        "model input may not contain context_handle",
        "model input may not contain project",
        "model input may not contain sub",
        "model input may not contain scope",
        "the arguments do not match get_element_properties's schema",
        "the arguments do not match get_element_properties's schema",
        "publish_report is not a tool of this context",
    ]
    assert idp_server.log().count("tool=get_element_properties") == calls_before
    # The refusal never blocks a real argument: no catalog tool takes a reserved field.
    assert not RESERVED_FIELDS & properties


def test_credential_refresh_required_updates_and_exchanges_again(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str
) -> None:
    """Item 5: the provider refuses to exchange an expired product credential (invalid_grant); the host
    asks the front end once (Keycloak updateToken), exchanges the updated token and finishes the binding."""
    asked: list[int] = []

    async def update_token() -> str:
        asked.append(1)
        return await asyncio.to_thread(idp.user_token, "alice")

    async def scenario() -> tuple[int, int]:
        host = _host(idp, idp_server)
        expired = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.expired"  # noqa: S105 - not a valid token
        user = Session(principal=alice_member, credential=expired, refresh=update_token)
        binding = await host.bind(user, project=PROJECT, purpose="ordinary_chat", session_id="host-refresh")
        result = await host.call(user, binding, "get_network_options", {"kind": "hydraulic"}, request_key="r1")
        assert not result.is_error
        await host.logout(user)
        return user.version, host.exchanges

    assert asyncio.run(scenario()) == (2, 1)
    assert asked == [1]


def test_logout_cancels_calls_in_flight_revokes_and_clears(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str, django_db_blocker: Any
) -> None:
    """Item 7: logout cancels the session's call in flight (the server stops its SQL and logs the
    cancellation with the task and run — item 14), revokes its bindings and clears its tokens."""
    run, execution_request = _demo_run(django_db_blocker)
    db = str(settings.DATABASES["default"]["NAME"])
    baseline = active_sleeps(db)

    async def scenario() -> tuple[bool, int, set[str], int]:
        host = _host(idp, idp_server)
        auth = await host.start()
        worker = Worker(auth.token_endpoint, WORKER_CLIENT_ID, WORKER_CLIENT_SECRET)
        service = await worker.session()
        execution = await host.bind(
            service,
            project=PROJECT,
            purpose="task_execution",
            session_id=run.lease_holder,
            task_id=run.task_id,
            run_id=run.pk,
            execution_request_id=execution_request,
        )
        slow = asyncio.create_task(
            host.call(service, execution, "test_slow_query", {"seconds": 30}, request_key="slow-1")
        )
        await asyncio.to_thread(_wait, lambda: active_sleeps(db) == baseline + 1, 20)
        revoked = await host.logout(service)
        try:
            await asyncio.wait_for(slow, 5)
            cancelled = False
        except asyncio.CancelledError:
            cancelled = True
        return cancelled, revoked, host.cached_principals(), len(host.bindings)

    cancelled, revoked, cached, bindings = asyncio.run(scenario())
    assert cancelled and revoked == 1
    assert WORKER_CLIENT_ID not in cached and bindings == 0
    _wait(lambda: active_sleeps(db) == baseline, 5)
    line = rf"mcp call cancelled backend_cancel_sent=True principal=\d+ project=\d+ task={run.task_id} run={run.pk} "
    _wait(lambda: re.search(line + "tool=test_slow_query", idp_server.log()) is not None, 5)


def test_a_renewed_investigation_context_keeps_its_report_revision(
    idp: IdentityProvider, idp_server: ServerProcess, alice_member: str, django_db_blocker: Any
) -> None:
    """Item 8: the worker's investigation (its own run, owned by the provider's worker identity) pins
    report revision 1 of its task (revision 2 is the newest). When the ten-minute context expires the
    host binds again for the same task and run with revision 1 and repeats the call: get_task_context
    still reads revision 1, not the newest."""
    run, execution_request = _worker_investigation(django_db_blocker)

    async def scenario() -> tuple[int | None, list[tuple[int, str, str]], int, int | None]:
        host = _host(idp, idp_server)
        auth = await host.start()
        worker = Worker(auth.token_endpoint, WORKER_CLIENT_ID, WORKER_CLIENT_SECRET)
        service = await worker.session()
        execution = await host.bind(
            service,
            project=PROJECT,
            purpose="task_execution",
            session_id=run.lease_holder,
            task_id=run.task_id,
            run_id=run.pk,
            execution_request_id=execution_request,
            report_revision=1,
        )
        pinned = execution.report_revision
        reads = []
        for n in range(2):
            if n:  # the context lapses (as after ten minutes): the server answers CONTEXT_EXPIRED
                await asyncio.to_thread(_expire_contexts, django_db_blocker, run.lease_holder)
            result = await host.call(
                service, execution, "get_task_context", {"section": "summary"}, request_key=f"rev-{n}"
            )
            assert not result.is_error, result.structured_content
            data = result.structured_content["data"]
            reads.append((data["report_revision"], data["revision_source"], data["page"]["text"]))
        renewals, kept = execution.renewals, execution.report_revision
        await host.logout(service)
        return pinned, reads, renewals, kept

    try:
        pinned, reads, renewals, kept = asyncio.run(scenario())
    finally:
        with django_db_blocker.unblock():
            Task.objects.filter(pk=run.task_id).delete()
    assert pinned == 1
    assert reads == [(1, "bound_to_context", "revision 1")] * 2
    assert renewals == 1 and kept == 1


def _worker_investigation(django_db_blocker: Any) -> tuple[TaskRun, str]:
    """A task of the demo project run by the provider's worker identity (``alice_member`` made it a
    member), leased for an hour, with report revisions 1 and 2."""
    with django_db_blocker.unblock():
        worker = Principal.objects.get(subject=WORKER_CLIENT_ID, memberships__project__slug=PROJECT)
        task = Task.objects.create(project=worker.memberships.get().project, title="host revision test")
        run = TaskRun.objects.create(
            task=task,
            sequence=1,
            owner=worker,
            lease_holder=f"host-rev-{task.pk}",
            lease_expires_at=timezone.now() + timedelta(hours=1),
        )
        request = ExecutionRequest.objects.create(run=run, request_id=f"host-rev-exec-{task.pk}")
        for revision in (1, 2):
            TaskReport.objects.create(task=task, revision=revision, sections={"summary": f"revision {revision}"})
        return run, request.request_id


def _expire_contexts(django_db_blocker: Any, session_id: str) -> None:
    with django_db_blocker.unblock():
        QueryContext.objects.filter(session_id=session_id, revoked_at__isnull=True).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )


def test_discovery_refuses_a_mismatching_resource(idp: IdentityProvider, idp_server: ServerProcess) -> None:
    # The same server under another name: its metadata names the resource it was configured with.
    host = AgentHost(f"http://localhost:{idp_server.port}/mcp", idp.issuer, AGENT_CLIENT_ID, AGENT_CLIENT_SECRET)
    with pytest.raises(DiscoveryRefused, match="another resource"):
        asyncio.run(host.start())


def test_another_configured_issuer_is_never_contacted(
    provider_factory: Callable[..., IdentityProvider], idp_server: ServerProcess
) -> None:
    """Item 1: a host whose credential belongs to another issuer stops at discovery (the server names only
    its own issuer) before any token request; test_agent_host_discovery.py shows nothing reaches the
    other issuer."""
    other = provider_factory()
    host = AgentHost(f"{idp_server.url}/mcp", other.issuer, AGENT_CLIENT_ID, AGENT_CLIENT_SECRET)
    with pytest.raises(DiscoveryRefused, match="does not name the configured issuer"):
        asyncio.run(host.catalog_token())
