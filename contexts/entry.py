"""The gate new context bindings pass while the MCP entry may be turned off (issue 23 item 16).

The entry switch lives with the MCP endpoint (``mcp_app.entry``), above this app in the dependency graph
(contexts ← queries ← mcp_app), so it is registered here from ``McpAppConfig.ready()`` (STYLE: a lower
layer never imports a higher one). Without a registered gate, bindings are always allowed (the contexts
app on its own has no entry to turn off).
"""

from __future__ import annotations

from collections.abc import Callable

_gate: Callable[[], None] | None = None


def register_binding_gate(gate: Callable[[], None]) -> None:
    """``gate()`` runs inside the binding's transaction, before ``context_create``; it raises
    ``mcp_app.errors.McpDisabled`` to refuse, and may take locks that hold until the binding commits."""
    global _gate
    _gate = gate


def check_binding_allowed() -> None:
    if _gate is not None:
        _gate()
