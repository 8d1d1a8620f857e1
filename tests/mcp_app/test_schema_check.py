"""The compiled argument check (``mcp_app.schema_check``) decides exactly as jsonschema does.

For every catalog tool whose schema compiles, generated argument sets — near-valid ones built from the
schema (enum members, lengths and numbers at and beyond each bound, strings matching each pattern) mixed
with arbitrary JSON (booleans for integers, integral and non-finite floats, nested values, unknown
keys, missing required keys) — get the same verdict from the predicate and from
``Draft202012Validator.is_valid``. The dispatch path trusts the predicate's "valid" without asking
jsonschema, so a disagreement here would be a weakened check.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from mcp_app.catalog import build_catalog
from mcp_app.dispatch import validate_arguments
from mcp_app.schema_check import Unsupported, compile_schema, fast_check

CATALOG = build_catalog()
NAN = math.nan  # one NaN object: jsonschema's ``equal`` finds it equal to itself (``is``)
COMPILED = [entry for entry in CATALOG.entries.values() if entry.fast_check is not None]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 1.0, 2.0, 0.5, math.nan, math.inf, True, False]),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


def near(schema: Any) -> st.SearchStrategy[Any]:
    """Values at the edges of one property schema (valid and just invalid), and arbitrary JSON."""
    if not isinstance(schema, dict):
        return json_values
    options: list[st.SearchStrategy[Any]] = [json_values]
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
        options.append(st.sampled_from([e + "x" for e in schema["enum"]] + [e.upper() for e in schema["enum"]]))
    if "pattern" in schema:
        options.append(st.from_regex(schema["pattern"], fullmatch=False))
    for key in ("minLength", "maxLength"):
        if key in schema:
            n = schema[key]
            options.append(st.sampled_from([max(0, n - 1), n, n + 1]).map(lambda k: "a" * k))
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            b = schema[key]
            options.append(st.sampled_from([b - 1, b, b + 1, float(b), b + 0.5, b - 0.5]))
    for key in ("minItems", "maxItems"):
        if key in schema:
            n = schema[key]
            item = near(schema.get("items", {}))
            options.append(st.lists(item, min_size=max(0, n - 1), max_size=n + 1))
    if schema.get("type") == "array" or "items" in schema:
        options.append(st.lists(near(schema.get("items", {})), max_size=5))
        if schema.get("uniqueItems"):  # a repeated item, as given and with its keys in another order
            repeated = st.lists(near(schema.get("items", {})), min_size=1, max_size=4)
            options.append(repeated.map(lambda xs: [*xs, xs[0]]))
            options.append(repeated.map(lambda xs: [*xs, _reordered(xs[0])]))
    if "oneOf" in schema:  # each alternative's own edges (and values valid under several)
        options.extend(near(alternative) for alternative in schema["oneOf"])
    if schema.get("type") == "object" or "properties" in schema:
        options.append(arguments_for(schema))
    return st.one_of(options)


def _reordered(value: Any) -> Any:
    return dict(reversed(list(value.items()))) if isinstance(value, dict) else value


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    if not properties:
        return st.dictionaries(st.text(max_size=8), json_values, max_size=3)
    fixed = {name: near(sub) for name, sub in properties.items()}
    return st.builds(
        lambda present, extra: {**present, **extra},
        st.fixed_dictionaries({}, optional=fixed),
        st.dictionaries(st.sampled_from(["unknown", "offset", "limit", "x"]), json_values, max_size=1),
    )


@pytest.mark.parametrize("entry", COMPILED, ids=[e.spec.name for e in COMPILED])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_compiled_check_agrees_with_jsonschema(entry: Any, data: st.DataObject) -> None:
    arguments = data.draw(arguments_for(entry.spec.input_schema))
    assert entry.fast_check(arguments) == entry.validator.is_valid(arguments), arguments
    # The catalog's ``checker`` (the inline cut's continuation check: the predicate first) decides alike.
    assert entry.checker.is_valid(arguments) == entry.validator.is_valid(arguments), arguments


@pytest.mark.parametrize("entry", list(CATALOG.entries.values()), ids=list(CATALOG.entries))
def test_the_checker_decides_as_jsonschema_where_nothing_compiled(entry: Any) -> None:
    for arguments in ({}, {"context_handle": "h" * 43}, {"context_handle": 1}, {"unknown": True}):
        assert entry.checker.is_valid(arguments) == entry.validator.is_valid(arguments), arguments


def test_the_hot_tools_compile() -> None:
    compiled = {entry.spec.name for entry in COMPILED}
    # The perf-anchors call and the other single-lookup tools take the fast path.
    assert {"get_element_properties", "list_elements", "get_network_options"} <= compiled
    # Series and rankings too (uniqueItems, oneOf): their continuations are checked on every cut page.
    assert {"query_element_history", "query_scada_readings", "rank_model_baseline", "rank_scada_deviation"} <= compiled
    assert compiled == set(CATALOG.entries)


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer"}, [1, 2.0, -7], [True, 1.5, "1", None, math.nan]),
        ({"type": "number", "minimum": 0}, [0, 0.5, 3], [-1, False, "0"]),
        ({"type": "number", "minimum": 0}, [math.nan], []),  # jsonschema: NaN < 0 is false → valid
        ({"enum": ["a", "b"]}, ["a"], ["c", 1, None, ["a"]]),
        ({"type": "string", "pattern": "^x"}, ["xy"], ["yx", 5]),
        ({"type": "string", "maxLength": 2}, ["ab", "\U0001f600\U0001f600"], ["abc"]),
        ({"type": "array", "prefixItems": [{"type": "string"}], "items": False}, [[], ["a"]], [["a", "b"], [1]]),
        # jsonschema's equality: 1 equals 1.0, True does not equal 1, key order does not matter, a NaN
        # equals only itself (the same object).
        (
            {"uniqueItems": True},
            [
                [],
                [{"a": 1}],
                [{"a": 1}, {"a": True}],
                [{"a": [1]}, {"a": [True]}],
                [{"a": math.nan}, {"a": float("nan")}],
                [1, True],
                [1, "1"],
                "not an array",
            ],
            [
                [{"a": 1}, {"a": 1.0}],
                [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
                [{"a": NAN}, {"a": NAN}],
                [1, 1.0],
                [[1], [1.0]],
                [{"a": {"b": None}}, {"a": {"b": None}}],
            ],
        ),  # fmt: skip
        ({"uniqueItems": False}, [[1, 1]], []),
        (
            {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 2}]},
            [1, 1.5 + 1, -3],
            [2, 3.0, "x", 1.5],
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            [{"a": "x"}],
            [{}, {"a": 1}, {"a": "x", "b": 1}, []],
        ),
        (
            {"if": {"properties": {"k": {"enum": ["p"]}}}, "then": {"required": ["id"]}},
            [{"k": "q"}, {"k": "p", "id": 1}],
            [{"k": "p"}],
        ),
    ],
)
def test_keyword_semantics_match_jsonschema(schema: dict[str, Any], good: list[Any], bad: list[Any]) -> None:
    check = compile_schema(schema)
    validator = Draft202012Validator(schema)
    for value in good:
        assert check(value) and validator.is_valid(value), value
    for value in bad:
        assert not check(value) and not validator.is_valid(value), value


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x"},
        {"patternProperties": {"^a": {}}},
        {"anyOf": [{"type": "string"}]},
        {"not": {"type": "string"}},
        {"uniqueItems": "yes"},
        {"oneOf": []},
        {"enum": [1, 2]},
        {"additionalProperties": {"type": "string"}},
        {"type": "string", "pattern": "("},
    ],
)
def test_anything_else_is_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert fast_check(schema) is None
    if "pattern" not in schema:
        with pytest.raises(Unsupported):
            compile_schema(schema)


def test_a_failure_is_still_named_by_jsonschema() -> None:
    entry = CATALOG.get("get_element_properties")
    assert entry is not None and entry.fast_check is not None
    with pytest.raises(Exception) as err:
        validate_arguments(entry, {"context_handle": "h" * 20, "element_type": "hydrant", "element_id": "J-1"})
    assert "element_type: fails 'enum'" in str(err.value)
