"""Which tools a context gets (SPEC R-TOOL-1): the live tool catalog a binding is narrowed from.

The catalog is read from the project's tool registry (``tjwater.registry.TOOLS``), so ``contexts`` never
names a higher app's modules; ``contexts.access.tools_for_binding`` narrows it for one membership and
purpose. Used by ``contexts.services.context_create``'s callers (the REST view, the admin, tests).
"""

from __future__ import annotations

from django.conf import settings

from tjwater.registry import TOOLS


def tool_catalog() -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """The live tool catalog for binding: (tool → required permissions, task-scoped tools), read from the
    project's tool registry (``tjwater.registry.TOOLS``: the apps register their families into it, so
    ``contexts`` never names a higher app's modules), narrowed by ``TJWATER_MCP_EXPOSED_TOOLS`` when set."""
    catalog = TOOLS.permission_catalog()
    exposed = frozenset(settings.TJWATER_MCP_EXPOSED_TOOLS)
    if exposed:
        catalog = {name: required for name, required in catalog.items() if name in exposed}
    return catalog, TOOLS.task_scoped()
