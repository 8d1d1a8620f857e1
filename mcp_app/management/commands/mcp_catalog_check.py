"""``manage.py mcp_catalog_check``: offline check of the tool registry (SPEC R-OPS).

Every registry tool must have: a valid JSON Schema 2020-12 input schema that is a closed object
(``additionalProperties: false``) with a required ``context_handle`` string and only local ``$ref``s; a
valid output schema; known permission codes; a description; and the registry must list tools in a
stable (name) order without duplicates. Exits 1 listing every problem. (``--url``, the live check
against a running server, is not implemented yet.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from contexts.models import Permission
from queries.registry import ToolSpec, all_tools


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def check_tool(tool: ToolSpec) -> list[str]:
    problems: list[str] = []
    known = {p.value for p in Permission}
    schemas = {"input": tool.input_schema}
    try:
        schemas["output"] = tool.output_schema
    except Exception as exc:  # noqa: BLE001 - any failure to build the schema is a catalog problem to report
        problems.append(f"{tool.name}: output schema cannot be built ({type(exc).__name__})")
    for kind, schema in schemas.items():
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            problems.append(f"{tool.name}: {kind} schema is not valid JSON Schema 2020-12 ({exc.message})")
        remote = [ref for ref in _refs(schema) if not ref.startswith("#")]
        if remote:
            problems.append(f"{tool.name}: {kind} schema has non-local $ref {remote}")
    schema = tool.input_schema
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        problems.append(f"{tool.name}: input schema must be an object with additionalProperties: false")
    if (
        "context_handle" not in schema.get("required", [])
        or schema.get("properties", {}).get("context_handle", {}).get("type") != "string"
    ):
        problems.append(f"{tool.name}: input schema must require a context_handle string (R-CTX-6)")
    for forbidden in ("project", "project_id", "principal", "network", "token"):
        if forbidden in schema.get("properties", {}):
            problems.append(f"{tool.name}: input must not choose {forbidden}")
    if not tool.permissions:
        problems.append(f"{tool.name}: no required permission")
    unknown = [p for p in tool.permissions if p not in known]
    if unknown:
        problems.append(f"{tool.name}: unknown permission codes {unknown}")
    if not tool.description.strip():
        problems.append(f"{tool.name}: no description")
    return problems


def check_catalog(tools: list[ToolSpec]) -> list[str]:
    problems: list[str] = []
    names = [t.name for t in tools]
    if names != sorted(names):
        problems.append("registry order is not stable (not sorted by name)")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"duplicate tool names {duplicates}")
    for tool in tools:
        problems.extend(check_tool(tool))
    return problems


class Command(BaseCommand):
    help = "Check the tool registry offline: schemas, permissions, stable order."

    def handle(self, *args: Any, **options: Any) -> None:
        tools = all_tools()
        problems = check_catalog(tools)
        if problems:
            for problem in problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(problems)} catalog problem(s)", returncode=1)
        self.stdout.write(f"catalog ok: {len(tools)} tools")
