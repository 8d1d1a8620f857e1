"""The generic tool catalog: exposed-tool allowlist ∩ registry (R-TOOL-1).

The same for every caller — no per-caller filtering — which is what makes ``tools/list`` cacheable as
public (R-PROTO-5). What one caller may *call* is narrowed on each call by the dispatch path. Built once
per process: input validators are compiled here, with a ``$ref`` registry that is empty, so a remote
``$ref`` can never be fetched (R-PROTO-4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types
from django.conf import settings
from jsonschema import Draft202012Validator
from referencing import Registry

from mcp_app.schema_check import Check, InputCheck, fast_check
from queries.registry import ToolSpec, all_tools


@dataclass(frozen=True)
class CatalogEntry:
    spec: ToolSpec
    tool: types.Tool
    validator: Draft202012Validator
    #: ``is_valid`` with the fast predicate first (continuations of the inline cut are checked with it).
    checker: InputCheck
    #: ``mcp_app.schema_check``'s compiled predicate (accepts only), None where jsonschema alone decides.
    fast_check: Check | None = None
    #: Whether the schema declares ``x-mcp-header`` parameters (``Mcp-Param-*`` headers to compare).
    has_header_params: bool = True


class Catalog:
    """Tools by name, in stable (name) order, with their compiled input validators."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        exposed = frozenset(settings.TJWATER_MCP_EXPOSED_TOOLS)
        self.entries: dict[str, CatalogEntry] = {}
        for spec in sorted(specs, key=lambda s: s.name):
            if exposed and spec.name not in exposed:
                continue
            Draft202012Validator.check_schema(spec.input_schema)
            tool = types.Tool(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                input_schema=spec.input_schema,
                output_schema=spec.output_schema,
                annotations=types.ToolAnnotations.model_validate(spec.annotations),
            )
            # An empty Registry resolves only local refs ("#/$defs/…"); anything else is Unresolvable.
            validator = Draft202012Validator(spec.input_schema, registry=Registry())
            fast = fast_check(spec.input_schema)
            self.entries[spec.name] = CatalogEntry(
                spec=spec,
                tool=tool,
                validator=validator,
                fast_check=fast,
                has_header_params=declares_header_params(spec.input_schema),
                checker=InputCheck(validator, fast),
            )
        self.tools: list[types.Tool] = [entry.tool for entry in self.entries.values()]

    def get(self, name: str) -> CatalogEntry | None:
        return self.entries.get(name)

    def input_schema(self, name: str) -> dict[str, Any] | None:
        entry = self.entries.get(name)
        return entry.spec.input_schema if entry else None

    def header_param_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of a tool whose ``Mcp-Param-*`` headers need comparing, else None (unknown
        tool, or a schema that declares no header parameters: the SDK's check could find nothing)."""
        entry = self.entries.get(name)
        return entry.spec.input_schema if entry is not None and entry.has_header_params else None


def declares_header_params(schema: Any) -> bool:
    """Whether ``validate_mcp_param_headers`` (SDK, ``mcp.shared.inbound``) has anything to compare for
    this schema: it checks only the annotated (``x-mcp-header``) positions of a valid declaration, so a
    schema with none — or with an invalid one, which the SDK ignores — can never be refused by it."""
    from mcp.shared.inbound import find_invalid_x_mcp_header

    from mcp_app.sdk import annotated_header_positions

    return find_invalid_x_mcp_header(schema) is None and any(True for _ in annotated_header_positions(schema))


def build_catalog() -> Catalog:
    return Catalog(all_tools())
