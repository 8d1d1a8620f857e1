"""Evidence saving of task-purpose calls, exactly once (SPEC §8, R-EVID-1..3).

The flow of one call in a ``task_execution`` or ``task_reader`` context, for a tool whose declaration
allows evidence (``ToolSpec.evidence_allowed``):

1. ``prepare`` — the application request key ``_meta["cn.tjwater/requestKey"]`` is required
   (``RequestKeyRequired``, answered -32602 by the MCP edge); the parameters are canonicalized (RFC 8785,
   without ``context_handle``) and hashed.
2. ``claim`` (ONE statement, autocommit, its commit not waiting for the WAL flush) — the run is still
   current and its lease valid (the run checks of every call's resolution,
   ``contexts.selectors.check_context``), and only then ``INSERT … ON CONFLICT DO NOTHING`` of a ``pending``
   receipt. The unique key (principal, project, session, task, run, request key) decides the one owner. A
   duplicate finds the existing receipt: other tool/parameters → ``RequestKeyReused``; ``complete`` → the
   saved snapshot (no new query, no new receipt); ``failed`` (or ``pending`` but stale) → taken over by one
   ``UPDATE … WHERE state = …`` (one winner), ``pending`` → wait and look again.
3. the query runs — the caller's ``execute`` — with no lock held by this module.
4. ``complete`` (ONE statement: one round trip, its own transaction) — the run row is read ``FOR SHARE``
   and re-checked, the receipt marked ``complete`` (only by the claim's own attempt), the snapshot
   inserted, commit. Only then is the
   result returned, with ``evidence_id`` and ``evidence_uri``. A superseded run → nothing written,
   ``RunSuperseded``; a commit failure → ``EvidenceNotSaved``. Either way the receipt becomes ``failed``.
5. a query error or a cancellation before step 4 → ``abandon``: the receipt becomes ``failed``, nothing
   is saved, and a retry with the same key may proceed.

``ordinary_chat`` calls, and tools that do not save evidence, just run ``execute``. Nothing a client
sends can make a result evidence: snapshots are written only here, from what ``execute`` returned.

Entry point: ``run_with_evidence`` (async: the DB steps in worker threads; the MCP edge), built on the
step functions ``prepare`` / ``claim`` / ``complete`` / ``abandon``, which a driver may also call itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

import anyio
import rfc8785
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from contexts.errors import InvalidParameter, RunNotCurrent, RunSuperseded
from contexts.models import TASK_PURPOSES, ContextPurpose, QueryContext, TaskRun
from contexts.scope import QueryScope
from evidence.errors import EvidenceNotSaved, RequestInProgress, RequestKeyRequired, RequestKeyReused
from evidence.models import EVIDENCE_URI_PREFIX, EvidenceSnapshot, QueryReceipt
from queries.models import AnalysisRun
from queries.registry import ToolSpec
from queries.services.analysis import SOURCE as ANALYSIS_RUNS_SOURCE
from tjwater import metrics, telemetry

logger = logging.getLogger(__name__)

T = TypeVar("T")

REQUEST_KEY_META = RequestKeyRequired.meta_key  # "cn.tjwater/requestKey" (SPEC §12)
MAX_REQUEST_KEY_CHARS = 200
# A pending receipt older than the query budget plus this is left over by a crashed process (the query
# itself cannot run longer than the budget: PostgreSQL enforces it), and may be failed and taken over.
STALE_GRACE_S = 5.0
POLL_FIRST_S = 0.01
POLL_MAX_S = 0.2
# Keys the server adds to a returned result; never part of the saved document.
ADDED_KEYS = ("evidence_id", "evidence_uri")


def evidence_uri(evidence_id: object) -> str:
    """The resource URI of a snapshot (R-EVID-4): names the evidence, never a handle or token."""
    return f"{EVIDENCE_URI_PREFIX}{evidence_id}"


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical form. A value outside the I-JSON domain (an integer beyond 2^53, NaN)
    cannot be canonicalized: for parameters that is the caller's error."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        raise InvalidParameter("A value cannot be represented canonically (RFC 8785).") from None


def canonical_params(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The call's parameters as saved and hashed: everything but the ``context_handle`` (a secret, and
    not a parameter of the query)."""
    return {k: v for k, v in arguments.items() if k != "context_handle"}


def request_key_from(meta: Mapping[str, Any] | None) -> str:
    key = (meta or {}).get(REQUEST_KEY_META)
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_REQUEST_KEY_CHARS or "\x00" in key:
        raise RequestKeyRequired()
    return key


def saves_evidence(scope: QueryScope, tool: ToolSpec) -> bool:
    """R-EVID-1: results of task-purpose calls are evidence, for tools whose declaration allows it."""
    return scope.purpose in TASK_PURPOSES and tool.evidence_allowed


@dataclass
class EvidenceCall:
    """One task-purpose call on its way through the steps."""

    scope: QueryScope
    # The scope's binding, present for a task-purpose call (checked in ``prepare``).
    context_id: int
    task_id: int
    run_id: int
    tool: str
    source: str
    params: dict[str, Any]
    params_json: str  # the RFC 8785 text of ``params``: hashed into ``params_hash`` and saved as it is
    params_hash: str
    request_key: str
    required_permissions: list[str]
    receipt_id: int | None = None
    attempt: int = 0


@dataclass(frozen=True)
class Claim:
    """What ``claim`` decided: ``run`` the query (this call owns the receipt), ``done`` (an identical
    earlier call's saved result), or ``wait`` (an identical call is running)."""

    kind: Literal["run", "done", "wait"]
    result: dict[str, Any] | None = None


def prepare(
    *,
    scope: QueryScope,
    tool: ToolSpec,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    required_permissions: Collection[str] | None = None,
) -> EvidenceCall:
    """Step 1 (no database): the request key and the canonical parameters of a task-purpose call, and
    the permission codes the call needed (``required_permissions``: the tool's own plus what its
    arguments added; default the tool's declared ones), recorded with the snapshot so that every later
    read re-checks them (``contexts.access.evidence_reach``)."""
    if scope.task_id is None or scope.run_id is None or scope.context_id is None:
        raise RunNotCurrent()
    key = request_key_from(meta)
    params = canonical_params(arguments)
    params_json = canonical_json(params)  # once: hashed here, saved by ``complete``
    return EvidenceCall(
        scope=scope,
        context_id=scope.context_id,
        task_id=scope.task_id,
        run_id=scope.run_id,
        tool=tool.name,
        source=tool.source,
        params=params,
        params_json=params_json.decode(),
        params_hash=hashlib.sha256(params_json).hexdigest(),
        request_key=key,
        required_permissions=sorted(set(tool.permissions if required_permissions is None else required_permissions)),
    )


def _stale_cutoff(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.TJWATER_MCP_QUERY_BUDGET_S + STALE_GRACE_S)


def _run_check(*, lock: bool) -> str:
    """The run check of a task binding, as a CTE ``run`` (one row, none when the binding names no run): the
    run checks of ``contexts.selectors.check_context`` — the binding's purpose and task (``bound``), the
    run not superseded, its lease held, unexpired, by the binding's session (``task_reader``: the parent
    session). Shared by the claim and the save; ``lock`` (the save) reads the run row ``FOR SHARE``."""
    return f"""
run AS (
    SELECT r.id,
           c.purpose IN ('{ContextPurpose.TASK_EXECUTION.value}', '{ContextPurpose.TASK_READER.value}')
               AND r.task_id = c.task_id AS bound,
           r.superseded_at IS NOT NULL AS superseded,
           COALESCE(r.lease_holder <> '' AND r.lease_expires_at > now() AND r.lease_holder =
               CASE WHEN c.purpose = '{ContextPurpose.TASK_EXECUTION.value}' THEN c.session_id
                    ELSE c.parent_session_id END, false) AS leased
    FROM {QueryContext._meta.db_table} c JOIN {TaskRun._meta.db_table} r ON r.id = c.run_id
    WHERE c.id = %(context)s
    {"FOR SHARE OF r" if lock else ""}
)"""


# The claim in ONE statement, one round trip, in its own (autocommit) transaction: the run check, then the
# ``pending`` receipt inserted only while the run is current (``ON CONFLICT DO NOTHING``: the unique key
# decides the one owner; a duplicate gets no row back). Its commit does not wait for the WAL flush
# (``synchronous_commit`` off for this transaction only): a claim promises the caller nothing, and the save
# that does — a later commit, synchronous — flushes the WAL up to and past the claim's record, so a saved
# snapshot's receipt is always as durable as the snapshot; a claim lost in a crash before that is claimed
# again by the retry. The row says which check failed, if any (as the save's), and the receipt taken.
_CLAIM_SQL = f"""
WITH {_run_check(lock=False)}, claimed AS (
    INSERT INTO {QueryReceipt._meta.db_table}
        (principal_id, project_id, session_id, task_id, run_id, request_key, tool, params_hash, state, attempt,
         created_at, updated_at)
    SELECT %(principal)s, %(project)s, %(session)s, %(task)s, %(run)s, %(key)s, %(tool)s, %(params_hash)s,
           'pending', 1, now(), now()
    FROM run WHERE run.bound AND NOT run.superseded AND run.leased
    ON CONFLICT ON CONSTRAINT receipt_key_uniq DO NOTHING
    RETURNING id, attempt
)
SELECT run.bound, run.superseded, run.leased, claimed.id, claimed.attempt
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
LEFT JOIN run ON true LEFT JOIN claimed ON true
"""

_RETAKE_SQL = f"""
UPDATE {QueryReceipt._meta.db_table}
SET state = 'pending', attempt = attempt + 1, updated_at = now()
WHERE id = %s AND (state = 'failed' OR (state = 'pending' AND updated_at < %s))
RETURNING attempt
"""


# The save in ONE statement, one round trip, in its own (autocommit) transaction: the run check
# (``_run_check``) with the run row read FOR SHARE (a supersession — an UPDATE of
# that row — waits for this statement's commit, and one that committed first is seen: READ COMMITTED
# re-checks a locked row's newest version), the receipt completed only while the run is current and this
# claim's attempt still holds it, and the snapshot inserted only when the receipt was (its foreign key is
# checked at the commit, so the receipt may name the snapshot first). The last row says which check
# failed, if any: no run row / not bound → RunNotCurrent, superseded → RunSuperseded, lease not held →
# RunNotCurrent, run current but no snapshot → the claim was lost. A read of an analysis run's results
# (``analysis_run_read``) links the snapshot to that run of the project, with the run's model version and
# input hash (R-RUN-1, R-RUN-6), in the same statement: what the reader saw is tied to what it computed from.
_SAVE_SQL = f"""
WITH {_run_check(lock=True)}, receipt AS (
    UPDATE {QueryReceipt._meta.db_table}
    SET state = 'complete', snapshot_id = %(snapshot)s, updated_at = now()
    WHERE id = %(receipt)s AND attempt = %(attempt)s AND state = 'pending'
      AND EXISTS (SELECT 1 FROM run WHERE run.bound AND NOT run.superseded AND run.leased)
    RETURNING id
), snapshot AS (
    INSERT INTO {EvidenceSnapshot._meta.db_table}
        (id, project_id, task_id, run_id, principal_id, required_permissions, tool, source, params, data,
         byte_size, sha256, origin, created_at, analysis_run_id, model_version_id, input_sha256)
    SELECT %(snapshot)s, %(project)s, %(task)s, %(run)s, %(principal)s, %(permissions)s::varchar(32)[], %(tool)s,
           %(source)s, %(params)s::jsonb, %(data)s::jsonb, %(size)s, %(sha256)s, 'system', now(),
           analysis.id, analysis.model_version_id, NULLIF(analysis.input_sha256, '')
    FROM receipt
    LEFT JOIN {AnalysisRun._meta.db_table} analysis
        ON analysis.project_id = %(project)s AND analysis.run_id = %(analysis_run)s
    RETURNING id
)
SELECT run.bound, run.superseded, run.leased, (SELECT id FROM snapshot)
FROM (SELECT 1) AS one LEFT JOIN run ON true
"""


def saved_document(structured: Mapping[str, Any]) -> dict[str, Any]:
    """What a snapshot saves of a call's result: all of it but the keys the reply adds (``ADDED_KEYS``)."""
    return {k: v for k, v in structured.items() if k not in ADDED_KEYS}


def claim_params(call: EvidenceCall) -> dict[str, Any]:
    """The parameters of ``_CLAIM_SQL`` for ``call`` (``claim``; the bench's floor replays the same)."""
    scope = call.scope
    return {
        "context": call.context_id,
        "principal": scope.principal_id,
        "project": scope.project_id,
        "session": scope.session_id,
        "task": call.task_id,
        "run": call.run_id,
        "key": call.request_key,
        "tool": call.tool,
        "params_hash": call.params_hash,
    }


def save_params(call: EvidenceCall, body: bytes, snapshot_id: uuid.UUID) -> dict[str, Any]:
    """The parameters of ``_SAVE_SQL`` saving ``body`` (the result's RFC 8785 text) as snapshot
    ``snapshot_id`` (``complete``; the bench's floor replays the same)."""
    scope = call.scope
    return {
        "context": call.context_id,
        "snapshot": snapshot_id,
        "receipt": call.receipt_id,
        "attempt": call.attempt,
        "project": scope.project_id,
        "task": call.task_id,
        "run": call.run_id,
        "principal": scope.principal_id,
        "permissions": call.required_permissions,
        "tool": call.tool,
        "source": call.source,
        "params": call.params_json,
        "data": body.decode(),  # the RFC 8785 text is JSON: stored as it was hashed
        "size": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "analysis_run": analysis_run_read(call),
    }


def analysis_run_read(call: EvidenceCall) -> str | None:
    """The analysis run a call read — the ``run_id`` of a tool of the analysis runs' source
    (``get_analysis_run``, ``list_analysis_results``, ``query_analysis_series``, ``query_analysis_values``)
    — or None; looked up in the call's own project by the save (a run of another project is never linked)."""
    run_id = call.params.get("run_id")
    return run_id if call.source == ANALYSIS_RUNS_SOURCE and isinstance(run_id, str) else None


def _require_run(bound: bool | None, superseded: bool | None, leased: bool | None) -> None:
    """The verdict of ``_run_check``'s row, as ``check_context`` gives it: no run row or not this
    binding's (``None`` / false ``bound``) → ``RunNotCurrent``, superseded → ``RunSuperseded``, the lease
    not held → ``RunNotCurrent``."""
    if not bound:
        raise RunNotCurrent()
    if superseded:
        raise RunSuperseded()
    if not leased:
        raise RunNotCurrent()


def claim(call: EvidenceCall) -> Claim:
    """Step 2 (one statement, autocommit): check the run and take the receipt (``_CLAIM_SQL``), or find
    out who has it. Raises ``RunSuperseded`` / ``RunNotCurrent`` / ``RequestKeyReused``."""
    scope = call.scope
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, claim_params(call))
        bound, superseded, leased, receipt_id, attempt = cursor.fetchone()
    _require_run(bound, superseded, leased)
    if receipt_id is not None:
        call.receipt_id, call.attempt = receipt_id, attempt
        return Claim("run")
    existing = (
        QueryReceipt.objects.filter(
            principal_id=scope.principal_id,
            project_id=scope.project_id,
            session_id=scope.session_id,
            task_id=call.task_id,
            run_id=call.run_id,
            request_key=call.request_key,
        )
        .values("id", "tool", "params_hash", "state", "snapshot_id")
        .first()
    )
    if existing is None:  # deleted in between (its run or task was removed): try again
        return Claim("wait")
    if existing["tool"] != call.tool or existing["params_hash"] != call.params_hash:
        raise RequestKeyReused()
    if existing["state"] == QueryReceipt.State.COMPLETE:
        snapshot = EvidenceSnapshot.objects.filter(pk=existing["snapshot_id"]).values("id", "data").first()
        if snapshot is None:
            return Claim("wait")
        metrics.RECEIPTS_REPLAYED.inc()
        return Claim("done", _with_evidence_id(snapshot["data"], snapshot["id"]))
    with connection.cursor() as cursor:
        cursor.execute(_RETAKE_SQL, [existing["id"], _stale_cutoff(timezone.now())])
        row = cursor.fetchone()
    if row is None:
        return Claim("wait")
    call.receipt_id, call.attempt = existing["id"], row[0]
    return Claim("run")


def _with_evidence_id(data: dict[str, Any], evidence_id: object) -> dict[str, Any]:
    return {**data, "evidence_id": str(evidence_id), "evidence_uri": evidence_uri(evidence_id)}


def _release(call: EvidenceCall) -> None:
    """Mark this call's receipt failed, if it still holds it (idempotent)."""
    if call.receipt_id is None:
        return
    QueryReceipt.objects.filter(pk=call.receipt_id, attempt=call.attempt, state=QueryReceipt.State.PENDING).update(
        state=QueryReceipt.State.FAILED, updated_at=timezone.now()
    )


def abandon(call: EvidenceCall) -> None:
    """Step 5: the query failed or the call was cancelled — nothing is saved, the receipt becomes
    ``failed`` so that a retry with the same key can proceed."""
    _release(call)


@telemetry.traced_sync("evidence.save")
def complete(call: EvidenceCall, structured: Mapping[str, Any]) -> dict[str, Any]:
    """Step 4: in ONE statement (``_SAVE_SQL``: one round trip, its own transaction), confirm the run
    (row read ``FOR SHARE``: a supersession waits for this commit), complete the receipt and insert the
    snapshot; return the result with ``evidence_id`` and ``evidence_uri`` only after the commit
    succeeded. Must be called outside any transaction of the caller (its commit is the point of no
    return). The result is canonicalized once (RFC 8785): the text is hashed and stored as it is."""
    if connection.in_atomic_block:
        raise RuntimeError("evidence must be saved in its own transaction, not inside the caller's")
    data = saved_document(structured)
    body = canonical_json(data)  # before the statement: no lock is held while hashing
    snapshot_id = uuid.uuid4()
    scope = call.scope
    try:
        with connection.cursor() as cursor:
            cursor.execute(_SAVE_SQL, save_params(call, body, snapshot_id))
            bound, superseded, leased, saved = cursor.fetchone()
        _require_run(bound, superseded, leased)
        if saved is None:
            # The receipt was failed as stale and maybe taken over meanwhile: this attempt lost it.
            raise _ReceiptLost
    except RunNotCurrent:
        metrics.EVIDENCE_FAILED.inc()
        _release_quietly(call)
        raise
    except _ReceiptLost:
        metrics.EVIDENCE_FAILED.inc()
        _release_quietly(call)
        raise EvidenceNotSaved() from None
    except DatabaseError as exc:
        metrics.EVIDENCE_FAILED.inc()
        logger.error(
            "evidence not saved tool=%s project=%s run=%s error_class=%s",
            call.tool,
            scope.project_id,
            call.run_id,
            type(exc).__name__,
        )
        _release_quietly(call)
        raise EvidenceNotSaved() from None
    metrics.EVIDENCE_SAVED.inc()
    logger.info(
        "evidence saved id=%s tool=%s project=%s task=%s run=%s bytes=%d",
        snapshot_id,
        call.tool,
        scope.project_id,
        call.task_id,
        call.run_id,
        len(body),
    )
    return _with_evidence_id(data, snapshot_id)


class _ReceiptLost(Exception):
    pass


def _release_quietly(call: EvidenceCall) -> None:
    """Release after a failed save; the database may be what failed, so a failure here is logged and
    left to ``receipts_fail_stale``."""
    try:
        _release(call)
    except DatabaseError as exc:
        logger.warning("evidence receipt not released receipt=%s error_class=%s", call.receipt_id, type(exc).__name__)


def _wait_budget_s() -> float:
    budget_s: float = settings.TJWATER_MCP_QUERY_BUDGET_S
    return budget_s + STALE_GRACE_S


# --- sync ------------------------------------------------------------------------------------------


# --- async -----------------------------------------------------------------------------------------


def _closing(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` in a worker thread and return its connection to the pool afterwards (the thread is
    not a Django request thread)."""
    try:
        return fn(*args)
    finally:
        connection.close()


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(_closing, fn, *args)


async def run_with_evidence(
    *,
    scope: QueryScope,
    tool: ToolSpec,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    execute: Callable[[], Awaitable[dict[str, Any]]],
    required_permissions: Collection[str] | None = None,
) -> dict[str, Any]:
    """The whole flow for the MCP edge: the database steps in worker threads, waiting on the event
    loop. ``execute`` runs the query (however the caller runs queries: budget, cancellation) and returns
    the structured result. Cancelled before the save → nothing saved, the receipt released, the
    cancellation re-raised. Once the save has started it is finished (shielded, a few milliseconds): a
    cancel arriving then loses only the response, and a retry with the same key gets this evidence."""
    if not saves_evidence(scope, tool):
        return await execute()
    call = prepare(scope=scope, tool=tool, arguments=arguments, meta=meta, required_permissions=required_permissions)
    deadline = time.monotonic() + _wait_budget_s()
    delay = POLL_FIRST_S
    try:
        while True:
            outcome = await _in_thread(claim, call)
            if outcome.kind == "done":
                return outcome.result  # type: ignore[return-value]  # "done" carries the result
            if outcome.kind == "run":
                break
            if time.monotonic() > deadline:
                raise RequestInProgress()
            await anyio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)
        beat = asyncio.create_task(_heartbeat(call))
        try:
            structured = await execute()
        finally:
            beat.cancel()
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        if call.receipt_id is not None:
            with anyio.CancelScope(shield=True):
                await _in_thread(abandon, call)
        raise
    with anyio.CancelScope(shield=True):
        saved = await _in_thread(complete, call, structured)
    return saved  # noqa: RET504 - after the block: CancelScope.__exit__ may swallow, as mypy knows


def heartbeat_interval_s() -> float:
    """How often a running call touches its pending receipt: three beats per stale window, so a live
    call's receipt is never old enough to be taken over however long its plan (several statements,
    slot waits) runs."""
    budget_s: float = settings.TJWATER_MCP_QUERY_BUDGET_S
    return max(0.2, (budget_s + STALE_GRACE_S) / 3)


def _beat(call: EvidenceCall) -> None:
    if call.receipt_id is None:  # not claimed: nothing to keep fresh
        return
    QueryReceipt.objects.filter(pk=call.receipt_id, attempt=call.attempt, state=QueryReceipt.State.PENDING).update(
        updated_at=timezone.now()
    )


async def _heartbeat(call: EvidenceCall) -> None:
    """Keep this call's receipt fresh while its query runs (issue 17 item 7: the stale cutoff is sized
    for one crashed call, and a live call must never look like one). A failed beat is logged and the
    next one tried: the receipt's fate is decided by ``complete``."""
    while True:
        await anyio.sleep(heartbeat_interval_s())
        try:
            await _in_thread(_beat, call)
        except DatabaseError as exc:
            logger.warning(
                "evidence receipt heartbeat failed receipt=%s error_class=%s", call.receipt_id, type(exc).__name__
            )


# --- background (R-BG) -------------------------------------------------------------------------------


def receipts_fail_stale(*, now: datetime | None = None, batch_size: int = 1000, max_batches: int = 20) -> int:
    """Receipts left ``pending`` longer than the query budget (plus a small grace) by a crashed process
    become ``failed``, so that a retry with the same key can proceed (SPEC §9). Idempotent and safe on
    several workers: each batch locks its rows with ``SKIP LOCKED`` and re-checks the state in the
    UPDATE; returns how many receipts this call failed."""
    cutoff = _stale_cutoff(now or timezone.now())
    table = QueryReceipt._meta.db_table
    sql = f"""
        UPDATE {table} SET state = 'failed', updated_at = now()
        WHERE id IN (
            SELECT id FROM {table} WHERE state = 'pending' AND updated_at < %s
            ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
        ) AND state = 'pending'
    """
    failed = 0
    for _ in range(max_batches):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [cutoff, batch_size])
            count = cursor.rowcount
        failed += count
        if count < batch_size:
            break
    if failed:
        logger.info("evidence receipts failed as stale count=%d", failed)
    return failed
