"""The one place a call's ``QueryScope`` (project, principal, permissions, purpose) is decided.

Input is the verified token and the ``context_handle`` the caller sent; nothing else in a tool's input
can choose the project (R-TOOL, R-CTX-6). The handle is resolved on the event loop with the statement and
the checks of ``contexts.selectors.resolve_context`` (R-CTX-3), which re-check the binding, the token's
issuer, subject and client, expiry, revocation, the live membership and — for task purposes — the run
and its lease, on every call, in every process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.utils import timezone

from contexts.errors import ContextInvalid, ProjectContextRequired
from contexts.scope import QueryScope
from contexts.selectors import check_context, context_handle_acceptable, context_row_query_by_hash, hash_handle
from contexts.tokens import VerifiedToken
from mcp_app.statement_cache import CompiledFactory
from tjwater import telemetry

# Where ``resources/read`` carries the handle (R-CTX-6: the application namespace of ``_meta``).
RESOURCE_HANDLE_META_KEY = "cn.tjwater/contextHandle"
RESOURCE_HANDLE_MISSING = (
    f'resources/read needs a context handle in _meta["{RESOURCE_HANDLE_META_KEY}"]; create a context for a '
    "project first."
)


def _handle(value: object, missing: str | None = None) -> str:
    if not isinstance(value, str) or not value:
        # No handle: the caller is in a personal session or forgot to bind one (R-CTX-1).
        raise ProjectContextRequired(missing)
    return value


_ROW_SQL: CompiledFactory | None = None


def _row_sql() -> CompiledFactory:
    """``context_row_query`` compiled once per process (the ORM builds and compiles it only here)."""
    global _ROW_SQL
    if _ROW_SQL is None:
        _ROW_SQL = CompiledFactory(context_row_query_by_hash, "0" * 64)
    return _ROW_SQL


def handle_key(handle: object) -> str | None:
    """The SHA-256 a handle is stored and looked up by, or None for text that cannot be one of ours
    (``context_handle_acceptable``) — worked out once per call: the tenant hints and the resolution both
    use it (``mcp_app.dispatch``)."""
    return hash_handle(handle) if context_handle_acceptable(handle) else None  # type: ignore[arg-type]


#: Runs one plan statement and returns its rows (``mcp_app.pool.QueryDatabase.fetch``).
Fetch = Callable[[Any], Awaitable[Any]]


@telemetry.traced("mcp.context.resolve")
async def resolve_scope_async(
    *, token: VerifiedToken, handle: object, fetch: Fetch, missing: str | None = None, key: str | None = None
) -> QueryScope:
    """``contexts.selectors.resolve_context`` on the event loop: the same statement (``context_row_query``,
    compiled once as a ``CompiledFactory``) run through the MCP driver, then the same checks (``check_context``);
    the row is re-read from PostgreSQL on every call, never cached (R-CTX-3). No handle →
    ``ProjectContextRequired`` (``missing`` is its message). Which tools the scope may call is decided by
    the caller with ``contexts.access`` (one check per call). ``key``: the handle's ``handle_key``, when the
    caller has it already."""
    value = _handle(handle, missing)
    if key is None:
        if not context_handle_acceptable(value):
            raise ContextInvalid()
        key = hash_handle(value)
    rows = await fetch(_row_sql().bind(key))
    return check_context(rows[0] if rows else None, token=token, now=timezone.now())
