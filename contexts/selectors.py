"""The per-call read of a context binding (SPEC R-CTX-3): one statement, then pure checks.

``resolve_context`` is what every business call goes through, on every edge, in every process: it reads
the binding joined with its principal, project, membership and run *now* (``context_row_query``) and
checks it (``check_context``), so a revocation, a lapsed lease, a superseded run or a removed membership
stops the very next call. The MCP hot path runs the same statement on its own connection and the same
checks (``mcp_app.resolver``). Handles are never logged and never stored: only their SHA-256 is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.db.models import QuerySet
from django.utils import timezone

from contexts import access
from contexts.errors import ContextExpired, ContextInvalid, ContextRevoked, PermissionDenied, RunNotCurrent
from contexts.models import TASK_PURPOSES, ContextPurpose, QueryContext
from contexts.scope import QueryScope

if TYPE_CHECKING:
    from contexts.tokens import VerifiedToken

MAX_HANDLE_CHARS = 128  # anything longer cannot be one of ours; refused before touching the database


def hash_handle(handle: str) -> str:
    """SHA-256 (hex) of a context handle: the only form in which a handle is stored or looked up.

    Never raises: text that is not valid Unicode (a lone surrogate sent as ``"\\ud800"`` in JSON) is
    hashed as its ``surrogatepass`` bytes, which no issued handle (ASCII) can match."""
    return hashlib.sha256(handle.encode("utf-8", "surrogatepass")).hexdigest()


# --- resolve (every call, R-CTX-3) --------------------------------------------------------------------


#: What the resolution reads, in one statement: the binding joined with its principal, project,
#: membership and (for task purposes) run. ``.values()`` rows, so the MCP hot path can run the same
#: queryset through its async driver (``mcp_app.executor``) without building model instances.
CONTEXT_ROW_FIELDS: tuple[str, ...] = (
    "id",
    "principal_id",
    "principal__issuer",
    "principal__subject",
    "client_id",
    "project_id",
    "project__slug",
    "membership_id",
    "membership__revoked_at",
    "membership__principal_id",
    "membership__project_id",
    "membership__permissions",
    "session_id",
    "parent_session_id",
    "purpose",
    "allowed_tools",
    "task_id",
    "run_id",
    "run__superseded_at",
    "run__task_id",
    "run__lease_holder",
    "run__lease_expires_at",
    "execution_request_id",
    "expires_at",
    "revoked_at",
    # issue 20: what the project's results are shown in (QueryScope.unit_system …)
    "project__unit_system",
    "project__timezone",
    "project__quality_type",
    "project__headloss_formula",
)


#: One row of ``context_row_query`` (``.values()`` of ``CONTEXT_ROW_FIELDS``), typed.
class ContextRow(TypedDict):
    id: int
    principal_id: int
    principal__issuer: str
    principal__subject: str
    client_id: str
    project_id: int
    project__slug: str
    membership_id: int
    membership__revoked_at: datetime | None
    membership__principal_id: int
    membership__project_id: int
    membership__permissions: list[str] | None
    session_id: str
    parent_session_id: str
    purpose: str
    allowed_tools: list[str] | None
    task_id: int | None
    run_id: int | None
    run__superseded_at: datetime | None
    run__task_id: int | None
    run__lease_holder: str | None
    run__lease_expires_at: datetime | None
    execution_request_id: int | None
    expires_at: datetime
    revoked_at: datetime | None
    project__unit_system: str
    project__timezone: str
    project__quality_type: str
    project__headloss_formula: str


def context_handle_acceptable(handle: object) -> bool:
    """Whether ``handle`` can be one of ours at all (checked before touching the database): a non-empty
    ASCII string of bounded length (issued handles are URL-safe base64)."""
    return isinstance(handle, str) and bool(handle) and len(handle) <= MAX_HANDLE_CHARS and handle.isascii()


def context_row_query(handle: str) -> QuerySet[QueryContext, dict[str, Any]]:
    """The one statement of a resolution: the binding's row for ``handle`` (sliced: ``handle_hash`` is
    unique, and the LIMIT avoids the ORDER BY that ``.first()`` adds)."""
    return context_row_query_by_hash(hash_handle(handle))


def context_row_query_by_hash(handle_hash: str) -> QuerySet[QueryContext, dict[str, Any]]:
    """``context_row_query`` for an already hashed handle (the MCP hot path compiles this once as a
    template and binds only the hash per call)."""
    rows: QuerySet[QueryContext, dict[str, Any]] = (
        QueryContext.objects.filter(handle_hash=handle_hash).order_by().values(*CONTEXT_ROW_FIELDS)
    )
    return rows[:1]  # no ORDER BY: ``handle_hash`` is unique (the model's ordering would add a sort node)


def check_context(row: ContextRow | None, *, token: VerifiedToken, now: datetime) -> QueryScope:
    """The checks of a resolution, on the row ``context_row_query`` read (``None``: no such handle):
    the binding itself — who, until when, through which live membership and (task purposes) which
    current, leased run. Pure: no I/O, so the sync ``resolve_context`` and the MCP hot path share it.
    Which tools and permissions a call may use is decided afterwards by ``contexts.access`` on the
    returned scope. Raises the refusals listed in ``resolve_context``."""
    if row is None:
        raise ContextInvalid()
    if not (
        row["principal__issuer"] == token.issuer
        and row["principal__subject"] == token.subject
        and row["client_id"] == token.client_id
    ):
        raise ContextInvalid()
    if (
        row["membership__revoked_at"] is not None
        or row["membership__principal_id"] != row["principal_id"]
        or row["membership__project_id"] != row["project_id"]
    ):
        # Before the context's own state: a membership revoke also revokes its contexts, and the caller
        # should learn the cause, not only the effect.
        raise PermissionDenied("The membership in this project is no longer active.")
    if row["revoked_at"] is not None:
        raise ContextRevoked()
    if row["expires_at"] <= now:
        raise ContextExpired()
    allowed_tools = row["allowed_tools"] or []
    held = frozenset(row["membership__permissions"] or [])
    purpose = str(row["purpose"])
    if purpose in TASK_PURPOSES:
        if row["run_id"] is None or row["run__superseded_at"] is not None or row["run__task_id"] != row["task_id"]:
            raise RunNotCurrent()
        lease_session = row["session_id"] if purpose == ContextPurpose.TASK_EXECUTION else row["parent_session_id"]
        expires = row["run__lease_expires_at"]
        if not (
            bool(lease_session) and row["run__lease_holder"] == lease_session and expires is not None and expires > now
        ):
            raise RunNotCurrent()
    return QueryScope(
        principal_id=int(row["principal_id"]),
        issuer=str(row["principal__issuer"]),
        subject=str(row["principal__subject"]),
        client_id=str(row["client_id"]),
        project_id=int(row["project_id"]),
        project_slug=str(row["project__slug"]),
        permissions=held,
        purpose=purpose,
        context_id=row["id"],
        session_id=str(row["session_id"]),
        task_id=row["task_id"],
        run_id=row["run_id"],
        execution_request_id=row["execution_request_id"],
        allowed_tools=frozenset(allowed_tools),
        unit_system=str(row["project__unit_system"]),
        timezone=str(row["project__timezone"] or "UTC"),
        quality_type=str(row["project__quality_type"]),
        headloss_formula=str(row["project__headloss_formula"]),
    )


def resolve_context(
    *,
    handle: str,
    token: VerifiedToken,
    tool_name: str | None = None,
    required_permissions: Sequence[str] = (),
    now: datetime | None = None,
) -> QueryScope:
    """Check a context handle for *this* call, right now, and build the ``QueryScope`` the query
    service will receive (R-CTX-3). One SQL query (``context_row_query``: the binding joined with its
    principal, project, membership and run), then ``check_context``. Refuses with:

    - ``ContextInvalid`` — unknown handle, or one bound to another issuer/subject/client (the same
      answer either way, so a handle's existence never leaks);
    - ``ContextRevoked`` / ``ContextExpired``;
    - ``PermissionDenied`` — the membership was revoked; with ``tool_name``, ``contexts.access.require_call``
      then refuses permissions in ``required_permissions`` the membership no longer grants, or
      ``ToolNotInContext`` (a ``PermissionDenied``) for a tool outside the binding;
    - ``RunNotCurrent`` — a task context whose run was superseded or whose lease lapsed or moved
      (``task_reader``: the parent session's lease).

    The token only has to *match* the binding: a newer token with wider scopes never widens it. The MCP
    hot path runs the same statement and the same checks on its own connection
    (``mcp_app.resolver.resolve_scope_async``).
    """
    if not context_handle_acceptable(handle):
        raise ContextInvalid()
    rows = cast("list[ContextRow]", list(context_row_query(handle)))
    scope = check_context(rows[0] if rows else None, token=token, now=now or timezone.now())
    access.require_call(scope, tool=tool_name or "", permissions=required_permissions, bound=tool_name is not None)
    return scope
