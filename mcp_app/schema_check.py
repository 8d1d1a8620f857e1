"""A compiled fast path for the argument check of ``tools/call`` (issue 10).

``jsonschema``'s ``Draft202012Validator`` is the authority on a tool's arguments, but walking a schema
generically per call is a measurable share of it (``mcp_app/README.md`` "Measuring"). ``compile_schema`` turns
a schema that uses only the keywords below into one Python predicate, with jsonschema's semantics for each
(``tests/mcp_app/test_schema_check.py`` compares the two on generated valid and invalid arguments for every
catalog tool):

- ``type`` (``integer`` includes integral floats and excludes booleans, ``number`` excludes booleans),
  ``enum`` of strings, ``minLength``/``maxLength`` (code points), ``pattern`` (``re.search``),
  ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``;
- ``properties``, ``required``, ``additionalProperties`` (``false``/``true`` only), ``items``,
  ``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems``, ``allOf``, ``oneOf``, ``if``/``then``/``else``,
  boolean schemas;
- annotations, which validate nothing: ``description``, ``title``, ``default``, ``examples``,
  ``$schema``, ``format`` (no format checker is configured — ``mcp_app.catalog``), ``deprecated``,
  ``readOnly``, ``writeOnly``.

Any other keyword (``$ref``, ``patternProperties``, ``anyOf``, ``not``…) makes the schema ``Unsupported``:
that tool is checked by jsonschema alone. Each keyword's predicate is exact (True iff jsonschema finds no
error), which ``if`` and ``oneOf`` rely on; the dispatch path still only trusts an *accept*: an argument
set it rejects goes to jsonschema, which decides and names the failing rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sized
from typing import Any

from jsonschema._utils import uniq as _jsonschema_uniq

Check = Callable[[Any], bool]

ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$schema", "format", "deprecated", "readOnly", "writeOnly"}
)


class Unsupported(Exception):
    """The schema uses something this compiler does not implement: use jsonschema for it."""


def _is_number(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and value == value  # NaN is no JSON number


def _is_numeric(value: Any) -> bool:
    """jsonschema's "number" type: ints and floats, never booleans."""
    return type(value) is int or type(value) is float


def _type_check(name: str) -> Check:
    if name == "string":
        return lambda v: type(v) is str
    if name == "integer":
        return lambda v: type(v) is int or (type(v) is float and v.is_integer())
    if name == "number":
        return lambda v: type(v) is int or type(v) is float
    if name == "boolean":
        return lambda v: type(v) is bool
    if name == "object":
        return lambda v: type(v) is dict
    if name == "array":
        return lambda v: type(v) is list
    if name == "null":
        return lambda v: v is None
    raise Unsupported(f"type {name!r}")


def _all(checks: list[Check]) -> Check:
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(c(v) for c in checks)


def compile_schema(schema: Any) -> Check:
    """The predicate for ``schema`` (True: valid), or ``Unsupported``."""
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if not isinstance(schema, dict):
        raise Unsupported("schema is not an object")
    checks: list[Check] = []
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        checks.append(_keyword(key, value, schema))
    return _all(checks)


#: minLength/maxLength (strings) and minItems/maxItems (arrays): (the type they apply to, lower bound?).
_SIZE_KEYWORDS: dict[str, tuple[type[Sized], bool]] = {
    "minLength": (str, True),
    "maxLength": (str, False),
    "minItems": (list, True),
    "maxItems": (list, False),
}


def _size_check(key: str, value: Any) -> Check:
    if type(value) is not int:
        raise Unsupported(key)
    kind, lower = _SIZE_KEYWORDS[key]
    n = value
    if lower:
        return lambda v: type(v) is not kind or len(v) >= n
    return lambda v: type(v) is not kind or len(v) <= n


def _keyword(key: str, value: Any, schema: dict[str, Any]) -> Check:  # noqa: C901 - one branch per keyword
    if key == "type":
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise Unsupported("type")
        tests = [_type_check(n) for n in names]
        return tests[0] if len(tests) == 1 else (lambda v: any(t(v) for t in tests))
    if key == "enum":
        if not isinstance(value, list) or not all(type(x) is str for x in value):
            raise Unsupported("enum of non-strings")
        allowed = frozenset(value)
        return lambda v: type(v) is str and v in allowed
    if key in _SIZE_KEYWORDS:
        return _size_check(key, value)
    if key == "pattern":
        if not isinstance(value, str):
            raise Unsupported(key)
        search = re.compile(value).search
        return lambda v: type(v) is not str or search(v) is not None
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not _is_number(value):
            raise Unsupported(key)
        bound = value
        numeric = _is_numeric
        # Written as jsonschema's own tests (an error when ``v < bound`` …), so NaN behaves the same.
        if key == "minimum":
            return lambda v: not numeric(v) or not v < bound
        if key == "maximum":
            return lambda v: not numeric(v) or not v > bound
        if key == "exclusiveMinimum":
            return lambda v: not numeric(v) or not v <= bound
        return lambda v: not numeric(v) or not v >= bound
    if key == "properties":
        if not isinstance(value, dict):
            raise Unsupported(key)
        subs = tuple((name, compile_schema(sub)) for name, sub in value.items())

        def properties(v: Any) -> bool:
            if type(v) is not dict:
                return True
            for name, check in subs:
                if name in v and not check(v[name]):
                    return False
            return True

        return properties
    if key == "required":
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise Unsupported(key)
        names = tuple(value)
        return lambda v: type(v) is not dict or all(n in v for n in names)
    if key == "additionalProperties":
        if value is True:
            return lambda v: True
        if value is not False or "patternProperties" in schema:
            raise Unsupported("additionalProperties other than false/true")
        known = frozenset(schema.get("properties", {}))
        return lambda v: type(v) is not dict or known.issuperset(v)
    if key == "prefixItems":
        if not isinstance(value, list):
            raise Unsupported(key)
        prefix = tuple(compile_schema(s) for s in value)
        return lambda v: type(v) is not list or all(c(x) for c, x in zip(prefix, v, strict=False))
    if key == "items":
        check = compile_schema(value)
        skip = len(schema.get("prefixItems", ()))
        return lambda v: type(v) is not list or all(check(x) for x in v[skip:])
    if key == "uniqueItems":
        if type(value) is not bool:
            raise Unsupported(key)
        return _unique if value else (lambda v: True)
    if key == "oneOf":
        if not isinstance(value, list) or not value:
            raise Unsupported(key)
        alternatives = tuple(compile_schema(s) for s in value)

        def one_of(v: Any) -> bool:
            matched = 0
            for check in alternatives:
                if check(v):
                    matched += 1
                    if matched > 1:
                        return False
            return matched == 1

        return one_of
    if key == "allOf":
        if not isinstance(value, list) or not value:
            raise Unsupported(key)
        return _all([compile_schema(s) for s in value])
    if key == "if":
        condition = compile_schema(value)
        then = compile_schema(schema.get("then", True))
        otherwise = compile_schema(schema.get("else", True))
        return lambda v: then(v) if condition(v) else otherwise(v)
    if key in ("then", "else"):
        return lambda v: True  # applied through "if" (alone they validate nothing)
    raise Unsupported(f"keyword {key!r}")


def _unique(v: Any) -> bool:
    """``uniqueItems: true`` as jsonschema decides it (``jsonschema._utils.uniq``). A list of two or more
    objects cannot be sorted, so jsonschema compares every pair with its ``equal`` (``1`` equals ``1.0``,
    ``True`` does not equal ``1``, key order does not matter); the same equality as hashable keys
    (``_key``) decides in one pass. Any other list goes to ``uniq`` itself (its sorted path has quirks,
    e.g. with NaN, that an exact check must keep)."""
    if type(v) is not list or len(v) < 2:
        return True
    if all(type(x) is dict for x in v):
        try:
            keys = {_key(x) for x in v}
        except _NotJson:
            return bool(_jsonschema_uniq(v))
        return len(keys) == len(v)
    return bool(_jsonschema_uniq(v))


class _NotJson(Exception):
    """A value no JSON document holds (``_key`` cannot say how jsonschema compares it)."""


def _key(v: Any) -> Any:
    """A hashable key equal for two JSON values exactly when jsonschema's ``equal`` says they are equal:
    numbers by value (``1 == 1.0``; a NaN only equals itself, as ``is`` and tuple comparison agree), booleans
    apart from numbers, arrays in order, objects by their members."""
    t = type(v)
    if t is str:
        return ("s", v)
    if t is bool:
        return ("b", v)
    if t is int or t is float:
        return ("n", v)
    if v is None:
        return ("z",)
    if t is list:
        return ("l", tuple(_key(x) for x in v))
    if t is dict and all(type(k) is str for k in v):
        return ("d", frozenset((k, _key(x)) for k, x in v.items()))
    raise _NotJson


class InputCheck:
    """``is_valid`` of a tool's input: the compiled predicate first (it accepts only what jsonschema
    accepts), jsonschema where it cannot tell. The inline cut checks every continuation it offers with it
    (``mcp_app.inline``): jsonschema alone was ≈ 17 % of a maximal ``list_elements`` call's CPU (``py-spy``,
    ``mcp_app/README.md`` "Measuring")."""

    __slots__ = ("fast", "validator")

    def __init__(self, validator: Any, fast: Check | None) -> None:
        self.validator = validator
        self.fast = fast

    def is_valid(self, instance: Any) -> bool:
        return (self.fast is not None and self.fast(instance)) or bool(self.validator.is_valid(instance))


def fast_check(schema: Any) -> Check | None:
    """``compile_schema`` or None when the schema is not supported."""
    try:
        return compile_schema(schema)
    except (Unsupported, re.error):
        return None
