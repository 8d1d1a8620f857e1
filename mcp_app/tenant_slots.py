"""Which tenant a context handle named, per process: the hint that lets ``mcp_app.dispatch`` ask Redis
for the tenant's slot while PostgreSQL resolves the context (``TenantHints``), and the slot asked for
that way (``EarlySlot``), which also carries the scope the handle last resolved to (what ``mcp_app.ahead``
builds a statement for, sent with the resolution). Nothing is decided from a hint: the binding is still
resolved and checked on every call."""

from __future__ import annotations

import asyncio
from typing import Any

from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from mcp_app.limits import ConcurrencyLimiter


class EarlySlot:
    """A tenant slot asked for before the context was resolved, for the tenant an earlier call named."""

    __slots__ = ("tenant", "task", "settled", "scope")

    def __init__(self, tenant: tuple[int, int], task: asyncio.Future[Any], scope: QueryScope | None = None) -> None:
        self.tenant = tenant
        self.task = task
        self.settled = False  # used by the call, or given back
        self.scope = scope  # what the handle resolved to when last seen (a hint for ``mcp_app.ahead``)

    def ready(self) -> bool:
        """Whether the slot is already held (an idle slot of this process reused): no wait for Redis."""
        task = self.task
        return task.done() and not task.cancelled() and task.exception() is None

    def serves(self, scope: QueryScope, task_purpose: bool) -> bool:
        """Whether this call may use it: the resolved tenant is the one asked for, and the call is not a
        task-purpose call (the evidence step takes its slot itself, inside the receipt's protocol)."""
        return not task_purpose and (scope.principal_id, scope.project_id) == self.tenant


class TenantHints:
    """Which tenant (principal, project) a context handle named when it last resolved, per process.

    Only a *hint* for asking Redis for the tenant's slot concurrently with the resolution: the binding is
    still read from PostgreSQL and checked on every call, and nothing is decided from the hint — a call
    whose resolution fails gives the early slot back (so a refused call holds a slot of its own tenant for
    one round trip at most), and one that resolves to another tenant gives it back and asks again. A
    handle's tenant never changes (a binding is immutable; only its validity does). Keyed by the handle's
    SHA-256 (``mcp_app.resolver.handle_key``, never the handle; None for text that cannot be a handle: no
    hint), at most ``MAX_HINTS`` entries, oldest out first.

    A hint is used only by a token of the identity it was learned from — (issuer, sub, azp), the three a
    binding is matched on (R-CTX-3). Anyone else presenting the handle (a leaked or guessed one) is
    refused by the resolution anyway, and must not take the owner's slots meanwhile: flooding another's
    handle would otherwise hold the owner's slots for a round trip per request and starve the owner
    (issue 17 item 1)."""

    MAX_HINTS = 10_000

    def __init__(self) -> None:
        # handle hash → (tenant, the token identity the handle resolved for, the scope it resolved to last)
        self._tenants: dict[str, tuple[tuple[int, int], tuple[str, str, str], QueryScope]] = {}

    def early_acquire(self, limiter: ConcurrencyLimiter, key: str | None, token: VerifiedToken) -> EarlySlot | None:
        hint = self._tenants.get(key) if key is not None else None
        if hint is None:
            return None
        tenant, identity, scope = hint
        if identity != (token.issuer, token.subject, token.client_id):
            return None
        idle = limiter.reuse(*tenant)
        if idle is not None:  # a slot this process holds idle for the tenant: no Redis, no task
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(idle)
            return EarlySlot(tenant, done, scope)
        return EarlySlot(tenant, asyncio.ensure_future(limiter.acquire(*tenant)), scope)

    def learn(self, key: str | None, scope: QueryScope) -> None:
        """Remember a handle (by its ``key``) that resolved: ``scope`` is what the resolution matched to the
        caller's token (its issuer, subject and client are the token's)."""
        if key is None:
            return
        known = self._tenants.get(key)
        if known is not None:  # the tenant and identity never change; the scope may (the latest is kept)
            self._tenants[key] = (known[0], known[1], scope)
            return
        if len(self._tenants) >= self.MAX_HINTS:
            self._tenants.pop(next(iter(self._tenants)))
        self._tenants[key] = (
            (scope.principal_id, scope.project_id),
            (scope.issuer, scope.subject, scope.client_id),
            scope,
        )
