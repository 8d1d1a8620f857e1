"""Input fuzzing with hypothesis over every registry tool (issue 9, "The resilience suite").

For each tool in ``queries.registry.all_tools()`` (the product families; the test-only tools are left
out) arguments are generated from its own input schema by a small strategy builder over the JSON Schema
keywords the registry uses (types, enums, bounds, lengths, required, ``additionalProperties``, local
``$ref``): schema-valid ones, invalid ones (wrong types, extra and missing properties, out-of-range
numbers, too-long strings, values outside an enum) and unicode edge cases (lone surrogates, NUL, RTL
marks, BOM, line separators, emoji, 10 000-character strings) in any string — the context handle
included. Each is sent as a real ``tools/call`` over HTTP to a real server, with alice's real context
handle on the demo project. Every answer is judged:

- never a 5xx, never a stack trace or SQL in the body (``Traceback``, ``psycopg``, ``SELECT ``,
  ``File "``);
- arguments the wire schema refuses (judged by the server's own compiled validator) are refused:
  JSON-RPC -32602, or an ``isError`` with a documented code — never a result;
- schema-valid arguments get a result, or an ``isError`` whose code is one of contexts/errors.py's
  codes (or "Unknown tool" for a tool outside alice's binding) — and bad input is never answered as
  retryable.

``RESILIENCE_FUZZ_EXAMPLES`` examples per tool and kind (12 in ``make test``, more under
``make resilience``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import httpx2
import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contexts import dev_issuer, errors
from evidence import errors as evidence_errors
from mcp_app import errors as mcp_errors
from mcp_app.catalog import build_catalog
from queries import errors as query_errors
from queries.registry import all_tools
from tests.resilience.load import LEAK_MARKERS
from tests.support.mcp_http import rpc_headers
from tests.support.resilience import Figures, launch_server
from tests.support.servers import ServerProcess, stop_process, subprocess_database_url
from tjwater.registry import TOOLS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

EXAMPLES = int(os.environ.get("RESILIENCE_FUZZ_EXAMPLES", "12"))
PROJECT = "tianjin-demo"  # the demo utility: alice holds every permission there
DOCUMENTED_CODES = frozenset(
    cls.code
    for module in (errors, query_errors, evidence_errors, mcp_errors)  # each app's errors (issue 18 §4)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, errors.ApplicationError)
)
EDGE_STRINGS = [
    "\ud800",  # lone high surrogate
    "\udfff",  # lone low surrogate
    "J\ud83d",  # half an emoji
    "\x00",
    "a\x00b",
    "\u202e10",  # right-to-left override
    "\u200f\u200e",  # RTL / LTR marks
    "\ufeffJ1",  # BOM
    "\u2028\u2029",  # line / paragraph separators
    "💧🚰" * 8,
    "e\u0301" * 40,  # combining marks
    "x" * 10_000,
    "🚰" * 3_000,
    "' OR 1=1 --",
    "%00%s%n",
    "../../etc/passwd",
    " ",
    "",
]


def product_tools() -> list[str]:
    return [t.name for t in TOOLS.product_tools()]


# --- strategies from a tool's input schema -------------------------------------------------------


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), f"only local refs are used by the registry: {ref}"
        schema = root["$defs"][ref.removeprefix("#/$defs/")]
    return schema


def valid_value(schema: dict[str, Any] | bool, root: dict[str, Any]) -> st.SearchStrategy[Any]:
    if isinstance(schema, bool):  # JSON Schema's boolean schemas: anything, or nothing
        return st.one_of(st.none(), st.integers(), st.text(max_size=5)) if schema else st.nothing()
    schema = _resolve(schema, root)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([valid_value(sub, root) for sub in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([valid_value({**schema, "type": k}, root) for k in kind])
    if kind == "string":
        if schema.get("format") == "date-time":
            return st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda v: schema.get("minLength", 0) <= len(v) <= schema.get("maxLength", 10**9)
            )
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(10**6) - 1) + 1)
        high = schema.get("maximum", schema.get("exclusiveMaximum", 10**6 + 1) - 1)
        return st.integers(min_value=low, max_value=high)
    if kind == "number":
        return st.floats(
            min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
            max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array" and "prefixItems" in schema:
        return st.tuples(*(valid_value(sub, root) for sub in schema["prefixItems"])).map(list)
    if kind == "array":
        items = valid_value(schema.get("items", {}), root)
        return st.lists(
            items,
            min_size=schema.get("minItems", 0),
            max_size=min(schema.get("maxItems", 5), 5),
            unique_by=(lambda v: json.dumps(v, sort_keys=True)) if schema.get("uniqueItems") else None,
        )
    if kind == "object" or "properties" in schema:
        return valid_object(schema, root)
    return st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))


def valid_object(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {name: valid_value(sub, root) for name, sub in properties.items() if name in required},
        optional={name: valid_value(sub, root) for name, sub in properties.items() if name not in required},
    )


WRONG_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.one_of(st.integers(), st.booleans(), st.none(), st.lists(st.text(max_size=3), max_size=2)),
    "integer": st.one_of(
        st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)), st.none()
    ),
    "number": st.one_of(st.text(max_size=5), st.booleans(), st.none(), st.just({"n": 1})),
    "boolean": st.one_of(st.integers(), st.text(max_size=5), st.none()),
    "array": st.one_of(st.text(max_size=5), st.integers(), st.just({"a": 1})),
    "object": st.one_of(st.text(max_size=5), st.integers(), st.lists(st.integers(), max_size=2)),
}


@st.composite
def invalid_arguments(draw: st.DrawFn, schema: dict[str, Any], handle: str) -> tuple[str, dict[str, Any]]:
    args = draw(valid_object(schema, schema))
    args["context_handle"] = handle
    properties = schema.get("properties", {})
    names = sorted(properties)
    mutation = draw(st.sampled_from(["wrong_type", "extra_property", "missing_required", "out_of_range", "enum"]))
    name = draw(st.sampled_from(names))
    prop = _resolve(properties[name], schema)
    kind = prop.get("type") if isinstance(prop.get("type"), str) else "string"
    if mutation == "extra_property":
        args[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in properties))] = draw(
            st.one_of(st.integers(), st.text(max_size=8))
        )
    elif mutation == "missing_required" and schema.get("required"):
        args.pop(draw(st.sampled_from(schema["required"])), None)
    elif mutation == "out_of_range" and kind in ("integer", "number") and ("minimum" in prop or "maximum" in prop):
        bound = draw(st.sampled_from([b for b in ("minimum", "maximum") if b in prop]))
        step = draw(st.integers(min_value=1, max_value=10**9))
        args[name] = prop[bound] - step if bound == "minimum" else prop[bound] + step
    elif mutation == "out_of_range" and kind == "string" and "maxLength" in prop:
        args[name] = "x" * (prop["maxLength"] + draw(st.integers(min_value=1, max_value=5000)))
    elif mutation == "enum" and "enum" in prop:
        args[name] = draw(st.text(max_size=20).filter(lambda v: v not in prop["enum"]))
    else:
        args[name] = draw(WRONG_TYPES.get(kind, WRONG_TYPES["string"]))
    return mutation, args


@st.composite
def unicode_arguments(draw: st.DrawFn, schema: dict[str, Any], handle: str) -> tuple[str, dict[str, Any]]:
    args = draw(valid_object(schema, schema))
    args["context_handle"] = handle
    strings = [n for n, p in schema.get("properties", {}).items() if _resolve(p, schema).get("type") == "string"]
    name = draw(st.sampled_from(strings))
    edge = draw(st.one_of(st.sampled_from(EDGE_STRINGS), st.text(st.characters(codec=None), min_size=1, max_size=30)))
    base = str(args.get(name, ""))
    args[name] = draw(st.sampled_from([edge, base + edge, edge + base]))
    return name, args


def unstorable_text(value: Any) -> bool:
    """A lone surrogate or a NUL anywhere: not text PostgreSQL (or UTF-8) can hold. The schema's
    ``string`` admits it, and issue 9 item 2 allows refusing it as a client error (-32602)."""
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(unstorable_text(k) or unstorable_text(v) for k, v in value.items())
    if isinstance(value, list):
        return any(unstorable_text(v) for v in value)
    return False


# --- the server and the judgement ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_server(demo_loaded: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server on the (committed) test database with the demo utility."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": subprocess_database_url(),
        "REDIS_URL": django_settings.REDIS_URL,
        "TJWATER_MCP_MAX_CONCURRENT": "16",
        "PYTHONUNBUFFERED": "1",
    }
    server = launch_server(env, tmp_path_factory.mktemp("fuzz"))
    yield server
    stop_process(server.process)


@pytest.fixture(scope="module")
def alice(fuzz_server: ServerProcess) -> tuple[str, str, frozenset[str]]:
    """alice's bearer token, a real context handle on the demo project (bound over the REST API) and
    the tools that binding allows."""
    bearer = dev_issuer.mint_token(
        subject="alice", client_id="tjwater-agent-mcp", scopes=["mcp.query", "mcp.context.bind"], ttl_s=3600
    )
    response = httpx2.post(
        f"{fuzz_server.url}/api/v1/mcp-query-contexts",
        json={"project": PROJECT, "session_id": "fuzz", "purpose": "ordinary_chat"},
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return bearer, str(body["context_handle"]), frozenset(body["tools"])


class Judge:
    """Sends one call and records what came back; ``problems`` lists every rule an answer broke."""

    catalog = None

    def __init__(self, server: ServerProcess, bearer: str, context_tools: frozenset[str]) -> None:
        self.server = server
        self.bearer = bearer
        self.context_tools = context_tools
        self.client = httpx2.Client(timeout=60)
        self.seen: Counter[str] = Counter()
        self.problems: list[str] = []
        if Judge.catalog is None:
            Judge.catalog = build_catalog()

    def wire_valid(self, tool: str, args: dict[str, Any]) -> bool:
        entry = self.catalog.get(tool) if self.catalog else None
        assert entry is not None, f"{tool} is not in the catalog"
        return bool(entry.validator.is_valid(args))

    def call(self, tool: str, args: dict[str, Any], label: str) -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": args,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        # ensure_ascii: lone surrogates travel as JSON escapes (they cannot be encoded as UTF-8).
        content = json.dumps(body, ensure_ascii=True).encode()
        response = self.client.post(
            f"{self.server.url}/mcp", content=content, headers=rpc_headers("tools/call", self.bearer, name=tool)
        )
        outcome = self.judge(response, tool=tool, args=args, valid=self.wire_valid(tool, args))
        self.seen[outcome] += 1
        if outcome.startswith("PROBLEM"):
            self.problems.append(f"{tool} [{label}] {outcome} args={json.dumps(args, ensure_ascii=True)[:300]}")

    def judge(self, response: httpx2.Response, *, tool: str, args: dict[str, Any], valid: bool) -> str:
        if response.status_code >= 500:
            return f"PROBLEM http_{response.status_code}"
        # A marker the caller sent itself (an element id "SELECT …" named back in a NOT_FOUND message) is
        # the caller's own text, not a leak.
        sent = json.dumps(args, ensure_ascii=False)
        leak = next((m for m in LEAK_MARKERS if m in response.text and m not in sent), None)
        if leak:
            return f"PROBLEM leak {leak.strip()!r}"
        # The SDK sends a JSON-RPC error for a request it refuses with HTTP 400 (a JSON body); any other
        # status would not carry a documented refusal.
        if response.status_code not in (200, 400):
            return f"PROBLEM http_{response.status_code}"
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        try:
            message = json.loads(events[-1]) if events else response.json()
        except ValueError:
            return f"PROBLEM http_{response.status_code} without a JSON-RPC body"
        if response.status_code == 400 and "error" not in message:
            return "PROBLEM http_400 without a JSON-RPC error"
        if "error" in message:
            code, text = message["error"].get("code"), str(message["error"].get("message", ""))
            if code == -32602 and not valid:
                return "refused -32602"
            if code == -32602 and text.startswith("Unknown tool") and tool not in self.context_tools:
                return "refused -32602 (tool not in this binding)"
            if code == -32602 and unstorable_text(args):
                return "refused -32602 (invalid text)"
            return f"PROBLEM rpc {code} ({text[:100]}) for {'schema-valid' if valid else 'schema-invalid'} arguments"
        result = message["result"]
        if not result.get("isError"):
            return "ok" if valid else "PROBLEM schema-invalid arguments were accepted"
        structured = result.get("structuredContent") or {}
        code = structured.get("code")
        if code not in DOCUMENTED_CODES:
            return f"PROBLEM undocumented code {code}"
        if structured.get("retryable"):
            return f"PROBLEM bad input answered as retryable {code}"
        return f"refused {code}"


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)


def _schema(tool: str) -> dict[str, Any]:
    return next(t.input_schema for t in all_tools() if t.name == tool)


def _finish(judge: Judge, figures: Figures, name: str) -> None:
    figures.record(name, {"answers": dict(judge.seen), "problems": judge.problems[:20]})
    assert judge.problems == [], "\n".join(judge.problems[:20])


@pytest.mark.parametrize("tool", product_tools())
def test_fuzz_valid_arguments(
    tool: str, fuzz_server: ServerProcess, alice: tuple[str, str, frozenset[str]], figures: Figures
) -> None:
    bearer, handle, context_tools = alice
    judge = Judge(fuzz_server, bearer, context_tools)
    schema = _schema(tool)

    @FUZZ
    @given(valid_object(schema, schema))
    def run(args: dict[str, Any]) -> None:
        judge.call(tool, {**args, "context_handle": handle}, "valid")

    run()
    _finish(judge, figures, f"fuzz.valid.{tool}")


@pytest.mark.parametrize("tool", product_tools())
def test_fuzz_invalid_arguments(
    tool: str, fuzz_server: ServerProcess, alice: tuple[str, str, frozenset[str]], figures: Figures
) -> None:
    bearer, handle, context_tools = alice
    judge = Judge(fuzz_server, bearer, context_tools)
    schema = _schema(tool)

    @FUZZ
    @given(invalid_arguments(schema, handle))
    def run(case: tuple[str, dict[str, Any]]) -> None:
        judge.call(tool, case[1], case[0])

    run()
    _finish(judge, figures, f"fuzz.invalid.{tool}")


@pytest.mark.parametrize("tool", product_tools())
def test_fuzz_unicode_edge_cases(
    tool: str, fuzz_server: ServerProcess, alice: tuple[str, str, frozenset[str]], figures: Figures
) -> None:
    bearer, handle, context_tools = alice
    judge = Judge(fuzz_server, bearer, context_tools)
    schema = _schema(tool)

    @FUZZ
    @given(unicode_arguments(schema, handle))
    def run(case: tuple[str, dict[str, Any]]) -> None:
        judge.call(tool, case[1], f"unicode in {case[0]}")

    run()
    _finish(judge, figures, f"fuzz.unicode.{tool}")


HARD_CASES = ["\ud800", "a\x00b", "\u202e" + "x" * 20]  # a lone surrogate, NUL, an RTL override


@pytest.mark.parametrize("tool", product_tools())
def test_hard_unicode_in_every_string_argument(
    tool: str, fuzz_server: ServerProcess, alice: tuple[str, str, frozenset[str]], figures: Figures
) -> None:
    """Deterministic, on top of the random cases: each string argument of each tool (the context handle
    included) carrying a lone surrogate, a NUL and an RTL override, alone and after a valid value."""
    bearer, handle, context_tools = alice
    judge = Judge(fuzz_server, bearer, context_tools)
    schema = _schema(tool)
    base = baseline_arguments(schema, handle)
    strings = [n for n, p in schema["properties"].items() if _resolve(p, schema).get("type") == "string"]
    for name in strings:
        for edge in HARD_CASES:
            for value in (edge, f"{base.get(name, '')}{edge}"):
                judge.call(tool, {**base, name: value}, f"{name}={value[:12]!r}")
    _finish(judge, figures, f"fuzz.hard_unicode.{tool}")


def minimal_value(schema: dict[str, Any] | bool, root: dict[str, Any]) -> Any:
    """A small schema-valid value, chosen deterministically."""
    if isinstance(schema, bool):
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return minimal_value(schema[key][0], root)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "string":
        return "a" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return schema.get("minimum", schema.get("maximum", 0))
    if kind == "boolean":
        return False
    if kind == "array" and "prefixItems" in schema:
        return [minimal_value(sub, root) for sub in schema["prefixItems"]]
    if kind == "array":
        return [minimal_value(schema.get("items", {}), root) for _ in range(schema.get("minItems", 0))]
    if kind == "object" or "properties" in schema:
        return {n: minimal_value(schema["properties"][n], root) for n in schema.get("required", [])}
    return None


def baseline_arguments(schema: dict[str, Any], handle: str) -> dict[str, Any]:
    """The smallest schema-valid arguments, with alice's real handle."""
    return {**minimal_value(schema, schema), "context_handle": handle}
