"""Celery beat task of the evidence app (SPEC §9): explicit name, calls one idempotent service that is
safe on several workers at once (``SKIP LOCKED`` batches)."""

from __future__ import annotations

from celery import shared_task

from evidence import services


@shared_task(name="evidence.fail_stale_receipts")
def fail_stale_receipts() -> int:
    """Receipts left ``pending`` by a crashed process (older than the query budget) become ``failed``,
    so a retry with the same request key can proceed; returns how many."""
    return services.receipts_fail_stale()
