"""The scope resolver of the dispatch path: every call's ``QueryScope`` comes from a real context handle;
there is no other way to name a project. The checks on a bound handle are ``contexts.selectors.resolve_context``'s
(the hot path ``mcp_app.resolver.resolve_scope_async`` runs the same statement and ``check_context`` on
its own pool; tests/e2e/test_protocol.py drives it over HTTP); no handle is refused before any query."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from contexts.errors import ContextInvalid, PermissionDenied, ProjectContextRequired, ToolNotInContext
from contexts.grants import tool_catalog
from contexts.models import Membership, Principal, Project
from contexts.selectors import resolve_context
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from mcp_app.resolver import RESOURCE_HANDLE_META_KEY, RESOURCE_HANDLE_MISSING, resolve_scope_async

pytestmark = pytest.mark.django_db

CLIENT = "tjwater-agent-mcp"


def verified(subject: str, client: str = CLIENT) -> VerifiedToken:
    return VerifiedToken(
        issuer=settings.TJWATER_DEV_ISSUER_ID,
        subject=subject,
        client_id=client,
        scopes=frozenset({"mcp.query"}),
        audience=("tjwater-mcp",),
        expires_at=0,
    )


async def no_query(statement: object) -> object:
    raise AssertionError("a call without a handle must be refused before any query")


def resolve_without_query(token: VerifiedToken, handle: object, missing: str | None = None) -> object:
    return asyncio.run(resolve_scope_async(token=token, handle=handle, fetch=no_query, missing=missing))


def bind(subject: str, permissions: list[str]) -> tuple[str, Project, Principal]:
    project = Project.objects.create(slug=f"resolver-{subject}", name="Resolver")
    principal = Principal.objects.create(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=subject)
    Membership.objects.create(principal=principal, project=project, permissions=permissions)
    catalog, task_scoped = tool_catalog()
    created = context_create(
        token=verified(subject),
        project_slug=project.slug,
        session_id="chat-1",
        purpose="ordinary_chat",
        catalog=catalog,
        task_scoped=task_scoped,
    )
    return created.handle, project, principal


def test_scope_comes_from_the_handle_in_one_query(django_assert_num_queries: Any) -> None:
    handle, project, principal = bind("resolver-alice", ["webgis.view"])
    with django_assert_num_queries(1):
        scope = resolve_context(handle=handle, token=verified("resolver-alice"), tool_name="list_elements")
    assert (scope.principal_id, scope.project_id, scope.project_slug, scope.permissions, scope.purpose) == (
        principal.pk,
        project.pk,
        project.slug,
        frozenset({"webgis.view"}),
        "ordinary_chat",
    )
    assert "list_elements" in scope.allowed_tools
    # The membership is checked now, on every call.
    Membership.objects.filter(principal=principal).update(revoked_at=timezone.now())
    with pytest.raises(PermissionDenied):
        resolve_context(handle=handle, token=verified("resolver-alice"), tool_name="list_elements")


@pytest.mark.parametrize("arguments", [{}, {"context_handle": ""}, {"context_handle": None}])
def test_missing_handle_is_project_context_required(arguments: dict[str, Any]) -> None:
    with pytest.raises(ProjectContextRequired) as err:
        resolve_without_query(verified("resolver-alice"), arguments.get("context_handle"))
    assert err.value.code == "PROJECT_CONTEXT_REQUIRED"


def test_unknown_or_foreign_handle_is_context_invalid() -> None:
    handle, _, _ = bind("resolver-bob", ["webgis.view"])
    with pytest.raises(ContextInvalid):
        resolve_context(handle="x" * 43, token=verified("resolver-bob"), tool_name="list_elements")
    for stranger in (verified("resolver-mallory"), verified("resolver-bob", client="another-client")):
        with pytest.raises(ContextInvalid):
            resolve_context(handle=handle, token=stranger, tool_name="list_elements")


def test_tool_outside_the_binding_is_refused_as_not_in_context() -> None:
    # carol holds scada.view only: her binding lists none of the network tools. The dispatch path
    # answers this ToolNotInContext as an unknown tool (-32602; test_protocol proves it over HTTP).
    handle, _, _ = bind("resolver-carol", ["scada.view"])
    with pytest.raises(ToolNotInContext):
        resolve_context(handle=handle, token=verified("resolver-carol"), tool_name="list_elements")


def test_resource_scope_needs_the_handle_under_its_meta_key() -> None:
    handle, project, _ = bind("resolver-dave", ["webgis.view"])
    # Without a tool: the binding's tools are not checked (R-EVID-4, R-CTX-6).
    scope = resolve_context(handle=handle, token=verified("resolver-dave"))
    assert scope.project_id == project.pk
    meta = {"context_handle": handle}  # not the application key: no handle
    with pytest.raises(ProjectContextRequired) as err:
        resolve_without_query(verified("resolver-dave"), meta.get(RESOURCE_HANDLE_META_KEY), RESOURCE_HANDLE_MISSING)
    assert RESOURCE_HANDLE_META_KEY in err.value.message
    with pytest.raises(ContextInvalid):
        resolve_context(handle=handle, token=verified("resolver-erin"))
