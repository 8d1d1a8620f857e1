"""Onboarding in admin (issue 13): operators create projects and grant, change and revoke memberships
through the audited services — each change leaves an AccessEvent naming the operator — while the rows
stay read-only; a non-staff user cannot reach the forms."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from contexts.models import AccessEvent, Membership, Principal, Project
from tests.contexts import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client() -> Client:
    user = get_user_model().objects.create_user("op-onboard", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_create_a_project_through_the_form(operator_client: Client) -> None:
    url = reverse("admin:contexts_project_create")
    assert operator_client.get(url).status_code == 200
    response = operator_client.post(url, {"slug": "adm-utility", "name": "Admin utility"})
    assert response.status_code == 302
    project = Project.objects.get(slug="adm-utility")
    event = AccessEvent.objects.get(project_id=project.pk)
    assert (event.action, event.actor) == ("project_created", f"operator:op-onboard#{event.actor.split('#')[1]}")
    # A taken slug is refused on the form, nothing changes.
    again = operator_client.post(url, {"slug": "adm-utility", "name": "again"})
    assert again.status_code == 200 and b"exists already" in again.content
    assert AccessEvent.objects.filter(project_id=project.pk).count() == 1


def test_grant_change_and_revoke_through_admin(operator_client: Client) -> None:
    project = factories.project("adm-proj")
    grant = reverse("admin:contexts_membership_grant")
    body = {"project": "adm-proj", "subject": "eng-adm", "permissions": ["webgis.view", "scada.view"]}
    assert operator_client.post(grant, body).status_code == 302
    membership = Membership.objects.get(project=project, principal__subject="eng-adm")
    assert membership.permissions == ["scada.view", "webgis.view"]
    assert operator_client.post(grant, {**body, "permissions": ["webgis.view"]}).status_code == 302
    changelist = reverse("admin:contexts_membership_changelist")
    confirm = operator_client.post(changelist, {"action": "revoke_memberships", "_selected_action": [membership.pk]})
    assert confirm.status_code == 200 and b"Revoke memberships" in confirm.content
    done = operator_client.post(
        changelist,
        {"action": "revoke_memberships", "_selected_action": [membership.pk], "confirm": "yes", "reason": "left"},
    )
    assert done.status_code == 302
    assert Membership.objects.get(pk=membership.pk).revoked_at is not None
    actions = list(AccessEvent.objects.filter(project_id=project.pk).order_by("id").values_list("action", flat=True))
    assert actions == ["principal_registered", "membership_granted", "membership_changed", "membership_revoked"]
    actors = AccessEvent.objects.filter(project_id=project.pk).values_list("actor", flat=True)
    assert all(actor.startswith("operator:op-onboard#") for actor in actors)
    # Rows themselves stay read-only.
    assert operator_client.get(reverse("admin:contexts_membership_change", args=[membership.pk])).status_code in (
        200,
        302,
        403,
    )
    assert operator_client.post(reverse("admin:contexts_membership_add"), {}).status_code == 403


def test_unknown_permission_codes_are_refused_on_the_form(operator_client: Client) -> None:
    factories.project("adm-bad")
    response = operator_client.post(
        reverse("admin:contexts_membership_grant"),
        {"project": "adm-bad", "subject": "x", "permissions": ["report.publish"]},
    )
    assert response.status_code == 200
    assert not Principal.objects.filter(subject="x").exists()


def test_non_staff_cannot_onboard() -> None:
    user = get_user_model().objects.create_user("not-staff", password="x", is_staff=False)
    client = Client()
    client.force_login(user)
    response = client.post(reverse("admin:contexts_project_create"), {"slug": "sneaky"})
    assert response.status_code == 302  # to the admin login: not an operator
    assert not Project.objects.filter(slug="sneaky").exists()


def test_delete_a_project_through_admin(operator_client: Client) -> None:
    """The admin action asks for a reason, then deletes through ``project_delete`` (audited with the
    operator); a project holding evidence is refused unless "including evidence" is ticked."""
    from evidence.models import EvidenceSnapshot

    kept, gone = factories.project("adm-keep"), factories.project("adm-gone")
    leased = factories.leased_run(kept)
    EvidenceSnapshot.objects.create(project=kept, task=leased.task, run=leased.run, tool="t", source="s", data={},
                                    byte_size=2, sha256="0" * 64)  # fmt: skip
    changelist = reverse("admin:contexts_project_changelist")
    selected = {"action": "delete_projects", "_selected_action": [kept.pk, gone.pk]}
    confirm = operator_client.post(changelist, selected)
    assert confirm.status_code == 200 and b"Delete projects and all their data" in confirm.content
    done = operator_client.post(changelist, {**selected, "confirm": "yes", "reason": "utility left"}, follow=True)
    assert b"holds 1 evidence snapshots" in done.content and b"Deleted 1 project(s)." in done.content
    assert set(Project.objects.filter(slug__startswith="adm-").values_list("slug", flat=True)) == {"adm-keep"}
    event = AccessEvent.objects.get(project_id=gone.pk, action="project_deleted")
    assert event.actor.startswith("operator:op-onboard#") and event.details["reason"] == "utility left"
    operator_client.post(changelist, {"action": "delete_projects", "_selected_action": [kept.pk], "confirm": "yes",
                                      "reason": "with its evidence", "including_evidence": "on"})  # fmt: skip
    assert not Project.objects.filter(slug="adm-keep").exists()
