"""The operator rules of the admin SSO backend (tjwater/oidc.py), in process.

This module also carries the ``django_db`` marker that makes pytest-django create the test database
for the interop tier: the end-to-end tests here share that database with the servers they start
through committed rows, so they cannot use the (rolled back) ``db`` fixture themselves.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings

from tjwater.oidc import claim_at, has_operator_role, operator_group


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"realm_access": {"roles": ["tjwater-operator", "other"]}}, True),
        ({"realm_access": {"roles": ["other"]}}, False),
        ({"realm_access": {"roles": "tjwater-operator"}}, True),
        ({"realm_access": {}}, False),
        ({"realm_access": "tjwater-operator"}, False),
        ({"roles": ["tjwater-operator"]}, False),
        ({}, False),
    ],
)
def test_operator_role_is_read_at_the_configured_claim_path(claims: dict[str, object], expected: bool) -> None:
    assert has_operator_role(claims) is expected


@override_settings(TJWATER_OIDC_ROLES_CLAIM="resource_access.tjwater-admin.roles", TJWATER_OIDC_OPERATOR_ROLE="ops")
def test_operator_role_path_and_name_are_settings() -> None:
    assert has_operator_role({"resource_access": {"tjwater-admin": {"roles": ["ops"]}}})
    assert not has_operator_role({"realm_access": {"roles": ["ops", "tjwater-operator"]}})
    assert claim_at({"a": {"b": 1}}, "a.b.c") is None


@pytest.mark.django_db
def test_operator_group_can_view_and_change_the_product_apps_and_nothing_else() -> None:
    group = operator_group()
    codenames = set(group.permissions.values_list("content_type__app_label", "codename"))
    assert ("contexts", "view_querycontext") in codenames
    assert ("contexts", "change_membership") in codenames
    assert not {app for app, _ in codenames} - {"contexts", "queries", "evidence"}
    assert not {code for _, code in codenames if code.startswith(("add_", "delete_"))}
    assert not group.permissions.filter(content_type__app_label="auth").exists()
    # Idempotent: a second login recomputes the same set.
    assert set(operator_group().permissions.all()) == set(Permission.objects.filter(group=group))
