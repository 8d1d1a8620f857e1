"""Celery beat tasks of the contexts app (SPEC §9). Each has an explicit name and calls one service;
the services are idempotent and lock with SKIP LOCKED, so several workers may run them at once."""

from __future__ import annotations

from celery import shared_task

from contexts import services, tokens


@shared_task(name="contexts.revoke_stale")
def revoke_stale() -> dict[str, int]:
    """Revoke contexts whose run was superseded, whose lease lapsed or moved, or whose membership was
    removed; returns the counts by cause."""
    result = services.contexts_revoke_stale()
    return {
        "run_superseded": result.run_superseded,
        "lease_lapsed": result.lease_lapsed,
        "membership_removed": result.membership_removed,
    }


@shared_task(name="contexts.purge")
def purge() -> int:
    """Delete contexts expired or revoked longer ago than the retention period; returns the count."""
    return services.contexts_purge()


@shared_task(name="contexts.refresh_issuer_keys")
def refresh_issuer_keys() -> dict[str, object]:
    """Renew the issuer's metadata and JWKS in the shared cache ahead of expiry; returns what was
    fetched (key ids, never key material)."""
    result = tokens.refresh_issuer_keys()
    return {"issuer": result.issuer, "kids": list(result.kids), "source": result.source, "shared": result.shared}
