"""``manage.py mcp_catalog_check``: offline check of the tool registry (SPEC R-OPS).

Every registry tool must have: a valid JSON Schema 2020-12 input schema that is a closed object
(``additionalProperties: false``) with a required ``context_handle`` string and only local ``$ref``s; a
valid output schema; known permission codes; a description; and the registry must list tools in a
stable (name) order without duplicates. Exits 1 listing every problem.

``--url URL --token TOKEN [--context-handle H]`` checks a running server instead: the 401 challenge
without credentials, the protected-resource metadata, ``server/discover`` (2026-07-28, tools and
resources only), ``tools/list`` (sorted, valid schemas) and, with a context handle, one harmless call
(``get_network_schema``) whose result must validate against its output schema. It never runs model
inference. (The live cancellation probe of SPEC R-OPS is not implemented.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
from django.core.management.base import BaseCommand, CommandError, CommandParser
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry

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


PROTOCOL = "2026-07-28"


def _rpc(url: str, token: str | None, method: str, params: dict[str, Any], name: str | None = None) -> httpx2.Response:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": method,
    }
    if name:
        headers["mcp-name"] = name
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return httpx2.post(url, json=body, headers=headers, timeout=30)


def _reply(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1]) if data else {}
    return response.json()


def check_live(url: str, token: str, context_handle: str | None) -> list[str]:
    """Check a running server at ``url`` (its /mcp endpoint)."""
    problems: list[str] = []
    anonymous = _rpc(url, None, "tools/list", {})
    challenge = anonymous.headers.get("www-authenticate", "")
    if anonymous.status_code != 401 or "resource_metadata=" not in challenge or "error=" in challenge:
        problems.append(
            f"no-credentials request: want 401 with resource_metadata and no error code, got {anonymous.status_code}"
        )
    prm_url = (
        challenge.split('resource_metadata="', 1)[-1].split('"', 1)[0] if "resource_metadata=" in challenge else ""
    )
    if prm_url:
        prm = httpx2.get(prm_url, timeout=10)
        if prm.status_code != 200 or prm.json().get("resource") != url:
            problems.append("protected-resource metadata missing or naming another resource")
    discover = _reply(_rpc(url, token, "server/discover", {})).get("result", {})
    if discover.get("supportedVersions") != [PROTOCOL]:
        problems.append(f"server/discover: supportedVersions {discover.get('supportedVersions')}")
    capabilities = set(discover.get("capabilities", {})) - {"extensions"}
    if capabilities != {"tools", "resources"}:
        problems.append(f"server/discover: capabilities {sorted(capabilities)} (want tools, resources)")
    listing = _reply(_rpc(url, token, "tools/list", {})).get("result", {})
    tools = listing.get("tools", [])
    names = [t.get("name") for t in tools]
    if not tools or names != sorted(names):
        problems.append("tools/list: empty or not sorted by name")
    for tool in tools:
        for key in ("inputSchema", "outputSchema"):
            try:
                Draft202012Validator.check_schema(tool.get(key) or {})
            except SchemaError:
                problems.append(f"tools/list: {tool.get('name')} has an invalid {key}")
    if context_handle and "get_network_schema" in names:
        schema = next(t["outputSchema"] for t in tools if t["name"] == "get_network_schema")
        arguments = {"context_handle": context_handle, "kind": "junction"}
        reply = _reply(
            _rpc(url, token, "tools/call", {"name": "get_network_schema", "arguments": arguments}, "get_network_schema")
        )
        result = reply.get("result", {})
        if result.get("isError") or result.get("resultType") != "complete":
            problems.append(
                f"harmless call get_network_schema failed: {result.get('structuredContent') or reply.get('error')}"
            )
        else:
            try:
                Draft202012Validator(schema, registry=Registry()).validate(result.get("structuredContent"))
            except ValidationError:
                problems.append("harmless call: structuredContent does not match outputSchema")
    return problems


class Command(BaseCommand):
    help = "Check the tool registry offline (schemas, permissions, stable order), or a running server with --url."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", help="check a running server's /mcp endpoint instead of the local registry")
        parser.add_argument("--token", help="bearer token for --url (mcp.catalog.read and mcp.query)")
        parser.add_argument("--context-handle", help="context handle for the harmless call (--url)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["url"]:
            if not options["token"]:
                raise CommandError("--url needs --token")
            try:
                problems = check_live(options["url"], options["token"], options["context_handle"])
            except (httpx2.HTTPError, ValueError) as exc:
                raise CommandError(f"the server could not be checked ({type(exc).__name__})", returncode=1) from None
            if problems:
                for problem in problems:
                    self.stderr.write(problem)
                raise CommandError(f"{len(problems)} live check problem(s)", returncode=1)
            self.stdout.write(f"live check ok: {options['url']}")
            return
        tools = all_tools()
        problems = check_catalog(tools)
        if problems:
            for problem in problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(problems)} catalog problem(s)", returncode=1)
        self.stdout.write(f"catalog ok: {len(tools)} tools")
