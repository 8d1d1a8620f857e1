"""Context handle services (SPEC §4, R-CTX): create, resolve on every call, revoke, and keep clean.

Writes (``context_create``, ``context_revoke``, ``context_revoke_owned``, ``contexts_revoke_stale``,
``contexts_purge``) are one function per state change, each atomic and writing its audit row in the same
transaction. The per-call read (``resolve_context`` and the checks it shares with the MCP hot path) is in
``contexts.selectors``, the task-run checks of a binding in ``contexts.run_checks``, and which tools a
context gets in ``contexts.grants``.

The REST view, the admin action, the Celery tasks and the manage.py command all call these functions.
Handles are never logged and never stored: only their SHA-256 is.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from contexts import access
from contexts.errors import (
    ContextLimitReached,
    InvalidParameter,
    NotFound,
    ProjectContextRequired,
)
from contexts.models import (
    TASK_PURPOSES,
    ContextEvent,
    ContextPurpose,
    ExecutionRequest,
    Membership,
    QueryContext,
    Task,
    TaskRun,
)
from contexts.run_checks import bind_task, check_purpose_fields, pinned_revision
from contexts.selectors import MAX_HANDLE_CHARS, hash_handle
from tjwater.registry import TOOLS

if TYPE_CHECKING:
    from contexts.tokens import VerifiedToken

logger = logging.getLogger(__name__)

HANDLE_BYTES = 32  # 256 random bits (R-CTX-2)
MAX_REVOKE_BATCH = 1000
DEFAULT_RETENTION_S = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Actor:
    """Who performed a state change, as recorded in ``revoked_by`` and the audit trail."""

    label: str

    @classmethod
    def operator(cls, *, username: str, user_id: int | None) -> Actor:
        return cls(label=f"operator:{username}#{user_id}")

    @classmethod
    def principal(cls, *, principal_id: int, client_id: str) -> Actor:
        return cls(label=f"principal:{principal_id}/{client_id}")

    @classmethod
    def system(cls, *, job: str) -> Actor:
        return cls(label=f"system:{job}")


@dataclass(frozen=True, slots=True)
class CreatedContext:
    """The result of ``context_create``. ``handle`` is the only copy of the handle that ever exists."""

    context_id: int
    handle: str
    expires_at: datetime
    purpose: str
    project: str
    tools: list[str]
    report_revision: int | None = None  # the task report revision the binding reads by default


@dataclass(frozen=True, slots=True)
class StaleRevocation:
    """How many active contexts ``contexts_revoke_stale`` revoked, by cause."""

    run_superseded: int
    lease_lapsed: int
    membership_removed: int

    @property
    def total(self) -> int:
        return self.run_superseded + self.lease_lapsed + self.membership_removed


# --- create ----------------------------------------------------------------------------------------


@transaction.atomic
def context_create(
    *,
    token: VerifiedToken,
    project_slug: str | None,
    session_id: str,
    purpose: str,
    catalog: Mapping[str, Collection[str]],
    task_scoped: Collection[str] = (),
    task_id: int | None = None,
    run_id: int | None = None,
    execution_request_id: str | None = None,
    parent_session_id: str | None = None,
    report_revision: int | None = None,
    now: datetime | None = None,
) -> CreatedContext:
    """Bind a new context handle (R-CTX-1/2). The principal is the token's (issuer, sub) and the client
    its ``azp`` — never anything from the body. The principal must hold an active membership in the
    project; task purposes are reserved to the configured host client and must name the task's current
    run with its lease held (by ``session_id`` for ``task_execution``, by ``parent_session_id`` for
    ``task_reader``). Returns the handle once; only its hash is stored, and an audit row is written in
    the same transaction.

    A task binding pins the report revision ``get_task_context`` reads by default: ``report_revision``
    when given (it must be a revision of the bound task: otherwise "not found", naming the field), else
    the task's newest revision now — so renewing a context with the revision the session was working on
    never moves it to a newer report (issue 23 item 8). Ordinary chat reads no task: no revision."""
    now = now or timezone.now()
    if not project_slug:
        raise ProjectContextRequired()
    if purpose not in ContextPurpose.values:
        raise InvalidParameter("Unknown purpose.", details={"purpose": purpose})
    if not session_id:
        raise InvalidParameter("session_id is required.", details={"field": "session_id"})
    check_purpose_fields(
        purpose=purpose,
        task_id=task_id,
        run_id=run_id,
        execution_request_id=execution_request_id,
        parent_session_id=parent_session_id,
        report_revision=report_revision,
    )
    access.require_task_client(purpose=purpose, client_id=token.client_id, host_client=settings.TJWATER_MCP_HOST_CLIENT)

    # Unknown principal, unknown project and "not a member" are the same answer (STYLE "scoped lookups").
    membership = (
        Membership.objects.select_related("principal", "project")
        .filter(
            principal__issuer=token.issuer,
            principal__subject=token.subject,
            project__slug=project_slug,
            revoked_at__isnull=True,
        )
        .first()
    )
    if membership is None:
        raise NotFound("No such project for this caller.")
    _require_context_room(membership, now)

    task: Task | None = None
    run: TaskRun | None = None
    execution_request: ExecutionRequest | None = None
    if purpose in TASK_PURPOSES:
        task, run, execution_request = bind_task(
            project_id=membership.project_id,
            principal_id=membership.principal_id,
            purpose=purpose,
            session_id=session_id,
            task_id=task_id,
            run_id=run_id,
            execution_request_id=execution_request_id,
            parent_session_id=parent_session_id or "",
            now=now,
        )
        report_revision = pinned_revision(task, report_revision)

    tools = access.tools_for_binding(
        catalog=catalog,
        permissions=membership.permissions,
        purpose=purpose,
        task_scoped=task_scoped,
        action_tools=TOOLS.action_tools(),
        scopes=token.scopes,
        approved=execution_request.approved_permissions if execution_request is not None else (),
    )
    handle = secrets.token_urlsafe(HANDLE_BYTES)
    context = QueryContext.objects.create(
        handle_hash=hash_handle(handle),
        principal=membership.principal,
        client_id=token.client_id,
        project=membership.project,
        membership=membership,
        session_id=session_id,
        purpose=purpose,
        allowed_tools=tools,
        task=task,
        run=run,
        execution_request=execution_request,
        parent_session_id=parent_session_id or "",
        report_revision=report_revision,
        created_at=now,
        expires_at=now + timedelta(seconds=settings.TJWATER_CONTEXT_TTL_S),
    )
    ContextEvent.objects.create(
        context_id=context.pk,
        handle_prefix=context.handle_prefix,
        action=ContextEvent.Action.CREATED,
        actor=Actor.principal(principal_id=membership.principal_id, client_id=token.client_id).label,
        project_id=membership.project_id,
        principal_id=membership.principal_id,
        at=now,
    )
    logger.info(
        "context created id=%s principal=%s project=%s purpose=%s run=%s report_revision=%s tools=%d",
        context.pk,
        membership.principal_id,
        membership.project.slug,
        purpose,
        run.pk if run else None,
        report_revision,
        len(tools),
    )
    return CreatedContext(
        context_id=context.pk,
        handle=handle,
        expires_at=context.expires_at,
        purpose=purpose,
        project=membership.project.slug,
        tools=tools,
        report_revision=report_revision,
    )


def _require_context_room(membership: Membership, now: datetime) -> None:
    """R-CTX: at most ``TJWATER_CONTEXT_MAX_LIVE`` live contexts per principal × project. The membership
    row is locked first (``FOR UPDATE``, inside the binding's transaction), so concurrent binds of one
    principal in one project are counted one after the other and the cap holds exactly. The oldest
    context is never silently revoked to make room: the new bind is refused."""
    Membership.objects.select_for_update().filter(pk=membership.pk).values_list("pk", flat=True).first()
    cap = settings.TJWATER_CONTEXT_MAX_LIVE
    live = (
        QueryContext.objects.active(now)
        .filter(principal_id=membership.principal_id, project_id=membership.project_id)
        .order_by()[: cap + 1]
        .count()
    )
    if live >= cap:
        raise ContextLimitReached(
            f"This principal already has {cap} live contexts in this project; delete contexts it no longer "
            "uses (DELETE /api/v1/mcp-query-contexts/{handle}) or wait for them to expire.",
            details={"live_contexts": live, "max_live_contexts": cap},
        )


def _owned_by(context: QueryContext, token: VerifiedToken) -> bool:
    principal = context.principal
    return (
        principal.issuer == token.issuer and principal.subject == token.subject and context.client_id == token.client_id
    )


# --- revoke ----------------------------------------------------------------------------------------


@transaction.atomic
def context_revoke(*, context_ids: Sequence[int], actor: Actor, reason: str, now: datetime | None = None) -> list[int]:
    """Revoke one or many contexts (R-CTX-5) and write one audit row each, in the same transaction.
    Already-revoked contexts are left as they are (idempotent); returns the ids revoked by this call.
    The next ``resolve_context`` in any process refuses them."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidParameter("A reason is required to revoke a context.")
    if len(context_ids) > MAX_REVOKE_BATCH:
        raise InvalidParameter(f"At most {MAX_REVOKE_BATCH} contexts per revocation.")
    now = now or timezone.now()
    rows = list(
        QueryContext.objects.select_for_update(of=("self",))
        .filter(pk__in=list(context_ids), revoked_at__isnull=True)
        .order_by("pk")
        .only("pk", "handle_hash", "project_id", "principal_id")[:MAX_REVOKE_BATCH]
    )
    return _mark_revoked(rows, actor=actor, reason=reason, now=now)


def contexts_revoke_for_principal(
    *, project_id: int, principal_id: int, actor: Actor, reason: str, now: datetime | None = None
) -> list[int]:
    """Revoke every live context of one principal on one project (a membership revoked), each with its
    audit row, inside the caller's transaction (no batch limit: the membership's end must end them all)."""
    now = now or timezone.now()
    with transaction.atomic():
        rows = list(
            QueryContext.objects.select_for_update(of=("self",))
            .filter(project_id=project_id, principal_id=principal_id, revoked_at__isnull=True, expires_at__gt=now)
            .order_by("pk")
            .only("pk", "handle_hash", "project_id", "principal_id")
        )
        return _mark_revoked(rows, actor=actor, reason=reason, now=now)


def _mark_revoked(rows: Sequence[QueryContext], *, actor: Actor, reason: str, now: datetime) -> list[int]:
    """Set the revocation columns of locked rows and write their audit rows (caller holds the
    transaction)."""
    if not rows:
        return []
    ids = [row.pk for row in rows]
    QueryContext.objects.filter(pk__in=ids).update(
        revoked_at=now, revoked_by=actor.label[:300], revoke_reason=reason[:500]
    )
    ContextEvent.objects.bulk_create(
        [
            ContextEvent(
                context_id=row.pk,
                handle_prefix=row.handle_hash[:8],
                action=ContextEvent.Action.REVOKED,
                actor=actor.label[:300],
                reason=reason[:500],
                project_id=row.project_id,
                principal_id=row.principal_id,
                at=now,
            )
            for row in rows
        ]
    )
    logger.info("contexts revoked count=%d actor=%s reason=%s", len(ids), actor.label, reason[:100])
    return ids


def context_revoke_owned(*, handle: str, token: VerifiedToken, now: datetime | None = None) -> None:
    """``DELETE /api/v1/mcp-query-contexts/{handle}``: revoke a context as its owner (same issuer,
    subject and client). Anyone else gets the same ``NotFound`` as for a handle that does not exist.
    Deleting an already revoked or expired context of one's own succeeds (idempotent)."""
    if not isinstance(handle, str) or not handle or len(handle) > MAX_HANDLE_CHARS:
        raise NotFound("No such context.")
    context = QueryContext.objects.select_related("principal").filter(handle_hash=hash_handle(handle)).first()
    if context is None or not _owned_by(context, token):
        raise NotFound("No such context.")
    context_revoke(
        context_ids=[context.pk],
        actor=Actor.principal(principal_id=context.principal_id, client_id=token.client_id),
        reason="deleted by its owner",
        now=now,
    )


# --- background (R-BG) -------------------------------------------------------------------------------


def contexts_revoke_stale(
    *, now: datetime | None = None, batch_size: int = 500, max_batches: int = 20
) -> StaleRevocation:
    """Revoke active contexts that can no longer be used (SPEC §9): task contexts whose run was
    superseded, whose lease lapsed or moved to another session, and any context whose membership was
    revoked. Idempotent and safe on several workers at once: each batch locks its rows with
    ``SKIP LOCKED`` so two workers never revoke (or audit) the same context twice."""
    now = now or timezone.now()
    exec_lease_moved = Q(purpose=ContextPurpose.TASK_EXECUTION) & ~Q(run__lease_holder=F("session_id"))
    reader_lease_moved = Q(purpose=ContextPurpose.TASK_READER) & ~Q(run__lease_holder=F("parent_session_id"))
    lease_lapsed = Q(purpose__in=TASK_PURPOSES) & (
        Q(run__lease_expires_at__isnull=True) | Q(run__lease_expires_at__lte=now)
    )
    causes: list[tuple[str, Q]] = [
        ("run superseded", Q(purpose__in=TASK_PURPOSES, run__superseded_at__isnull=False)),
        ("lease lapsed or moved", lease_lapsed | exec_lease_moved | reader_lease_moved),
        ("membership removed", Q(membership__revoked_at__isnull=False)),
    ]
    counts: list[int] = []
    actor = Actor.system(job="contexts.revoke_stale")
    for reason, condition in causes:
        revoked = 0
        for _ in range(max_batches):
            with transaction.atomic():
                rows = list(
                    QueryContext.objects.active(now)
                    .filter(condition)
                    .select_for_update(of=("self",), skip_locked=True)
                    .order_by("pk")
                    .only("pk", "handle_hash", "project_id", "principal_id")[:batch_size]
                )
                revoked += len(_mark_revoked(rows, actor=actor, reason=reason, now=now))
            if len(rows) < batch_size:
                break
        counts.append(revoked)
    return StaleRevocation(run_superseded=counts[0], lease_lapsed=counts[1], membership_removed=counts[2])


def contexts_purge(
    *, retention: timedelta | None = None, now: datetime | None = None, batch_size: int = 1000, max_batches: int = 50
) -> int:
    """Delete contexts that expired or were revoked longer ago than the retention period
    (``TJWATER_CONTEXT_RETENTION_S``), in bounded batches; returns how many were deleted. Their audit
    rows stay. Idempotent and safe on several workers (``SKIP LOCKED``)."""
    now = now or timezone.now()
    if retention is None:
        retention = timedelta(seconds=getattr(settings, "TJWATER_CONTEXT_RETENTION_S", DEFAULT_RETENTION_S))
    cutoff = now - retention
    purgeable: QuerySet[QueryContext] = QueryContext.objects.filter(Q(revoked_at__lt=cutoff) | Q(expires_at__lt=cutoff))
    deleted = 0
    for _ in range(max_batches):
        with transaction.atomic():
            ids = list(
                purgeable.select_for_update(skip_locked=True).order_by("pk").values_list("pk", flat=True)[:batch_size]
            )
            if ids:
                QueryContext.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
        if len(ids) < batch_size:
            break
    if deleted:
        logger.info("contexts purged count=%d", deleted)
    return deleted
