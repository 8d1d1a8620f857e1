"""Django admin for contexts: list/filter without handles, and the operator's Revoke action."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from contexts import selectors, services
from contexts.admin import actors_as_people
from contexts.errors import ContextRevoked
from contexts.models import ContextEvent, Membership, QueryContext
from tests.contexts import factories
from tests.contexts.factories import CATALOG, World

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:contexts_querycontext_changelist"


@pytest.fixture
def operator_client(db: None) -> Client:
    operator = get_user_model().objects.create_user("operator-1", password="pw-not-used", is_staff=True)
    client = Client()
    client.force_login(operator)
    return client


def bind(world: World, who: str = "alice", project: str = "ctx-alpha") -> services.CreatedContext:
    principal = getattr(world, who)
    return services.context_create(
        token=factories.token(principal), project_slug=project, session_id="s", purpose="ordinary_chat", catalog=CATALOG
    )


def test_the_changelist_never_shows_a_handle_or_its_full_hash(operator_client: Client, world: World) -> None:
    created = bind(world)
    row = QueryContext.objects.get(pk=created.context_id)
    page = operator_client.get(reverse(CHANGELIST)).content.decode()
    assert row.handle_prefix in page
    assert created.handle not in page
    assert row.handle_hash not in page
    detail = operator_client.get(reverse("admin:contexts_querycontext_change", args=[row.pk])).content.decode()
    assert created.handle not in detail and row.handle_hash not in detail


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=active", {"alice-active", "bob-active"}),
        ("state=revoked", {"alice-revoked"}),
        ("purpose=ordinary_chat&state=active", {"alice-active", "bob-active"}),
        ("project__id__exact={beta}", {"bob-active"}),
        ("principal__id__exact={alice}&state=active", {"alice-active"}),
    ],
)
def test_filters(operator_client: Client, world: World, query: str, expected: set[str]) -> None:
    contexts = {
        "alice-active": bind(world),
        "alice-revoked": bind(world),
        "bob-active": bind(world, "bob", "ctx-beta"),
    }
    services.context_revoke(
        context_ids=[contexts["alice-revoked"].context_id], actor=services.Actor.system(job="t"), reason="t"
    )
    url = reverse(CHANGELIST) + "?" + query.format(beta=world.beta.pk, alice=world.alice.pk)
    response = operator_client.get(url)
    assert response.status_code == 200
    # This world's projects only: committed contexts of end-to-end suites that ran earlier in the session
    # (their servers' bindings) are on the same changelist.
    listed = response.context["cl"].result_list.filter(project__in=[world.alpha, world.beta])
    shown = set(listed.values_list("pk", flat=True))
    assert shown == {contexts[name].context_id for name in expected}


def test_revoke_action_asks_for_a_reason_then_revokes_with_the_operator(operator_client: Client, world: World) -> None:
    first, second, untouched = bind(world), bind(world), bind(world)
    ids = [str(first.context_id), str(second.context_id)]
    form = {"action": "revoke_contexts", "_selected_action": ids}

    confirm = operator_client.post(reverse(CHANGELIST), form)
    assert confirm.status_code == 200
    assert b"reason" in confirm.content
    assert QueryContext.objects.filter(revoked_at__isnull=False).count() == 0

    done = operator_client.post(reverse(CHANGELIST), {**form, "confirm": "yes", "reason": "laptop stolen"})
    assert done.status_code == 302
    revoked = QueryContext.objects.filter(pk__in=ids)
    assert {(r.revoke_reason, r.revoked_by.split("#")[0]) for r in revoked} == {
        ("laptop stolen", "operator:operator-1")
    }
    assert ContextEvent.objects.filter(action="revoked", context_id__in=ids).count() == 2
    assert QueryContext.objects.get(pk=untouched.context_id).revoked_at is None

    with pytest.raises(ContextRevoked):
        selectors.resolve_context(
            handle=first.handle, token=factories.token(world.alice), tool_name=None, required_permissions=[]
        )


def test_a_context_of_a_revoked_membership_is_not_listed_as_active(operator_client: Client, world: World) -> None:
    """Every call re-checks the membership, so such a context no longer works: the list says so even for a
    binding whose own revoked_at was not set."""
    created = bind(world)
    Membership.objects.filter(pk=world.alice_alpha.pk).update(revoked_at=timezone.now())
    listed = operator_client.get(reverse(CHANGELIST) + "?state=revoked")
    assert [row.pk for row in listed.context["cl"].result_list] == [created.context_id]
    assert "revoked (membership)" in listed.content.decode()
    active = operator_client.get(reverse(CHANGELIST) + "?state=active")
    assert created.context_id not in active.context["cl"].result_list.values_list("pk", flat=True)


def test_the_audit_trail_names_people_not_ids(world: World) -> None:
    user = get_user_model().objects.create_user("a11ce-sub", first_name="Alice", last_name="Operator")
    world.alice.display_name = "Alice"
    world.alice.save()
    labels = [
        services.Actor.operator(username="a11ce-sub", user_id=user.pk).label,
        services.Actor.principal(principal_id=world.alice.pk, client_id="tjwater-agent-mcp").label,
        services.Actor.system(job="revoke_stale").label,
        "operator:gone#999999",
    ]
    assert actors_as_people(labels) == {
        labels[0]: "Alice Operator (a11ce-sub) · operator",
        labels[1]: "Alice (ctx-alice) via tjwater-agent-mcp",
        labels[2]: "revoke_stale (system job)",
        labels[3]: "operator:gone#999999",  # as recorded when the user is gone
    }


def test_revoke_without_a_reason_changes_nothing(operator_client: Client, world: World) -> None:
    created = bind(world)
    form = {"action": "revoke_contexts", "_selected_action": [created.context_id], "confirm": "yes", "reason": ""}
    response = operator_client.post(reverse(CHANGELIST), form)
    assert response.status_code == 200  # the form again, with the error
    assert QueryContext.objects.get(pk=created.context_id).revoked_at is None


def test_non_staff_users_cannot_see_contexts(world: World) -> None:
    user = get_user_model().objects.create_user("someone", password="pw-not-used")
    client = Client()
    client.force_login(user)
    assert client.get(reverse(CHANGELIST)).status_code == 302  # to the admin login


@pytest.mark.parametrize(
    "model",
    [
        "project",
        "principal",
        "membership",
        "task",
        "taskrun",
        "executionrequest",
        "taskreport",
        "contextevent",
        "accessevent",
        "projectcompute",
    ],
)
def test_every_contexts_model_is_browsable(world: World, model: str) -> None:
    admin_user = get_user_model().objects.create_superuser("root", password="pw-not-used")
    client = Client()
    client.force_login(admin_user)
    assert client.get(reverse(f"admin:contexts_{model}_changelist")).status_code == 200


def _admin_user(kind: str) -> Client:
    """A signed-in operator (staff in the operator group the OIDC backend assigns) or a superuser."""
    from tjwater.oidc import operator_group

    if kind == "superuser":
        user = get_user_model().objects.create_superuser("root-ro", password="pw-not-used")
    else:
        user = get_user_model().objects.create_user("operator-ro", password="pw-not-used", is_staff=True)
        user.groups.add(operator_group())
    client = Client()
    client.force_login(user)
    return client


READ_ONLY_FORMS = {
    "project": lambda w: (w.alpha, {"slug": "renamed", "name": "Renamed"}),
    "principal": lambda w: (w.alice, {"issuer": w.bob.issuer, "subject": "hijacked", "display_name": "x"}),
    "membership": lambda w: (
        w.alice_alpha,
        {"principal": w.carol.pk, "project": w.beta.pk, "permissions": "network.view"},
    ),
}


@pytest.mark.parametrize("kind", ["operator", "superuser"])
@pytest.mark.parametrize("model", ["project", "principal", "membership"])
def test_projects_principals_and_memberships_cannot_be_changed_in_admin(world: World, kind: str, model: str) -> None:
    client = _admin_user(kind)
    obj, data = READ_ONLY_FORMS[model](world)
    before = {field: getattr(obj, field) for field in ("pk", *(k for k in data if k not in ("principal", "project")))}
    change_url = reverse(f"admin:contexts_{model}_change", args=[obj.pk])
    add_url = reverse(f"admin:contexts_{model}_add")

    changelist = client.get(reverse(f"admin:contexts_{model}_changelist"))
    assert changelist.status_code == 200
    assert add_url not in changelist.content.decode()
    view = client.get(change_url)
    assert view.status_code == 200  # browsable, without a save button
    assert b'name="_save"' not in view.content
    assert client.get(add_url).status_code == 403
    assert client.post(add_url, data).status_code == 403
    assert client.post(change_url, data).status_code == 403
    assert client.post(reverse(f"admin:contexts_{model}_delete", args=[obj.pk]), {"post": "yes"}).status_code == 403
    bulk = client.post(
        reverse(f"admin:contexts_{model}_changelist"),
        {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)

    obj.refresh_from_db()
    assert {field: getattr(obj, field) for field in before} == before
    if model == "membership":
        assert (obj.principal_id, obj.project_id) == (world.alice.pk, world.alpha.pk)
