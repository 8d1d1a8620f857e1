"""The MCP entry switch: rollback as a procedure (issue 23 item 16, seed 001 "实施范围与验收").

``manage.py mcp_entry off --reason "…"`` turns the MCP entry off at run time, without a redeploy:

1. an ``EntrySwitch`` row (enabled=false, actor, reason) is written under an exclusive advisory lock, so
   bindings already past the gate (they hold the lock shared until they commit) are committed first, and
   every binding after it is refused with ``MCP_DISABLED``;
2. every live context is revoked through the audited ``contexts.services.context_revoke`` — in batches
   of its limit, until none is left (no overall limit), each with its own audit row;
3. evidence, receipts and reports are not touched.

Every server process reads the switch from the database in a background task every ``REFRESH_S``
(``EntryWatch``), so ``/mcp`` answers 503 ``MCP_DISABLED`` within that time everywhere; a call reads an
attribute, not the database. The revocation takes effect at once (every call re-checks its context).
``manage.py mcp_entry on --reason "…"`` writes the row that turns it back on. Both are audited: the rows
themselves, and a ``tjwater.audit`` log line each.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import anyio
from django.db import connection, transaction

from contexts.errors import InvalidParameter
from contexts.models import QueryContext
from contexts.services import MAX_REVOKE_BATCH, Actor, context_revoke
from mcp_app.errors import McpDisabled
from mcp_app.models import EntrySwitch

logger = logging.getLogger("tjwater.mcp")
audit = logging.getLogger("tjwater.audit")

# PostgreSQL advisory lock key of the switch (any constant bigint not used elsewhere): bindings take it
# shared for their transaction, a change takes it exclusive.
ENTRY_LOCK_KEY = 0x746A_6D63_7065  # "tjmcpe"
# How stale a server process's view of the switch may be (one small query per process per interval).
REFRESH_S = 2.0


@dataclass(frozen=True)
class EntryChange:
    """What ``mcp_entry_off`` / ``mcp_entry_on`` did."""

    enabled: bool
    switch_id: int
    revoked_contexts: int


def entry_enabled() -> bool:
    """The switch's state now (one query): the newest row, on when there is none."""
    newest = EntrySwitch.objects.order_by("-pk").values_list("enabled", flat=True).first()
    return True if newest is None else bool(newest)


def refuse_binding_if_off() -> None:
    """The binding gate (``contexts.entry``), run inside the binding's transaction: holds the switch's
    lock shared until the binding commits, and refuses with ``MCP_DISABLED`` while the entry is off."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [ENTRY_LOCK_KEY])
    if not entry_enabled():
        raise McpDisabled()


def _record(*, enabled: bool, actor: Actor, reason: str) -> EntrySwitch:
    reason = (reason or "").strip()
    if not reason:
        raise InvalidParameter("A reason is required to turn the MCP entry on or off.")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ENTRY_LOCK_KEY])
        return EntrySwitch.objects.create(enabled=enabled, actor=actor.label[:300], reason=reason[:500])


def mcp_entry_off(*, actor: Actor, reason: str) -> EntryChange:
    """Turn the MCP entry off, then revoke every live context (see the module docstring)."""
    switch = _record(enabled=False, actor=actor, reason=reason)
    audit.info("mcp entry off switch=%d actor=%s reason=%s", switch.pk, actor.label, switch.reason[:100])
    revoked = 0
    revoke_reason = f"MCP entry turned off: {switch.reason}"[:500]
    while True:
        # Stop if an operator turned the entry back on meanwhile: contexts bound after that are theirs.
        if EntrySwitch.objects.order_by("-pk").values_list("pk", flat=True).first() != switch.pk:
            break
        ids = list(
            QueryContext.objects.filter(revoked_at__isnull=True)
            .order_by("pk")
            .values_list("pk", flat=True)[:MAX_REVOKE_BATCH]
        )
        if not ids:
            break
        revoked += len(context_revoke(context_ids=ids, actor=actor, reason=revoke_reason))
    EntrySwitch.objects.filter(pk=switch.pk).update(revoked_contexts=revoked)
    audit.info("mcp entry off switch=%d contexts_revoked=%d", switch.pk, revoked)
    return EntryChange(enabled=False, switch_id=switch.pk, revoked_contexts=revoked)


def mcp_entry_on(*, actor: Actor, reason: str) -> EntryChange:
    """Turn the MCP entry back on (new bindings and calls are served again; revoked contexts stay
    revoked — hosts bind new ones)."""
    switch = _record(enabled=True, actor=actor, reason=reason)
    audit.info("mcp entry on switch=%d actor=%s reason=%s", switch.pk, actor.label, switch.reason[:100])
    return EntryChange(enabled=True, switch_id=switch.pk, revoked_contexts=0)


def _read_and_close() -> bool:
    try:
        return entry_enabled()
    finally:
        connection.close()  # this worker thread's connection goes back to the pool


class EntryWatch:
    """One server process's view of the switch for ``/mcp``: read at start-up and then every
    ``REFRESH_S`` by one background task (in a worker thread), so the per-call check is an attribute
    read and adds no query to a call. While the database cannot be read, the last state is kept."""

    def __init__(self) -> None:
        self.enabled = True
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        try:
            self.enabled = await anyio.to_thread.run_sync(_read_and_close)
        except Exception as exc:  # noqa: BLE001 - a database outage keeps the last known state
            logger.warning("mcp entry switch not readable error_class=%s", type(exc).__name__)

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            await self.refresh()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
