"""The one place that decides whether a caller may use a tool (R-TOOL-1, R-TOOL permissions).

Every edge asks here — the MCP dispatch path today, the REST API with it — so a refusal is the same
decision and the same code on both. Permission codes come from the registry declaration of the tool;
the caller's permissions come from the live membership (``QueryScope.permissions``, re-read on every
call). Argument-dependent needs (e.g. the history comparison modes, which also read simulation data)
are checked by the service itself with ``scope.require`` — still shared by every edge.
"""

from __future__ import annotations

from contexts.errors import PermissionDenied
from contexts.scope import QueryScope
from queries.registry import ToolSpec


def missing_permissions(spec: ToolSpec, scope: QueryScope) -> list[str]:
    """The permission codes ``spec`` needs that the caller does not hold now (sorted)."""
    return sorted(p for p in spec.permissions if not scope.has(p))


def may_use(spec: ToolSpec, scope: QueryScope, *, bound_tools: bool = True) -> bool:
    """True when the caller holds every permission of the tool now and — for a context binding
    (``bound_tools``) — the tool is in the binding's tools. An empty binding allows nothing."""
    if missing_permissions(spec, scope):
        return False
    return not bound_tools or spec.name in scope.allowed_tools


def require_tool(spec: ToolSpec, scope: QueryScope, *, bound_tools: bool = True) -> None:
    """Raise ``PermissionDenied`` (naming the missing codes) unless ``may_use``."""
    missing = missing_permissions(spec, scope)
    if missing:
        raise PermissionDenied(details={"missing_permissions": missing})
    if bound_tools and spec.name not in scope.allowed_tools:
        raise PermissionDenied("This tool is not in the context's tools.")
