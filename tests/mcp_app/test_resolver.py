"""The scope resolver's development stand-in (TJWATER_DEV_PROJECT) and its refusal without one."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from contexts.errors import PermissionDenied, ProjectContextRequired
from contexts.models import Membership, Principal, Project
from contexts.tokens import VerifiedToken
from mcp_app.resolver import resolve_scope
from queries.registry import tools_by_name

pytestmark = pytest.mark.django_db

ISSUER = "http://127.0.0.1:8000/dev-issuer"


def verified(subject: str) -> VerifiedToken:
    return VerifiedToken(
        issuer=ISSUER, subject=subject, client_id="tjwater-agent-mcp", scopes=frozenset(), audience=(), expires_at=0
    )


def test_dev_project_scope_from_live_membership(settings: Any, django_assert_num_queries: Any) -> None:
    settings.TJWATER_DEV_PROJECT = "resolver-dev"
    project = Project.objects.create(slug="resolver-dev", name="Dev")
    principal = Principal.objects.create(issuer=ISSUER, subject="resolver-alice")
    Membership.objects.create(principal=principal, project=project, permissions=["webgis.view"])
    tool = tools_by_name()["list_elements"]
    with django_assert_num_queries(1):
        scope = resolve_scope(token=verified("resolver-alice"), arguments={"context_handle": "ignored"}, tool=tool)
    assert (scope.principal_id, scope.project_id, scope.permissions) == (
        principal.pk,
        project.pk,
        frozenset({"webgis.view"}),
    )
    Membership.objects.filter(principal=principal).update(revoked_at=timezone.now())
    with pytest.raises(PermissionDenied):
        resolve_scope(token=verified("resolver-alice"), arguments={}, tool=tool)


def test_unknown_principal_is_recorded_but_gets_nothing(settings: Any) -> None:
    settings.TJWATER_DEV_PROJECT = "resolver-dev"
    Project.objects.create(slug="resolver-dev", name="Dev")
    with pytest.raises(PermissionDenied):
        resolve_scope(token=verified("resolver-newcomer"), arguments={}, tool=tools_by_name()["list_elements"])
    assert Principal.objects.filter(issuer=ISSUER, subject="resolver-newcomer").exists()


def test_without_dev_project_a_handle_is_required(settings: Any) -> None:
    settings.TJWATER_DEV_PROJECT = ""
    with pytest.raises(ProjectContextRequired):
        resolve_scope(token=verified("resolver-alice"), arguments={}, tool=tools_by_name()["list_elements"])
