"""Django admin for evidence (SPEC §8): receipts and snapshots are browsed read-only — they are written
only by ``evidence.services``, and snapshots are immutable in the database. Filters by project, task,
run and tool. The full result document is not rendered in the list (it can be megabytes)."""

from __future__ import annotations

from django.contrib import admin

from contexts.admin import ReadOnlyAdmin
from evidence.models import EvidenceSnapshot, QueryReceipt


@admin.register(EvidenceSnapshot)
class EvidenceSnapshotAdmin(ReadOnlyAdmin):
    list_display = ["id", "project", "task", "run", "tool", "source", "byte_size", "sha256", "origin", "created_at"]
    list_filter = [
        ("project", admin.RelatedOnlyFieldListFilter),
        ("task", admin.RelatedOnlyFieldListFilter),
        ("run", admin.RelatedOnlyFieldListFilter),
        "tool",
    ]
    list_select_related = ["project", "task", "run"]
    search_fields = ["id", "tool", "sha256"]
    readonly_fields = [
        "id",
        "project",
        "task",
        "run",
        "tool",
        "source",
        "params",
        "data",
        "byte_size",
        "sha256",
        "origin",
        "created_at",
    ]
    list_per_page = 100


@admin.register(QueryReceipt)
class QueryReceiptAdmin(ReadOnlyAdmin):
    list_display = ["id", "project", "task", "run", "principal", "session_id", "tool", "state", "attempt", "updated_at"]
    list_filter = [
        ("project", admin.RelatedOnlyFieldListFilter),
        ("task", admin.RelatedOnlyFieldListFilter),
        ("run", admin.RelatedOnlyFieldListFilter),
        "tool",
        "state",
    ]
    list_select_related = ["project", "task", "run", "principal"]
    search_fields = ["request_key", "session_id", "tool"]
    readonly_fields = [
        "principal",
        "project",
        "session_id",
        "task",
        "run",
        "request_key",
        "tool",
        "params_hash",
        "state",
        "attempt",
        "snapshot",
        "created_at",
        "updated_at",
    ]
    list_per_page = 100
