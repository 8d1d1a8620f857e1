"""The tool registry every app registers its tool families into (NetBox-style: ``AppConfig.ready()``).

The bottom layer of the project: ``contexts`` (which binds tools to contexts), ``queries`` (which declares
most of them and their ``ToolSpec``), ``evidence`` (the task tools) and ``mcp_app`` all read it, and none of
them names another app's modules to find tools — a family is visible because its app registered it, not
because a list of dotted paths says so. The objects are ``queries.registry.ToolSpec``; this module only
needs what ``DeclaredTool`` names.

A family registered ``test_only`` (e.g. the pg_sleep tool that proves cancellation) is served only while
``TJWATER_MCP_TEST_TOOLS`` is on, and one registered with a ``setting`` (the analysis tools:
``TJWATER_MCP_ANALYSIS_TOOLS``, off by default, seed 000) only while that setting is on — both read at call
time (tests switch them).

A tool's ``effect`` (``read``, or ``submit``/``cancel`` for the tools that start or stop work) is what the
binding and the dispatch path ask of it: action tools need the ``mcp.analysis.run`` scope as well as their
permissions (``contexts.access``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class DeclaredTool(Protocol):
    """What the registry and ``contexts`` read of a tool declaration (``queries.registry.ToolSpec``)."""

    @property
    def name(self) -> str: ...

    @property
    def permissions(self) -> tuple[str, ...]: ...

    @property
    def task_scope(self) -> str: ...

    @property
    def effect(self) -> str: ...


@dataclass(frozen=True)
class _Family:
    app: str
    name: str
    tools: tuple[DeclaredTool, ...]
    test_only: bool
    setting: str = ""


class ToolRegistry:
    def __init__(self) -> None:
        self._families: list[_Family] = []

    def register(
        self, *, app: str, family: str, tools: Iterable[DeclaredTool], test_only: bool = False, setting: str = ""
    ) -> None:
        """Add one family (idempotent per ``app`` × ``family``: ``ready()`` may run twice in tests). A tool
        name declared by two families is a programming error, refused here. ``setting``: the family is
        served only while that Django setting is true."""
        declared = tuple(tools)
        if any(f.app == app and f.name == family for f in self._families):
            return
        taken = {tool.name: f"{f.app}:{f.name}" for f in self._families for tool in f.tools}
        for tool in declared:
            if tool.name in taken:
                raise ImproperlyConfigured(f"tool {tool.name} is declared twice ({taken[tool.name]}, {app}:{family})")
        self._families.append(_Family(app, family, declared, test_only, setting))

    def _served(self, family: _Family, with_tests: bool) -> bool:
        if family.test_only and not with_tests:
            return False
        return not family.setting or bool(getattr(settings, family.setting, False))

    def tools(self) -> list[DeclaredTool]:
        """Every served tool, sorted by name (the stable catalog order, R-PROTO-5)."""
        with_tests = bool(getattr(settings, "TJWATER_MCP_TEST_TOOLS", False))
        served = [tool for f in self._families if self._served(f, with_tests) for tool in f.tools]
        return sorted(served, key=lambda tool: tool.name)

    def declared_actions(self) -> list[DeclaredTool]:
        """Every action tool a deployment can serve, whatever the settings say (REST serves them on its own
        gates: the run scope, the permission and the project's compute), sorted by name."""
        tools = (t for f in self._families if not f.test_only for t in f.tools if t.effect != "read")
        return sorted(tools, key=lambda t: t.name)

    def action_tools(self) -> frozenset[str]:
        """The served tools that start or stop work (``effect`` not ``read``)."""
        return frozenset(tool.name for tool in self.tools() if tool.effect != "read")

    def product_tools(self) -> list[DeclaredTool]:
        """The tools a default deployment serves: test-only families and switched ones (``setting``) left
        out, whatever the settings say."""
        served = (tool for f in self._families if not f.test_only and not f.setting for tool in f.tools)
        return sorted(served, key=lambda t: t.name)

    def permission_catalog(self) -> dict[str, frozenset[str]]:
        """Tool name → the permission codes it requires."""
        return {tool.name: frozenset(tool.permissions) for tool in self.tools()}

    def task_scoped(self) -> frozenset[str]:
        """Tools that only read the bound task."""
        return frozenset(tool.name for tool in self.tools() if tool.task_scope == "bound_task")


#: The process's registry.
TOOLS = ToolRegistry()
