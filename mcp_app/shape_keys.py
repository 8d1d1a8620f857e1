"""Shape keys of ORM statements (``mcp_app.statement_cache``): the structure of a queryset's WHERE tree with
its values taken out, and the sentinel values that prove a compiled statement's parameters are exactly
those values. Pure functions over Django's query objects (their private parts fenced in
``mcp_app.django_internals``)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.core.exceptions import FieldError
from django.db.models import Count, QuerySet
from django.db.models.expressions import Col, Func
from django.db.models.lookups import Lookup
from django.db.models.sql.where import WhereNode

from mcp_app.django_internals import (
    iterable_class,
    prefetch_lookups,
    values_fields,
)

# --- compiling statements ------------------------------------------------------------------------------

_SCALARS = frozenset({int, str, float, Decimal, datetime, date, UUID})
_UNCACHEABLE = object()
_MAX_SHAPES = 1024


class _NotCacheable(Exception):
    """The statement's shape cannot be described safely: compile it on every call."""


def _sentinel_like(value: Any, n: int, family: int = 0, avoid: frozenset[Any] = frozenset()) -> Any:
    """A sentinel of ``value``'s type (and, for a datetime, its time zone), from one of the families
    (``CompiledFactory``): 0 large, 1 negative or far in the other direction, 2 small — never a value in
    ``avoid`` — and 3, family 1 with *far positive* integers, for a factory that refuses negative ones
    (Django refuses a negative slice bound)."""
    sentinel = _sentinel(type(value), n, family, avoid)
    if type(value) is datetime:
        sentinel = sentinel.replace(tzinfo=value.tzinfo)
    return sentinel


def _sentinel(kind: type, n: int, family: int = 0, avoid: frozenset[Any] = frozenset()) -> Any:
    """A value of the same type as a filter value, unique within one statement (fits int4 and text)."""
    if family == 3:
        if kind is int:
            return 2_000_003_000 + n  # still an int4
        family = 1
    if family == 2:  # small values: what a clamp or a threshold leaves alone when the large ones are cut
        step = 0
        while True:
            candidate = _small(kind, n + step * 64)
            if (type(candidate), candidate) not in avoid:
                return candidate
            step += 1
    sign = -1 if family == 1 else 1
    if kind is int:
        return sign * (1_000_003_000 + n)
    if kind is str:
        return f"\ue000tjwater-sentinel-{family}-{n}\ue000"
    if kind is float:
        return sign * (1.0e300 + n * 1.0e285)
    if kind is Decimal:
        return sign * Decimal(f"9876543210.{n:06d}")
    if kind is datetime:  # aware (USE_TZ): a naive one makes Django warn on every compile
        return datetime(2999 if family == 0 else 1901, 1, 1, 0, 0, 0, n, tzinfo=UTC)
    if kind is date:
        year = 2999 if family == 0 else 1901
        return date(year, 1, 1 + n) if n < 28 else date(year - 1, 1 + n % 12, 1 + n % 28)
    if kind is UUID:
        return UUID(int=(0xE000 if family == 0 else 0x1000) * 2**112 + n)
    raise _NotCacheable


def _small(kind: type, n: int) -> Any:
    if kind is int:
        return 2 + n
    if kind is str:
        return f"s{n}"
    if kind is float:
        return 0.5 + n
    if kind is Decimal:
        return Decimal(2 + n) / 4
    if kind is datetime:
        return datetime(2000, 1, 1, 0, 0, 0, n, tzinfo=UTC)
    if kind is date:
        return date(2000, 1 + n % 12, 1 + n % 28)
    if kind is UUID:
        return UUID(int=2 + n)
    raise _NotCacheable


def _walk_where(node: Any, key: list[Any], leaves: list[Any]) -> None:
    """Append the structure of a WHERE tree to ``key`` and its filter values to ``leaves``."""
    if isinstance(node, WhereNode):
        key.append(("(", type(node), node.connector, node.negated, len(node.children)))
        for child in node.children:
            _walk_where(child, key, leaves)
        key.append(")")
        return
    if not isinstance(node, Lookup):
        raise _NotCacheable  # NothingNode, ExtraWhere, subqueries, raw SQL…
    lhs = node.lhs
    if type(lhs) is not Col:
        raise _NotCacheable  # transforms, expressions
    head = (type(node), lhs.alias, lhs.target, lhs.output_field)
    rhs = node.rhs
    kind = type(rhs)
    if rhs is None or kind is bool:
        key.append((head, "literal", rhs))  # IS NULL / booleans may change the SQL text itself
    elif kind in _SCALARS:
        key.append((head, kind))
        leaves.append(rhs)
    elif kind in (list, tuple) and node.lookup_name == "in":
        kinds = tuple(type(v) for v in rhs)
        if not all(k in _SCALARS for k in kinds):
            raise _NotCacheable
        key.append((head, "in", kinds))
        leaves.extend(rhs)
    else:
        raise _NotCacheable


def _with_leaves(node: Any, values: list[Any]) -> Any:
    """A copy of a WHERE tree whose filter values are taken, in walk order, from ``values``."""
    if isinstance(node, WhereNode):
        copy = node.create(connector=node.connector, negated=node.negated)
        copy.children = [_with_leaves(child, values) for child in node.children]
        return copy
    rhs = node.rhs
    if rhs is None or type(rhs) is bool:
        return node
    if type(rhs) in (list, tuple):
        taken = [values.pop(0) for _ in rhs]
        return type(node)(node.lhs, type(rhs)(taken))
    return type(node)(node.lhs, values.pop(0))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _expression_key(expression: Any) -> tuple[Any, ...]:
    """The structure of an annotation that has no values of its own: a column, or a plain SQL function
    (``Func``: its template, joiner, ``function`` and other extras, output type) of such expressions —
    e.g. ``ST_X(geom)``. Anything else (a ``Value``, a window, an aggregate, a subquery, a GIS
    function that adapts its arguments…) is ``_NotCacheable``; ``_learn`` still proves every parameter."""
    kind = type(expression)
    if kind is Col:
        return (Col, expression.alias, expression.target, expression.output_field)
    if kind is not Func:
        raise _NotCacheable
    extra = tuple(sorted(expression.extra.items()))
    if not all(type(v) is str for _, v in extra):
        raise _NotCacheable
    try:
        output = type(expression.output_field)
    except FieldError:  # no declared output type and none to infer: not a shape to describe
        raise _NotCacheable from None
    return (
        Func,
        expression.template,
        expression.arg_joiner,
        extra,
        output,
        tuple(_expression_key(source) for source in expression.get_source_expressions()),
    )


def _shape_key(kind: str, queryset: QuerySet[Any]) -> tuple[tuple[Any, ...], list[Any]]:
    """(hashable shape key, filter values) of a queryset, or ``_NotCacheable``."""
    q = queryset.query
    if (
        q.extra
        or q.combinator
        or q.group_by is not None
        or q.select_for_update
        or q.distinct_fields
        or q.extra_order_by
        or q.extra_tables
        or q.subquery
        or prefetch_lookups(queryset)
    ):
        raise _NotCacheable
    key: list[Any] = [
        kind,
        q.model,
        iterable_class(queryset),
        values_fields(queryset),
        q.values_select,
        tuple(q.selected.items()) if q.selected else None,
        q.select,
        q.default_cols,
        q.default_ordering,
        q.standard_ordering,
        q.order_by,
        q.distinct,
        _freeze(q.select_related),
        (q.deferred_loading[0] and frozenset(q.deferred_loading[0]), q.deferred_loading[1]),
        tuple(
            (alias, join, getattr(join, "join_type", None), getattr(join, "nullable", None))
            for alias, join in q.alias_map.items()
        ),
        tuple(q.alias_refcount.items()),
        q.low_mark != 0,
        q.high_mark is not None,
        # A count of a sliced query keeps the slice as literals inside its subquery.
        (q.low_mark, q.high_mark) if kind == "count" else None,
        tuple((name, _expression_key(expression)) for name, expression in q.annotations.items()),
        tuple(q.annotation_select_mask) if q.annotation_select_mask is not None else None,
    ]
    leaves: list[Any] = []
    _walk_where(q.where, key, leaves)
    try:
        return tuple(key), leaves
    except TypeError:  # pragma: no cover - an unhashable part
        raise _NotCacheable from None


def _count_query(q: Any) -> Any:
    """The query ``QuerySet.count()`` would run (``Query.get_count``), without running it."""
    from django.db.models.sql.subqueries import AggregateQuery

    simple = not (q.is_sliced or q.distinct or q.combinator or q.annotations or isinstance(q.group_by, tuple))
    if simple:
        outer = q.clone()
        outer.select = ()
        outer.selected = None
        outer.default_cols = False
        outer.extra = {}
        outer.annotations = {"__count": Count("*").resolve_expression(outer, summarize=True)}
        outer.set_annotation_mask(["__count"])
    else:
        inner = q.clone()
        inner.subquery = True
        inner.clear_ordering(force=False)
        outer = AggregateQuery(q.model, inner)
        outer.annotations = {"__count": Count("*")}
    outer.clear_ordering(force=True)
    outer.clear_limits()
    outer.select_for_update = False
    outer.select_related = False
    return outer
