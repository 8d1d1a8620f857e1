"""``manage.py mcp_catalog_check``: is the tool catalog sound, and is a running server ready (SPEC R-OPS)?

Offline (default), every registry tool must have: a valid JSON Schema 2020-12 input schema that is a closed
object (``additionalProperties: false``) with a required ``context_handle`` string and only local ``$ref``s;
an output schema built from its Pydantic model; known permission codes; limits within the spec's ceilings
(pages ≤ 500, analysis runs ≤ 100, offset ≤ 10000, ≤ 20 targets); a description; the registry in a stable
(name) order without duplicates; and seed 001's legacy-command table (``queries.legacy``) must map every
legacy command to a registry tool or an explicit "not offered" reason. Prints a table; exits 1 naming
every problem.

``--url URL (--token T | --client-credentials) [--project SLUG | --context-handle=H] [--json]`` checks a
running server (``mcp_app.readiness``): prints each check and then ``ready``; exits 0 when ready, 2 when
not ready (unreachable, a dependency down — retry later) and 3 when misconfigured (a deployment fix).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.core.management.base import BaseCommand, CommandError, CommandParser
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from contexts.models import Permission
from mcp_app.readiness import LiveCheck, overall
from queries.legacy import LEGACY_COMMANDS
from queries.registry import ToolSpec, all_tools
from queries.schemas.common import MAX_LIMIT, MAX_OFFSET

# The spec's ceilings (R-PAGE-1/2): the largest page, analysis-run page, offset and target count a tool
# may accept. Task evidence paging has its own byte ceiling (R-PAGE-4) and is checked by its service.
CEILINGS = {"limit": MAX_LIMIT, "offset": MAX_OFFSET, "targets": 20}
PAGE_CEILINGS = {"list_analysis_runs": 100}
BYTE_PAGED = {"get_task_context", "get_task_evidence"}
TIME_SERIES_POINTS = 10000
EXIT_NOT_READY = 2
EXIT_MISCONFIGURED = 3


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
    # Task tools read only the bound task itself and need no data permission (R-CTX-4, rule 2 of
    # contexts.services.READER_QUERY_PERMISSIONS); every other tool must name one.
    if not tool.permissions and tool.task_scope != "bound_task":
        problems.append(f"{tool.name}: no required permission")
    unknown = [p for p in tool.permissions if p not in known]
    if unknown:
        problems.append(f"{tool.name}: unknown permission codes {unknown}")
    if not tool.description.strip():
        problems.append(f"{tool.name}: no description")
    problems.extend(check_limits(tool))
    return problems


def check_limits(tool: ToolSpec) -> list[str]:
    """The wire schema's bounds stay within the spec's ceilings (R-PAGE-1/2)."""
    if tool.name in BYTE_PAGED:
        return []
    problems = []
    properties = tool.input_schema.get("properties", {})
    limit = properties.get("limit", {})
    ceiling = PAGE_CEILINGS.get(tool.name, MAX_LIMIT)
    if limit and limit.get("maximum", float("inf")) > max(ceiling, TIME_SERIES_POINTS if "start" in properties else 0):
        problems.append(f"{tool.name}: limit maximum {limit.get('maximum')} over the ceiling {ceiling}")
    offset = properties.get("offset", {})
    if offset and offset.get("maximum", float("inf")) > MAX_OFFSET:
        problems.append(f"{tool.name}: offset maximum over {MAX_OFFSET}")
    for name, prop in properties.items():
        if prop.get("type") == "array" and name not in ("center", "data_path", "fields"):
            if prop.get("maxItems", float("inf")) > CEILINGS["targets"]:
                problems.append(f"{tool.name}: {name} allows more than {CEILINGS['targets']} targets")
    return problems


def check_legacy(tools: list[ToolSpec]) -> list[str]:
    """Every legacy command maps to a registry tool, or says why it is not offered."""
    names = {tool.name for tool in tools}
    problems = []
    for command in LEGACY_COMMANDS:
        if command.decision == "tool" and command.tool not in names:
            problems.append(f"legacy {command.command!r}: maps to {command.tool!r}, which is not in the registry")
        if command.decision != "tool" and not command.note.strip():
            problems.append(f"legacy {command.command!r}: not offered without a reason")
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
    problems.extend(check_legacy(tools))
    return problems


def catalog_table(tools: list[ToolSpec]) -> str:
    rows = [("tool", "permissions", "max page", "evidence")]
    for tool in tools:
        limit = tool.input_schema.get("properties", {}).get("limit", {}).get("maximum", "-")
        rows.append((tool.name, " ".join(tool.permissions) or "(bound task)", str(limit), str(tool.evidence_allowed)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def mcp_endpoint(url: str) -> str:
    """The ``/mcp`` endpoint of ``url``, given either the server's base URL (``http://host:8000``, also
    under a path prefix) or the endpoint itself (``http://host:8000/mcp``, a trailing slash allowed)."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    if not path.endswith("/mcp"):
        path += "/mcp"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class Command(BaseCommand):
    help = "Check the tool registry offline, or whether a running server is ready (--url)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url", help="check a running server instead of the local registry: its base URL or its /mcp URL"
        )
        parser.add_argument("--token", help="bearer token for --url (mcp.query and mcp.context.bind for the call)")
        parser.add_argument(
            "--client-credentials", action="store_true", help="get the token from the issuer (this service's client)"
        )
        parser.add_argument("--project", help="project to bind the short-lived context of the harmless call to")
        parser.add_argument(
            "--context-handle",
            help="use this context for the harmless call instead; write --context-handle=H (a handle may begin with -)",
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output (monitoring)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["url"]:
            self._live(options)
            return
        tools = all_tools()
        problems = check_catalog(tools)
        if options["json"]:
            self.stdout.write(json.dumps({"status": "ok" if not problems else "problems", "problems": problems}))
        if problems:
            for problem in problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(problems)} catalog problem(s)", returncode=1)
        if not options["json"]:
            self.stdout.write(f"catalog ok: {len(tools)} tools, {len(LEGACY_COMMANDS)} legacy commands mapped")
            self.stdout.write(catalog_table(tools))

    def _live(self, options: dict[str, Any]) -> None:
        token = options["token"]
        if options["client_credentials"]:
            from mcp_app.management.commands.mcp_token import fetch_client_credentials_token

            token = fetch_client_credentials_token(scope="mcp.catalog.read mcp.query mcp.context.bind")
        if not token:
            raise CommandError("--url needs --token or --client-credentials", returncode=EXIT_MISCONFIGURED)
        checks = LiveCheck(
            mcp_endpoint(options["url"]),
            token,
            project=options["project"],
            context_handle=options["context_handle"],
            service_client=bool(options["client_credentials"]),
        ).run()
        status = overall(checks)
        verdict = {"ok": "ready", "not_ready": "not ready", "misconfigured": "misconfigured"}[status]
        if options["json"]:
            body = {"status": verdict, "checks": [c.__dict__ for c in checks], "url": options["url"]}
            self.stdout.write(json.dumps(body))
        else:
            for check in checks:
                self.stdout.write(f"{check.status:<13} {check.name:<16} {check.detail}")
            self.stdout.write(verdict)
        if status == "not_ready":
            raise CommandError("the server is not ready", returncode=EXIT_NOT_READY)
        if status == "misconfigured":
            raise CommandError("the server is misconfigured", returncode=EXIT_MISCONFIGURED)
