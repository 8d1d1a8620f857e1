"""Context services at the service level: create, the R-CTX-3 per-call checks of ``resolve_context``
(the isolation matrix), R-CTX-4 reader tools, revocation and the background jobs."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from contexts import access, grants, selectors, services
from contexts.errors import (
    ApplicationError,
    ContextExpired,
    ContextInvalid,
    ContextRevoked,
    InvalidParameter,
    NotFound,
    PermissionDenied,
    ProjectContextRequired,
    RunNotCurrent,
    ToolNotInContext,
)
from contexts.models import ContextEvent, Membership, QueryContext, TaskReport, TaskRun
from contexts.tokens import VerifiedToken
from tests.contexts import factories
from tests.contexts.factories import CATALOG, FORBIDDEN_FOR_READERS, TASK_SCOPED, World

pytestmark = pytest.mark.django_db

ALPHA, BETA = "ctx-alpha", "ctx-beta"

OPERATOR = services.Actor.operator(username="op", user_id=1)


def create(token: VerifiedToken, project: str | None, purpose: str = "ordinary_chat", **kwargs: object):
    kwargs.setdefault("session_id", "chat-session-1")
    return services.context_create(
        token=token, project_slug=project, purpose=purpose, catalog=CATALOG, task_scoped=TASK_SCOPED, **kwargs
    )


def resolve(handle: str, token: VerifiedToken, tool: str | None = "get_element_properties", perms=("webgis.view",)):
    return selectors.resolve_context(handle=handle, token=token, tool_name=tool, required_permissions=perms)


def refusal(exc_info: pytest.ExceptionInfo[ApplicationError]) -> dict[str, object]:
    return exc_info.value.as_dict()


# --- create -------------------------------------------------------------------------------------------


def test_ordinary_chat_binds_the_tokens_principal_and_returns_the_handle_once(world: World) -> None:
    created = create(factories.token(world.alice), ALPHA)

    assert len(created.handle) >= 43  # 32 random bytes, URL-safe base64
    row = QueryContext.objects.get(pk=created.context_id)
    assert row.handle_hash == hashlib.sha256(created.handle.encode()).hexdigest()
    assert created.handle not in {row.handle_hash, row.session_id, row.client_id}
    assert (row.principal_id, row.project_id, row.client_id) == (world.alice.pk, world.alpha.pk, factories.HOST_CLIENT)
    assert created.tools == sorted(
        set(CATALOG) - TASK_SCOPED - {"publish_report", "approve_plan", "control_device_valve"}
    )
    assert row.allowed_tools == created.tools
    assert created.expires_at - row.created_at == timedelta(seconds=600)
    assert ContextEvent.objects.filter(context_id=row.pk, action="created").count() == 1


def test_handles_are_unique_random_values(world: World) -> None:
    handles = {create(factories.token(world.alice), ALPHA).handle for _ in range(5)}
    assert len(handles) == 5


@pytest.mark.parametrize("project", [None, ""])
def test_personal_session_gets_project_context_required(world: World, project: str | None) -> None:
    with pytest.raises(ProjectContextRequired) as exc_info:
        create(factories.token(world.alice), project)
    assert refusal(exc_info)["code"] == "PROJECT_CONTEXT_REQUIRED"
    assert QueryContext.objects.count() == 0


def test_carol_gets_nothing_and_not_a_member_equals_no_such_project(world: World) -> None:
    with pytest.raises(NotFound) as not_member:
        create(factories.token(world.carol), ALPHA)
    with pytest.raises(NotFound) as no_project:
        create(factories.token(world.carol), "no-such-project")
    stranger = factories.token(world.carol)
    unknown_principal = VerifiedToken(
        issuer=stranger.issuer, subject="nobody", client_id=stranger.client_id, scopes=stranger.scopes,
        audience=stranger.audience, expires_at=stranger.expires_at,
    )  # fmt: skip
    with pytest.raises(NotFound) as unknown:
        create(unknown_principal, ALPHA)
    assert refusal(not_member) == refusal(no_project) == refusal(unknown)
    assert QueryContext.objects.count() == 0


def test_revoked_membership_cannot_bind(world: World) -> None:
    Membership.objects.filter(pk=world.alice_alpha.pk).update(revoked_at=timezone.now())
    with pytest.raises(NotFound):
        create(factories.token(world.alice), ALPHA)


def test_tools_follow_the_membership_permissions(world: World) -> None:
    created = create(factories.token(world.alice), BETA)  # alice has only webgis.view in beta
    assert created.tools == ["delegate_subtask", "get_element_properties", "run_shell"]


def test_task_execution_binds_the_current_leased_run(world: World) -> None:
    leased = world.run_alpha
    created = create(
        factories.token(world.alice),
        ALPHA,
        "task_execution",
        session_id=leased.session_id,
        task_id=leased.task.pk,
        run_id=leased.run.pk,
        execution_request_id=leased.execution_request.request_id,
    )
    row = QueryContext.objects.get(pk=created.context_id)
    assert (row.task_id, row.run_id, row.execution_request_id) == (
        leased.task.pk,
        leased.run.pk,
        leased.execution_request.pk,
    )
    assert set(TASK_SCOPED) <= set(created.tools)
    assert {"publish_report", "approve_plan", "control_device_valve"}.isdisjoint(created.tools)


def exec_kwargs(leased: factories.LeasedRun, **overrides: object) -> dict[str, object]:
    return {
        "session_id": leased.session_id,
        "task_id": leased.task.pk,
        "run_id": leased.run.pk,
        "execution_request_id": leased.execution_request.request_id,
        **overrides,
    }


def test_a_task_binding_pins_a_report_revision_of_its_task(world: World) -> None:
    """Issue 23 item 8: ``report_revision`` is validated against the bound task and stored; without it
    the task's newest revision is pinned; ordinary chat may not name one."""
    leased = world.run_alpha
    for revision in (1, 2):
        TaskReport.objects.create(task=leased.task, revision=revision, sections={"summary": f"r{revision}"})
    TaskReport.objects.create(task=world.run_beta.task, revision=7, sections={})
    alice = factories.token(world.alice)

    pinned = create(alice, ALPHA, "task_execution", **exec_kwargs(leased, report_revision=1))
    assert pinned.report_revision == 1
    assert QueryContext.objects.get(pk=pinned.context_id).report_revision == 1
    newest = create(alice, ALPHA, "task_execution", **exec_kwargs(leased))
    assert newest.report_revision == 2
    assert QueryContext.objects.get(pk=newest.context_id).report_revision == 2
    # A revision of another task (or none at all) is "not found", naming the field.
    for other in (7, 3):
        with pytest.raises(NotFound) as exc_info:
            create(alice, ALPHA, "task_execution", **exec_kwargs(leased, report_revision=other))
        assert exc_info.value.details == {"field": "report_revision"}
    with pytest.raises(InvalidParameter) as exc_info:
        create(alice, ALPHA, report_revision=1)
    assert exc_info.value.details["unexpected"] == ["report_revision"]
    assert create(alice, ALPHA).report_revision is None


def test_task_contexts_only_for_the_host_client(world: World) -> None:
    with pytest.raises(PermissionDenied):
        create(
            factories.token(world.alice, client_id="other-client"),
            ALPHA,
            "task_execution",
            **exec_kwargs(world.run_alpha),
        )


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"session_id": "someone-else"}, RunNotCurrent),
        ({"execution_request_id": "no-such-request"}, NotFound),
        ({"task_id": 10**9}, NotFound),
        ({"run_id": 10**9}, NotFound),
    ],
)
def test_task_execution_refusals(world: World, overrides: dict[str, object], error: type[ApplicationError]) -> None:
    with pytest.raises(error):
        create(factories.token(world.alice), ALPHA, "task_execution", **exec_kwargs(world.run_alpha, **overrides))


def test_task_execution_refuses_another_projects_task_and_request(world: World) -> None:
    # bob's run lives in beta; alice (a beta member too) binds alpha but names beta's task → not found.
    with pytest.raises(NotFound):
        create(factories.token(world.alice), ALPHA, "task_execution", **exec_kwargs(world.run_beta))
    # alpha's task with beta's execution request → not found.
    kwargs = exec_kwargs(world.run_alpha, execution_request_id=world.run_beta.execution_request.request_id)
    with pytest.raises(NotFound):
        create(factories.token(world.alice), ALPHA, "task_execution", **kwargs)


def test_task_execution_refuses_an_expired_lease_and_a_superseded_run(world: World) -> None:
    leased = world.run_alpha
    TaskRun.objects.filter(pk=leased.run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(RunNotCurrent):
        create(factories.token(world.alice), ALPHA, "task_execution", **exec_kwargs(leased))
    factories.supersede(leased.run, session_id=leased.session_id)
    with pytest.raises(RunNotCurrent):
        create(factories.token(world.alice), ALPHA, "task_execution", **exec_kwargs(leased))


@pytest.mark.parametrize(
    ("purpose", "kwargs", "field"),
    [
        ("ordinary_chat", {"task_id": 1}, "unexpected"),
        ("task_execution", {"task_id": 1, "run_id": 1}, "missing"),
        ("task_reader", {"task_id": 1}, "missing"),
        ("task_reader", {"task_id": 1, "parent_session_id": "p", "execution_request_id": "x"}, "unexpected"),
    ],
)
def test_purpose_fields_are_exact(world: World, purpose: str, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameter) as exc_info:
        create(factories.token(world.alice), ALPHA, purpose, **kwargs)
    assert exc_info.value.details[field]


def test_task_reader_binds_the_parent_sessions_current_run_with_reader_tools_only(world: World) -> None:
    leased = world.run_alpha
    created = create(
        factories.token(world.alice),
        ALPHA,
        "task_reader",
        session_id="reader-session",
        task_id=leased.task.pk,
        parent_session_id=leased.session_id,
    )
    row = QueryContext.objects.get(pk=created.context_id)
    assert (row.run_id, row.parent_session_id, row.execution_request_id) == (leased.run.pk, leased.session_id, None)
    assert FORBIDDEN_FOR_READERS.isdisjoint(created.tools)
    assert created.tools == sorted(
        ["get_element_properties", "list_scada_devices", "query_model_baseline_field", "query_element_history",
         "list_sensor_placement_runs", "get_task_context", "get_task_evidence"]
    )  # fmt: skip


def test_task_reader_refused_when_parent_does_not_hold_the_lease(world: World) -> None:
    leased = world.run_alpha
    with pytest.raises(RunNotCurrent):
        create(
            factories.token(world.alice),
            ALPHA,
            "task_reader",
            session_id="reader-session",
            task_id=leased.task.pk,
            parent_session_id="not-the-parent",
        )


# --- R-CTX-4 --------------------------------------------------------------------------------------------


def test_reader_never_gets_publishing_approval_device_shell_or_delegation() -> None:
    every_permission = {p for required in CATALOG.values() for p in required}
    reader = access.tools_for_binding(
        catalog=CATALOG, permissions=every_permission, purpose="task_reader", task_scoped=TASK_SCOPED
    )
    executor = access.tools_for_binding(
        catalog=CATALOG, permissions=every_permission, purpose="task_execution", task_scoped=TASK_SCOPED
    )
    assert FORBIDDEN_FOR_READERS.isdisjoint(reader)
    assert FORBIDDEN_FOR_READERS <= set(executor)  # the rule is about readers, not a catalog filter
    assert set(reader) == set(CATALOG) - FORBIDDEN_FOR_READERS


def test_ordinary_chat_never_gets_task_scoped_tools_and_unknown_purpose_is_refused() -> None:
    chat = access.tools_for_binding(
        catalog=CATALOG, permissions={"webgis.view"}, purpose="ordinary_chat", task_scoped=TASK_SCOPED
    )
    assert chat == ["delegate_subtask", "get_element_properties", "run_shell"]
    with pytest.raises(InvalidParameter):
        access.tools_for_binding(catalog=CATALOG, permissions=set(), purpose="admin", task_scoped=TASK_SCOPED)


def test_real_registry_catalog_gives_readers_only_reader_safe_tools(settings: object) -> None:
    catalog, task_scoped = grants.tool_catalog()
    every_permission = {p for required in catalog.values() for p in required}
    reader = access.tools_for_binding(
        catalog=catalog, permissions=every_permission, purpose="task_reader", task_scoped=task_scoped
    )
    assert reader
    assert all(catalog[name] <= access.READER_QUERY_PERMISSIONS for name in reader)


# --- resolve: the isolation matrix (R-CTX-3) ----------------------------------------------------------


def test_resolve_builds_the_scope_from_the_binding(world: World) -> None:
    created = create(factories.token(world.alice), ALPHA)
    scope = resolve(created.handle, factories.token(world.alice))
    assert (scope.principal_id, scope.project_id, scope.project_slug) == (world.alice.pk, world.alpha.pk, ALPHA)
    assert (scope.purpose, scope.context_id, scope.session_id) == (
        "ordinary_chat",
        created.context_id,
        "chat-session-1",
    )
    assert scope.permissions == frozenset(factories.ALL_PERMISSIONS)
    assert scope.allowed_tools == frozenset(created.tools)
    assert (scope.task_id, scope.run_id) == (None, None)


def test_resolve_is_one_query(world: World, django_assert_num_queries) -> None:
    leased = world.run_alpha
    token = factories.token(world.alice)
    chat = create(token, ALPHA)
    task = create(token, ALPHA, "task_execution", **exec_kwargs(leased))
    with django_assert_num_queries(1):
        resolve(chat.handle, token)
    with django_assert_num_queries(1):
        scope = resolve(task.handle, token)
    assert (scope.task_id, scope.run_id) == (leased.task.pk, leased.run.pk)


def test_alice_and_bob_each_see_only_their_own_project(world: World) -> None:
    alice_handle = create(factories.token(world.alice), ALPHA).handle
    bob_handle = create(factories.token(world.bob), BETA).handle
    assert resolve(alice_handle, factories.token(world.alice)).project_id == world.alpha.pk
    assert resolve(bob_handle, factories.token(world.bob)).project_id == world.beta.pk


@pytest.mark.parametrize(
    "replayer",
    ["bob", "carol", "alice_other_client", "alice_other_issuer"],
)
def test_a_replayed_handle_gets_the_same_answer_as_an_unknown_one(world: World, replayer: str) -> None:
    handle = create(factories.token(world.alice), ALPHA).handle
    alice = factories.token(world.alice)
    tokens = {
        "bob": factories.token(world.bob),
        "carol": factories.token(world.carol),
        "alice_other_client": factories.token(world.alice, client_id="another-client"),
        "alice_other_issuer": VerifiedToken(
            issuer="https://evil.example/realms/x", subject=alice.subject, client_id=alice.client_id,
            scopes=alice.scopes, audience=alice.audience, expires_at=alice.expires_at,
        ),
    }  # fmt: skip
    with pytest.raises(ContextInvalid) as replayed:
        resolve(handle, tokens[replayer])
    with pytest.raises(ContextInvalid) as unknown:
        resolve("x" * 43, tokens[replayer])
    assert refusal(replayed) == refusal(unknown)


@pytest.mark.parametrize("handle", ["", "a" * 129])
def test_malformed_handles_are_invalid_without_a_query(world: World, handle: str, django_assert_num_queries) -> None:
    with django_assert_num_queries(0), pytest.raises(ContextInvalid):
        resolve(handle, factories.token(world.alice))


def test_alice_in_two_projects_cannot_reach_the_other_project_with_one_handle(world: World) -> None:
    # alice is a member of beta too; her alpha handle still only ever yields alpha.
    handle = create(factories.token(world.alice), ALPHA).handle
    scope = resolve(handle, factories.token(world.alice))
    assert scope.project_id == world.alpha.pk != world.beta.pk


def test_revoked_and_expired_handles_are_refused(world: World) -> None:
    token = factories.token(world.alice)
    revoked = create(token, ALPHA)
    services.context_revoke(context_ids=[revoked.context_id], actor=OPERATOR, reason="test")
    with pytest.raises(ContextRevoked):
        resolve(revoked.handle, token)
    expiring = create(token, ALPHA)
    with pytest.raises(ContextExpired):
        selectors.resolve_context(
            handle=expiring.handle,
            token=token,
            tool_name="get_element_properties",
            required_permissions=["webgis.view"],
            now=expiring.expires_at,
        )


def test_membership_removal_and_permission_loss_take_effect_on_the_next_call(world: World) -> None:
    token = factories.token(world.alice)
    handle = create(token, ALPHA).handle
    Membership.objects.filter(pk=world.alice_alpha.pk).update(permissions=["webgis.view"])
    resolve(handle, token)
    with pytest.raises(PermissionDenied) as lost:
        resolve(handle, token, "list_scada_devices", ("scada.view",))
    assert lost.value.details == {"missing_permissions": ["scada.view"]}
    Membership.objects.filter(pk=world.alice_alpha.pk).update(revoked_at=timezone.now())
    with pytest.raises(PermissionDenied):
        resolve(handle, token)
    Membership.objects.filter(pk=world.alice_alpha.pk).delete()
    with pytest.raises(ContextInvalid):
        resolve(handle, token)


def test_tools_outside_the_binding_and_wider_permissions_never_widen_it(world: World) -> None:
    token = factories.token(world.alice)
    handle = create(token, BETA).handle  # webgis.view only
    with pytest.raises(ToolNotInContext):
        resolve(handle, token, "list_scada_devices", ("scada.view",))
    Membership.objects.filter(pk=world.alice_beta.pk).update(permissions=factories.ALL_PERMISSIONS)
    wider = factories.token(world.alice, scopes=("mcp.query", "mcp.context.bind", "mcp.catalog.read"))
    with pytest.raises(ToolNotInContext):
        resolve(handle, wider, "list_scada_devices", ("scada.view",))


def test_resources_read_skips_only_the_tool_check(world: World) -> None:
    token = factories.token(world.alice)
    handle = create(token, BETA).handle
    assert resolve(handle, token, None, ()).project_id == world.beta.pk
    with pytest.raises(PermissionDenied):
        resolve(handle, token, None, ("scada.view",))


def test_task_execution_stops_when_the_run_is_superseded(world: World) -> None:
    token = factories.token(world.alice)
    created = create(token, ALPHA, "task_execution", **exec_kwargs(world.run_alpha))
    factories.supersede(world.run_alpha.run, session_id=world.run_alpha.session_id)  # even the same session
    with pytest.raises(RunNotCurrent):
        resolve(created.handle, token)


def test_task_execution_stops_when_the_lease_moves_or_lapses(world: World) -> None:
    token = factories.token(world.alice)
    created = create(token, ALPHA, "task_execution", **exec_kwargs(world.run_alpha))
    run = world.run_alpha.run
    TaskRun.objects.filter(pk=run.pk).update(lease_holder="another-session")
    with pytest.raises(RunNotCurrent):
        resolve(created.handle, token)
    TaskRun.objects.filter(pk=run.pk).update(
        lease_holder=world.run_alpha.session_id, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(RunNotCurrent):
        resolve(created.handle, token)


def test_task_reader_follows_the_parent_sessions_lease(world: World) -> None:
    token = factories.token(world.alice)
    leased = world.run_alpha
    created = create(
        token, ALPHA, "task_reader", session_id="reader", task_id=leased.task.pk, parent_session_id=leased.session_id
    )
    scope = resolve(created.handle, token, "get_task_context", ())
    assert (scope.purpose, scope.run_id, scope.execution_request_id) == ("task_reader", leased.run.pk, None)
    with pytest.raises(ToolNotInContext):
        resolve(created.handle, token, "publish_report", ())
    TaskRun.objects.filter(pk=leased.run.pk).update(lease_holder="another-parent")
    with pytest.raises(RunNotCurrent):
        resolve(created.handle, token, "get_task_context", ())


# --- revoke ------------------------------------------------------------------------------------------


def test_context_revoke_many_writes_one_audit_row_each_and_is_idempotent(world: World) -> None:
    token = factories.token(world.alice)
    ids = [create(token, ALPHA).context_id for _ in range(3)]
    assert sorted(services.context_revoke(context_ids=ids, actor=OPERATOR, reason="leaked")) == sorted(ids)
    assert services.context_revoke(context_ids=ids, actor=OPERATOR, reason="again") == []
    rows = QueryContext.objects.filter(pk__in=ids)
    assert {(r.revoked_by, r.revoke_reason) for r in rows} == {("operator:op#1", "leaked")}
    events = ContextEvent.objects.filter(context_id__in=ids, action="revoked")
    assert sorted(e.context_id for e in events) == sorted(ids)
    assert {e.actor for e in events} == {"operator:op#1"}


def test_context_revoke_requires_a_reason(world: World) -> None:
    created = create(factories.token(world.alice), ALPHA)
    with pytest.raises(InvalidParameter):
        services.context_revoke(context_ids=[created.context_id], actor=OPERATOR, reason="  ")
    assert QueryContext.objects.get(pk=created.context_id).revoked_at is None


def test_only_the_owner_may_delete_and_others_get_not_found(world: World) -> None:
    alice = factories.token(world.alice)
    created = create(alice, ALPHA)
    with pytest.raises(NotFound) as by_bob:
        services.context_revoke_owned(handle=created.handle, token=factories.token(world.bob))
    with pytest.raises(NotFound) as other_client:
        services.context_revoke_owned(handle=created.handle, token=factories.token(world.alice, client_id="c2"))
    with pytest.raises(NotFound) as unknown:
        services.context_revoke_owned(handle="y" * 43, token=alice)
    assert refusal(by_bob) == refusal(other_client) == refusal(unknown)
    assert QueryContext.objects.get(pk=created.context_id).revoked_at is None
    services.context_revoke_owned(handle=created.handle, token=alice)
    services.context_revoke_owned(handle=created.handle, token=alice)  # idempotent
    row = QueryContext.objects.get(pk=created.context_id)
    assert row.revoked_by == f"principal:{world.alice.pk}/{factories.HOST_CLIENT}"
    with pytest.raises(ContextRevoked):
        resolve(created.handle, alice)


# --- background ----------------------------------------------------------------------------------------


def test_revoke_stale_revokes_superseded_lapsed_moved_and_removed_and_nothing_else(world: World) -> None:
    alice, bob = factories.token(world.alice), factories.token(world.bob)
    superseded = create(alice, ALPHA, "task_execution", **exec_kwargs(world.run_alpha))
    moved = create(bob, BETA, "task_execution", **exec_kwargs(world.run_beta))
    third = factories.leased_run(world.alpha, owner=world.alice, session_id="third-session")
    lapsed = create(
        alice, ALPHA, "task_reader", session_id="r", task_id=third.task.pk, parent_session_id=third.session_id
    )
    removed = create(alice, BETA)
    healthy = create(bob, BETA)

    factories.supersede(world.run_alpha.run)
    TaskRun.objects.filter(pk=world.run_beta.run.pk).update(lease_holder="elsewhere")
    TaskRun.objects.filter(pk=third.run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Membership.objects.filter(pk=world.alice_beta.pk).update(revoked_at=timezone.now())

    result = services.contexts_revoke_stale()
    assert (result.run_superseded, result.lease_lapsed, result.membership_removed) == (1, 2, 1)
    revoked = dict(QueryContext.objects.filter(revoked_at__isnull=False).values_list("pk", "revoke_reason"))
    assert revoked == {
        superseded.context_id: "run superseded",
        moved.context_id: "lease lapsed or moved",
        lapsed.context_id: "lease lapsed or moved",
        removed.context_id: "membership removed",
    }
    assert QueryContext.objects.get(pk=healthy.context_id).revoked_at is None
    assert ContextEvent.objects.filter(action="revoked", actor="system:contexts.revoke_stale").count() == 4
    assert services.contexts_revoke_stale().total == 0


def test_purge_deletes_only_past_retention_and_keeps_the_audit_trail(world: World) -> None:
    token = factories.token(world.alice)
    now = timezone.now()
    old_expired = create(token, ALPHA)
    old_revoked = create(token, ALPHA)
    recent_revoked = create(token, ALPHA)
    active = create(token, ALPHA)
    QueryContext.objects.filter(pk=old_expired.context_id).update(expires_at=now - timedelta(days=8))
    services.context_revoke(
        context_ids=[old_revoked.context_id], actor=OPERATOR, reason="old", now=now - timedelta(days=8)
    )
    services.context_revoke(context_ids=[recent_revoked.context_id], actor=OPERATOR, reason="new", now=now)

    assert services.contexts_purge(retention=timedelta(days=7), batch_size=1) == 2
    assert set(QueryContext.objects.values_list("pk", flat=True)) == {recent_revoked.context_id, active.context_id}
    assert ContextEvent.objects.filter(context_id=old_revoked.context_id).count() == 2
    assert services.contexts_purge(retention=timedelta(days=7)) == 0
