"""Django admin for evidence: receipts and snapshots are listed and filtered, never added, changed
or deleted by hand."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from evidence.models import EvidenceSnapshot, QueryReceipt
from tests.contexts import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("evid-admin", password="pw-not-used"))
    return client


@pytest.fixture
def saved() -> tuple[EvidenceSnapshot, QueryReceipt]:
    leased = factories.leased_run(factories.project())
    snapshot = EvidenceSnapshot.objects.create(
        project_id=leased.task.project_id, task=leased.task, run=leased.run, tool="get_network_schema",
        source="model_network", params={"kind": "pipe"}, data={"data": {}}, byte_size=11, sha256="ab" * 32,
    )  # fmt: skip
    receipt = QueryReceipt.objects.create(
        principal=factories.principal(), project_id=leased.task.project_id, session_id="s", task=leased.task,
        run=leased.run, request_key="k", tool="get_network_schema", params_hash="c" * 64, state="complete",
        snapshot=snapshot,
    )  # fmt: skip
    return snapshot, receipt


def test_the_lists_filter_by_project_task_run_and_tool(
    superuser_client: Client, saved: tuple[EvidenceSnapshot, QueryReceipt]
) -> None:
    snapshot, receipt = saved
    for name in ("evidencesnapshot", "queryreceipt"):
        url = reverse(f"admin:evidence_{name}_changelist")
        listing = superuser_client.get(url, {"project__id__exact": snapshot.project_id, "tool": snapshot.tool})
        assert listing.status_code == 200
        assert "get_network_schema" in listing.content.decode()
        for lookup in ("task__id__exact", "run__id__exact"):
            filtered = superuser_client.get(url, {lookup: getattr(snapshot, lookup.split("__")[0] + "_id")})
            assert filtered.status_code == 200 and "get_network_schema" in filtered.content.decode()
    receipt_page = superuser_client.get(reverse("admin:evidence_queryreceipt_change", args=[receipt.pk]))
    assert receipt_page.status_code == 200 and "complete" in receipt_page.content.decode()


def test_nothing_can_be_added_changed_or_deleted(
    superuser_client: Client, saved: tuple[EvidenceSnapshot, QueryReceipt]
) -> None:
    snapshot, receipt = saved
    assert superuser_client.get(reverse("admin:evidence_evidencesnapshot_add")).status_code == 403
    assert superuser_client.get(reverse("admin:evidence_queryreceipt_add")).status_code == 403
    change = superuser_client.get(reverse("admin:evidence_evidencesnapshot_change", args=[snapshot.pk]))
    assert change.status_code == 200 and "Save" not in change.content.decode()
    posted = superuser_client.post(reverse("admin:evidence_queryreceipt_delete", args=[receipt.pk]), {"post": "yes"})
    assert posted.status_code == 403
    assert QueryReceipt.objects.filter(pk=receipt.pk).exists()
