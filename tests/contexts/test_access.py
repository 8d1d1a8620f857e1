"""``contexts.access``, the one access decision, driven as a matrix (issue 17): principal × purpose ×
membership state × run owner → the binding's answer, then × tool → the call's answer, through the real
services every edge calls (``context_create`` for the binding API, ``resolve_context`` + the access
checks for MCP and REST, the evidence readers for resources and the task tools).

The expectations below are the rules as the issue states them, written independently of the code:
- only a member binds; a task purpose binds only for the run's owner, and a refusal for anyone else is
  the very answer a task that does not exist gets;
- a call may use a tool only if the binding lists it and the live membership holds its permissions; a
  revoked membership refuses every call.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from contexts import access, selectors, services
from contexts.errors import ApplicationError
from contexts.models import Membership, Principal, Project
from contexts.onboarding import membership_grant, membership_revoke
from contexts.scope import QueryScope
from tests.contexts import factories

pytestmark = pytest.mark.django_db

CATALOG = {
    "get_element_properties": frozenset({"webgis.view"}),
    "list_scada_devices": frozenset({"scada.view"}),
    "get_task_evidence": frozenset(),
}
TASK_SCOPED = frozenset({"get_task_evidence"})
PERMISSIONS = {"full": list(factories.ALL_PERMISSIONS), "narrow": ["webgis.view"], "stranger": []}

PRINCIPALS = ("full", "narrow", "stranger")
PURPOSES = ("ordinary_chat", "task_execution", "task_reader")
MEMBERSHIP = ("active", "revoked_before_bind", "revoked_after_bind", "regranted_after_bind")
OWNERS = ("self", "other", "none")


def expected_bind(principal: str, purpose: str, membership: str, owner: str) -> str:
    if principal == "stranger" or membership == "revoked_before_bind":
        return "NOT_FOUND"
    if purpose != "ordinary_chat" and owner != "self":
        return "NOT_FOUND"
    return "ok"


def expected_call(principal: str, purpose: str, membership: str, tool: str) -> str:
    if membership == "revoked_after_bind":
        return "PERMISSION_DENIED"
    if membership == "regranted_after_bind":
        return "CONTEXT_REVOKED"  # the old handle never comes back with a new grant
    if tool in TASK_SCOPED:
        return "ok" if purpose != "ordinary_chat" else "TOOL_NOT_IN_CONTEXT"
    return "ok" if CATALOG[tool] <= frozenset(PERMISSIONS[principal]) else "TOOL_NOT_IN_CONTEXT"


@dataclass
class Case:
    project: Project
    caller: Principal
    membership: Membership | None
    run: factories.LeasedRun


def arrange(principal: str, owner: str) -> Case:
    project = factories.project()
    caller = factories.principal()
    membership = None if principal == "stranger" else factories.membership(caller, project, PERMISSIONS[principal])
    other = factories.principal()
    factories.membership(other, project)
    run_owner = {"self": caller, "other": other, "none": None}[owner]
    return Case(project, caller, membership, factories.leased_run(project, owner=run_owner))


def bind(case: Case, purpose: str, *, task_id: int | None = None) -> services.CreatedContext:
    run = case.run
    fields: dict[str, object] = {}
    session = "chat"
    if purpose == "task_execution":
        session = run.session_id
        fields = {
            "task_id": task_id or run.task.pk,
            "run_id": run.run.pk,
            "execution_request_id": run.execution_request.request_id,
        }
    elif purpose == "task_reader":
        session = "reader"
        fields = {"task_id": task_id or run.task.pk, "parent_session_id": run.session_id}
    return services.context_create(
        token=factories.token(case.caller),
        project_slug=case.project.slug,
        session_id=session,
        purpose=purpose,
        catalog=CATALOG,
        task_scoped=TASK_SCOPED,
        **fields,  # type: ignore[arg-type]
    )


def outcome(fn: object) -> tuple[str, str]:
    try:
        fn()  # type: ignore[operator]
    except ApplicationError as exc:
        return exc.code, exc.message
    return "ok", ""


def set_membership(case: Case, state: str) -> None:
    if case.membership is None:
        return
    who = case.caller
    actor = services.Actor.system(job="test")
    if state in ("revoked_after_bind", "regranted_after_bind", "revoked_before_bind"):
        membership_revoke(
            project_slug=case.project.slug, issuer=who.issuer, subject=who.subject, actor=actor, reason="matrix"
        )
    if state == "regranted_after_bind":
        membership_grant(
            project_slug=case.project.slug,
            issuer=who.issuer,
            subject=who.subject,
            permissions=list(case.membership.permissions),
            actor=actor,
        )


@pytest.mark.parametrize(
    ("principal", "purpose", "membership", "owner"), list(itertools.product(PRINCIPALS, PURPOSES, MEMBERSHIP, OWNERS))
)
def test_access_matrix(principal: str, purpose: str, membership: str, owner: str) -> None:
    case = arrange(principal, owner)
    if membership == "revoked_before_bind":
        set_membership(case, membership)
    created: list[services.CreatedContext] = []
    bound = outcome(lambda: created.append(bind(case, purpose)))
    assert bound[0] == expected_bind(principal, purpose, membership, owner)
    if bound[0] != "ok":
        # A refused task bind says nothing about whether the task exists: the same code and message as
        # for a task id that exists nowhere.
        if purpose != "ordinary_chat":
            assert bound == outcome(lambda: bind(case, purpose, task_id=2**31 - 1))
        return
    handle = created[0].handle
    if membership != "active":
        set_membership(case, membership)
    token = factories.token(case.caller)
    for tool, needs in CATALOG.items():
        answer = outcome(lambda tool=tool, needs=needs: selectors.resolve_context(  # type: ignore[misc]
            handle=handle, token=token, tool_name=tool, required_permissions=sorted(needs)
        ))  # fmt: skip
        assert answer[0] == expected_call(principal, purpose, membership, tool), tool


def test_may_call_and_require_call_agree_on_every_scope() -> None:
    """The hot path's boolean (``may_call``) and the refusal (``require_call``) are one decision."""
    tools = frozenset(CATALOG)
    for held, listed in itertools.product(
        [frozenset(p) for p in ((), ("webgis.view",), ("webgis.view", "scada.view"))],
        [frozenset(c) for n in range(len(tools) + 1) for c in itertools.combinations(sorted(tools), n)],
    ):
        scope = QueryScope(
            principal_id=1,
            issuer="i",
            subject="s",
            client_id="c",
            project_id=1,
            project_slug="p",
            permissions=held,
            purpose="ordinary_chat",
            allowed_tools=listed,
        )
        for tool, needs in CATALOG.items():
            allowed = access.may_call(scope, tool=tool, permissions=needs)
            assert allowed == (outcome(lambda: access.require_call(scope, tool=tool, permissions=needs))[0] == "ok")  # noqa: B023
            assert allowed == (tool in listed and needs <= held)


def test_a_membership_revoke_revokes_its_contexts_in_the_same_transaction() -> None:
    """Issue 17 item 3: call ok → revoke → refused → grant again → the old handle stays dead."""
    case = arrange("full", "self")
    handle = bind(case, "ordinary_chat").handle
    set_membership(case, "regranted_after_bind")
    context = services.QueryContext.objects.get(handle_hash=selectors.hash_handle(handle))
    assert context.revoked_at is not None and context.revoke_reason.startswith("membership revoked")
    assert context.state(timezone.now()) == "revoked"
    # A new bind after the grant works.
    assert bind(case, "ordinary_chat").handle != handle


@pytest.mark.parametrize(
    ("is_active", "is_staff", "expected"),
    [(True, True, True), (False, True, False), (True, False, False), (False, False, False)],
)
def test_is_operator_is_an_active_staff_user(is_active: bool, is_staff: bool, expected: bool) -> None:
    """The admin's one operator rule: active staff yes; inactive staff no; active non-staff no."""
    user = get_user_model()(username=f"u-{is_active}-{is_staff}", is_active=is_active, is_staff=is_staff)
    assert access.is_operator(user) is expected


def test_is_operator_refuses_the_anonymous_user() -> None:
    assert access.is_operator(AnonymousUser()) is False


def test_holds_permissions_and_require_permissions_agree() -> None:
    """The boolean an edge asks before sending a statement ahead and the refusal are one decision."""
    held = frozenset({"webgis.view"})
    scope = QueryScope(
        principal_id=1,
        issuer="i",
        subject="s",
        client_id="c",
        project_id=1,
        project_slug="p",
        permissions=held,
        purpose="ordinary_chat",
        allowed_tools=frozenset(CATALOG),
    )
    for needs in ((), ("webgis.view",), ("webgis.view", "scada.view"), ("scada.view",)):
        holds = access.holds_permissions(scope, needs)
        assert holds == (outcome(lambda: access.require_permissions(scope, needs))[0] == "ok")  # noqa: B023
        assert holds == set(needs).issubset(held)
