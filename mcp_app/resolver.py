"""The one place a call's ``QueryScope`` (project, principal, permissions, purpose) is decided.

Input is the verified token and the tool's arguments (for ``context_handle``); nothing in a tool's
input can choose the project (R-TOOL, R-CTX-6).

Two ways, chosen by settings:
- normal: the context handle is resolved by ``contexts.services.resolve_context`` (R-CTX-3), which
  re-checks the binding, the token's subject/client and the live membership on every call;
- development stand-in (issue 4): with ``TJWATER_DEV_PROJECT`` set (refused unless ``DEBUG``), every
  principal's calls go to that project through its live Membership there, and ``context_handle`` is
  ignored. This exists only until context handles are used everywhere; remove it then.
"""

from __future__ import annotations

from django.conf import settings

from contexts.errors import PermissionDenied, ProjectContextRequired
from contexts.models import Membership, Principal
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from queries.registry import ToolSpec


def resolve_scope(*, token: VerifiedToken, arguments: dict[str, object], tool: ToolSpec) -> QueryScope:
    """Turn (verified token, ``context_handle``) into the call's ``QueryScope`` or raise an
    ``ApplicationError``. Synchronous (ORM); the dispatch path runs it in a worker thread."""
    if settings.TJWATER_DEV_PROJECT:
        return _dev_project_scope(token)
    handle = arguments.get("context_handle")
    if not isinstance(handle, str) or not handle:
        raise ProjectContextRequired()
    from contexts.services import resolve_context

    # Permissions and the binding's tool list are checked by the dispatch path against this scope, so
    # that a tool the caller may not use is answered as unknown (R-PROTO-3).
    return resolve_context(handle=handle, token=token, tool_name=tool.name, required_permissions=())


def _dev_project_scope(token: VerifiedToken) -> QueryScope:
    # One query on the hot path: the live membership of (iss, sub) in the dev project.
    membership = (
        Membership.objects.select_related("project", "principal")
        .filter(
            principal__issuer=token.issuer,
            principal__subject=token.subject,
            project__slug=settings.TJWATER_DEV_PROJECT,
            revoked_at__isnull=True,
        )
        .first()
    )
    if membership is None:
        # Record the principal so an operator can grant it a membership; it gets nothing now.
        Principal.objects.get_or_create(issuer=token.issuer, subject=token.subject)
        raise PermissionDenied("You are not a member of this project.")
    principal = membership.principal
    return QueryScope(
        principal_id=principal.pk,
        issuer=principal.issuer,
        subject=principal.subject,
        client_id=token.client_id,
        project_id=membership.project_id,
        project_slug=membership.project.slug,
        permissions=frozenset(membership.permissions),
        purpose="ordinary_chat",
    )
