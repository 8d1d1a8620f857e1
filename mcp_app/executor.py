"""The async driver of query plans on the MCP hot path (STYLE "reads", issue 10).

A query service is a plan (``queries.plan``): it yields ORM statements and never does I/O. REST views,
Celery and tests run plans with ``run_sync`` through Django's connection; ``/mcp`` runs the very same
plans here, on the event loop, on a psycopg ``AsyncConnectionPool`` of its own:

- **no worker thread and no Django connection handling per call** — the statement is compiled to SQL
  (``query.get_compiler("default").as_sql()``) and executed with ``await``;
- **compiled once per statement shape** — the ORM compile of a queryset costs hundreds of µs; a shape
  (model, selected columns, joins, ordering, and the *structure* of the WHERE tree with its values taken
  out) is compiled the first time it is seen, then only its values are re-bound (see ``_Shape``).
  A shape is cached only after a second compile with unique sentinel values proved that every
  parameter of the SQL is one of the filter values (so nothing the key does not describe can vary);
  anything the walker does not understand (expressions, subqueries, GIS lookups, annotations other
  than plain SQL functions of columns such as ``ST_X(geom)``…) is compiled on every call, which is
  always correct. LIMIT/OFFSET, which Django inlines as literals, are
  bound as parameters instead, so every page of a collection shares one shape and one prepared plan;
- **rows identical to ``run_sync``** — the connections use Django's own adapter template (jsonb loaded
  as text, timestamptz as aware UTC datetimes, PostGIS types as text) and the compiler's row converters
  are applied (geometries, JSON, …); ``tests/mcp_app/test_executor.py`` compares both drivers for every
  registry tool;
- **session-level read-only and budget** — ``default_transaction_read_only=on`` and
  ``statement_timeout`` are set in the connection's start-up packet: no BEGIN/SET/COMMIT round trips.
  The budget is the whole call's, not each statement's (issue 23 item 12): a plan's first statement
  runs under the session's timeout (the whole budget), each later one under what is left of it (one
  ``set_config`` before it), and the session's value is restored before the connection goes back
  (``Execution``);
  Statements run in autocommit: a plan that yields several statements (a count and a page) reads one
  snapshot per statement. Accepted for the current families — the network model changes only by a
  re-import, so at worst one call's ``total`` and page straddle an import, and the result says when it
  was read (``queried_at``); a family that needs one snapshot must say so (``Plan`` in one READ ONLY
  transaction is then one BEGIN more, see ``run_plan(..., snapshot=True)``);
- **server-side prepared statements** — psycopg prepares a statement after ``prepare_threshold``
  executions on a connection, so the resolve query and the tool queries are planned once per connection;
- **cancellation down to PostgreSQL** (R-PROTO-6) — each statement runs in a task of its own, shielded
  from the call's cancel scope; when the call is cancelled (the client went away) the driver sends
  PostgreSQL a cancel for that backend, waits (shielded) until the statement has really stopped, and
  only then lets the cancellation go on. After a cancel no further statement of the plan starts, and
  nothing is ever committed (read-only autocommit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID

import anyio
import psycopg
from django.contrib.gis.db.models.fields import get_srid_info
from django.core.exceptions import EmptyResultSet, FieldError
from django.db import connections
from django.db.models import Count, QuerySet
from django.db.models.expressions import Col, Func
from django.db.models.lookups import Lookup
from django.db.models.sql.where import WhereNode
from psycopg.pq import ExecStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from contexts.errors import DataSourceUnavailable, QueryTimeout
from mcp_app.django_internals import (
    FlatValuesListIterable,
    NamedValuesListIterable,
    ValuesIterable,
    ValuesListIterable,
    create_namedtuple_class,
    iterable_class,
    prefetch_lookups,
    values_fields,
)
from queries.plan import Bound, CountOf, Plan, Raw, Statement, raw_rows, remaining_ms
from tjwater import metrics, telemetry

logger = logging.getLogger(__name__)
audit = logging.getLogger("tjwater.audit")

R = TypeVar("R")
DB_ALIAS = "default"
TUPLES_OK = ExecStatus.TUPLES_OK

# --- compiling statements ------------------------------------------------------------------------------

_SCALARS = frozenset({int, str, float, Decimal, datetime, date, UUID})
_UNCACHEABLE = object()
_MAX_SHAPES = 1024


class _NotCacheable(Exception):
    """The statement's shape cannot be described safely: compile it on every call."""


def _sentinel_like(value: Any, n: int, family: int = 0, avoid: frozenset[Any] = frozenset()) -> Any:
    """A sentinel of ``value``'s type (and, for a datetime, its time zone), from one of three families
    (``Template``): 0 large, 1 negative or far in the other direction, 2 small — never a value in
    ``avoid``."""
    sentinel = _sentinel(type(value), n, family, avoid)
    if type(value) is datetime:
        sentinel = sentinel.replace(tzinfo=value.tzinfo)
    return sentinel


def _sentinel(kind: type, n: int, family: int = 0, avoid: frozenset[Any] = frozenset()) -> Any:
    """A value of the same type as a filter value, unique within one statement (fits int4 and text)."""
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


@dataclass(frozen=True)
class Compiled:
    """One statement ready to run: SQL with ``%s`` placeholders, its parameters, and how to shape rows."""

    sql: str
    params: tuple[Any, ...]
    shape: _Shape | None  # None: nothing can match (an empty IN list…): no SQL is sent
    empty: Any = None  # the rows of a statement that cannot match: [] or, for a count, 0


@dataclass(frozen=True)
class _Shape:
    """What is reused between statements of the same shape: the SQL, where each parameter comes from,
    and the row conversion (Django's converters, names of ``.values()``)."""

    sql: str
    param_map: tuple[int, ...]  # SQL parameter i is filter value param_map[i]
    sliced: tuple[bool, bool]  # (has OFFSET, has LIMIT) bound as parameters at the end
    kind: str  # "values" | "tuples" | "flat" | "named" | "count" | "raw"
    names: tuple[str, ...]
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]
    col_count: int
    tuple_class: Any = None
    statement: Raw | None = None  # kind "raw": the statement (its columns)

    def rows(self, raw: Sequence[Sequence[Any]]) -> Any:
        if self.kind == "count":
            return int(raw[0][0]) if raw else 0
        if self.kind == "raw":
            return raw_rows(self.statement, raw)  # type: ignore[arg-type]
        connection = _converter_connection()
        out: list[Any] = []
        converters = self.converters
        n = self.col_count
        for record in raw:
            row = list(record[:n]) if converters or len(record) != n else record
            for pos, convs, expression in converters:
                value = row[pos]
                for converter in convs:
                    value = converter(value, expression, connection)
                row[pos] = value
            out.append(row)
        if self.kind == "values":
            names = self.names
            return [dict(zip(names, row, strict=False)) for row in out]
        if self.kind == "tuples":
            return [tuple(row) for row in out]
        if self.kind == "flat":
            return [row[0] for row in out]
        new = tuple.__new__
        return [new(self.tuple_class, row) for row in out]


_CONVERTER_CONNECTION: list[Any] = []


def _converter_connection() -> Any:
    """The Django connection wrapper Django's row converters are given (they read its operations and
    features, never run SQL): looked up once — ``connections[...]`` is a context-local lookup that cost
    ≈ 3 % of a call's GIL time when done per statement."""
    if not _CONVERTER_CONNECTION:
        _CONVERTER_CONNECTION.append(connections[DB_ALIAS])
    return _CONVERTER_CONNECTION[0]


def _row_kind(queryset: QuerySet[Any]) -> str:
    iterable = iterable_class(queryset)
    if iterable is ValuesIterable:
        return "values"
    if iterable is FlatValuesListIterable:
        return "flat"
    if iterable is NamedValuesListIterable:
        return "named"
    if iterable is ValuesListIterable:
        return "tuples"
    raise TypeError(
        f"the MCP driver runs .values()/.values_list() querysets only, not {queryset.model.__name__} instances"
    )


def _compile_query(query: Any, kind: str, queryset: QuerySet[Any] | None) -> tuple[str, tuple[Any, ...], _Shape]:
    compiler = query.get_compiler(DB_ALIAS)
    if kind == "count":
        sql, params = compiler.as_sql()
        return sql, tuple(params), _Shape(sql, (), (False, False), "count", (), (), 1)
    sql, params = compiler.as_sql(with_limits=False)
    fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
    converters = tuple((pos, tuple(convs), expr) for pos, (convs, expr) in compiler.get_converters(fields).items())
    assert queryset is not None
    if query.selected:
        names = tuple(query.selected)
    else:
        names = (*query.extra_select, *query.values_select, *query.annotation_select)
    tuple_class = None
    if kind == "named":
        tuple_class = create_namedtuple_class(*(values_fields(queryset) or names))
    shape = _Shape(
        sql,
        (),
        (query.low_mark != 0, query.high_mark is not None),
        kind,
        names,
        converters,
        compiler.col_count,
        tuple_class,
    )
    return sql, tuple(params), shape


def _limit_clause(shape: _Shape, query: Any) -> tuple[str, tuple[int, ...]]:
    has_offset, has_limit = shape.sliced
    if has_limit and has_offset:
        return " LIMIT %s OFFSET %s", (query.high_mark - query.low_mark, query.low_mark)
    if has_limit:
        return " LIMIT %s", (query.high_mark,)
    if has_offset:
        return " OFFSET %s", (query.low_mark,)
    return "", ()


class StatementCompiler:
    """Compiles plan statements to SQL, caching per shape (one instance per process)."""

    def __init__(self, max_shapes: int = _MAX_SHAPES) -> None:
        self._shapes: dict[tuple[Any, ...], _Shape | object] = {}
        self._templates: dict[tuple[Any, ...], Template | object] = {}
        self.max_shapes = max_shapes
        self.hits = 0
        self.misses = 0

    def compile(self, statement: Statement) -> Compiled:
        if isinstance(statement, Bound):
            return self._compile_bound(statement)
        if isinstance(statement, Raw):
            shape = _Shape(statement.sql, (), (False, False), "raw", tuple(statement.columns), (), 0, None, statement)
            return Compiled(statement.sql, tuple(statement.params), shape)
        if isinstance(statement, CountOf):
            return self._compile_queryset(statement.queryset, "count")
        if isinstance(statement, QuerySet):
            if statement.query.high_mark is None:
                # Every collection is bounded in SQL (R-PAGE-1); an unsliced queryset is a bug in the plan.
                raise ValueError(f"unbounded queryset in a query plan: {statement.model.__name__}")
            return self._compile_queryset(statement, _row_kind(statement))
        raise TypeError(f"a query plan yielded {type(statement).__name__}, not a statement")

    def _compile_bound(self, bound: Bound) -> Compiled:
        """A prepared statement: its ``Template`` for this shape (static arguments, value types), made on
        first use; a factory that is not a template is built and compiled on every call instead."""
        prepared, args = bound.prepared, bound.args
        n = prepared.static
        static, values = args[:n], args[n:]
        try:
            key = (prepared, static, tuple(type(v) for v in values))
            template = self._templates.get(key)
        except TypeError:  # an unhashable static argument
            return self.compile(bound.build())
        if template is None:
            try:
                template = Template(lambda *vs: prepared.factory(*static, *vs), *values)
            except (_NotCacheable, ValueError, TypeError, EmptyResultSet):
                template = _UNCACHEABLE
            if len(self._templates) >= self.max_shapes:
                self._templates.clear()
            if self.max_shapes:
                self._templates[key] = template
        if isinstance(template, Template):
            self.hits += 1
            return template.bind(*values)
        return self.compile(bound.build())

    def _compile_queryset(self, queryset: QuerySet[Any], kind: str) -> Compiled:
        query = queryset.query
        try:
            key, leaves = _shape_key(kind, queryset)
        except _NotCacheable:
            key, leaves = None, []
        if key is not None:
            shape = self._shapes.get(key)
            if isinstance(shape, _Shape):
                self.hits += 1
                params = tuple(leaves[i] for i in shape.param_map)
                if kind == "count":
                    return Compiled(shape.sql, params, shape)
                tail, limits = _limit_clause(shape, query)
                return Compiled(shape.sql + tail, params + limits, shape)
        self.misses += 1
        built = _count_query(query) if kind == "count" else query
        try:
            sql, params, shape = _compile_query(built, kind, queryset)
        except EmptyResultSet:
            return Compiled("", (), None, 0 if kind == "count" else [])
        if key is not None and self.max_shapes and key not in self._shapes:
            self._learn(key, leaves, query, kind, queryset, sql, params, shape)
        if kind == "count":
            return Compiled(sql, params, shape)
        tail, limits = _limit_clause(shape, query)
        return Compiled(sql + tail, params + limits, shape)

    def _learn(
        self,
        key: tuple[Any, ...],
        leaves: list[Any],
        query: Any,
        kind: str,
        queryset: QuerySet[Any],
        sql: str,
        params: tuple[Any, ...],
        shape: _Shape,
    ) -> None:
        """Cache a shape after proving, with a compile on sentinel values, that each SQL parameter is
        exactly one filter value (no parameter the key does not describe) and the SQL text is the same."""
        if len(self._shapes) >= self.max_shapes:
            self._shapes.clear()
        try:
            sentinels = [_sentinel_like(v, i) for i, v in enumerate(leaves)]
            probe = query.clone()
            probe.where = _with_leaves(query.where, list(sentinels))
            built = _count_query(probe) if kind == "count" else probe
            probe_sql, probe_params, _ = _compile_query(built, kind, queryset)
            index = {(type(s), s): i for i, s in enumerate(sentinels)}
            param_map = tuple(index[(type(p), p)] for p in probe_params)
        except (_NotCacheable, EmptyResultSet, KeyError, TypeError, ValueError):
            self._shapes[key] = _UNCACHEABLE
            return
        rebound = tuple(leaves[i] for i in param_map)
        if (
            probe_sql != sql
            or len(rebound) != len(params)
            or any(type(a) is not type(b) or a != b for a, b in zip(rebound, params, strict=True))
        ):
            self._shapes[key] = _UNCACHEABLE
            return
        self._shapes[key] = _Shape(
            sql,
            param_map,
            shape.sliced,
            shape.kind,
            shape.names,
            shape.converters,
            shape.col_count,
            shape.tuple_class,
        )


class Template:
    """A statement written with the ORM once and bound many times: ``factory(*args)`` must build the same
    statement shape for any arguments of the example's types, each argument reaching the SQL unchanged
    as one parameter. ``bind(*args)`` then costs no ORM work at all.

    The rules a factory must follow (``queries.plan.prepared`` documents them for service authors): it
    passes each argument into the statement unchanged (no ``min``/``max``, rounding, defaults or other
    transformation), never decides the statement's shape from an argument's value (no ``if`` on a value,
    no value-dependent column or lookup — put such a choice in a static argument, which keys its own
    template), and uses every argument.

    Proved at creation by compiling the example and three sentinel sets (large, negative or far, and
    small values that avoid every constant seen): the SQL must be identical in all four; every parameter
    must be the same argument in all three sentinel compiles (and equal the example's value), or the
    same constant in all four (e.g. the bound LIMIT; a constant equal to one of the example's arguments
    is accepted only because the small sentinels, whose values differ, gave it too); and every argument
    must reach the SQL — else ``ValueError`` (the factory is not a template). A factory that clamps an
    argument fails the small set or leaves that argument unused; one that branches on a threshold or a
    sign fails the SQL comparison. A branch on one specific value (``if kind == "pipe"``) cannot be
    found by probing: that is what the rules above forbid."""

    def __init__(self, factory: Callable[..., Statement], *example: Any) -> None:
        kinds = tuple(type(a) for a in example)
        count = len(example)
        large = [_sentinel_like(a, i, 0) for i, a in enumerate(example)]
        far = [_sentinel_like(a, i, 1) for i, a in enumerate(example)]
        real = _compile_whole(factory(*example))
        probes = [_compile_whole(factory(*large)), _compile_whole(factory(*far))]
        constants = frozenset(
            (type(p), p)
            for p, q in zip(probes[0].params, probes[1].params, strict=False)
            if type(p) is type(q) and p == q
        )
        small = [_sentinel_like(a, i, 2, constants) for i, a in enumerate(example)]
        probes.append(_compile_whole(factory(*small)))
        if real.shape is None or any(p.sql != real.sql or len(p.params) != len(real.params) for p in probes):
            raise ValueError("the statement's SQL depends on the template's arguments")
        indexes = [{(type(v), v): i for i, v in enumerate(values)} for values in (large, far, small)]
        param_map: list[int | tuple[Any]] = []
        for r, *sentinel_params in zip(real.params, *(p.params for p in probes), strict=True):
            found = {index.get((type(p), p)) for index, p in zip(indexes, sentinel_params, strict=True)}
            i = found.pop() if len(found) == 1 else None
            if i is not None and type(r) is kinds[i] and r == example[i]:
                param_map.append(i)
            elif found == set() and i is None and all(type(p) is type(r) and p == r for p in sentinel_params):
                param_map.append((r,))  # a constant of the factory, whatever the arguments
            else:
                raise ValueError("the statement has parameters that are not the template's arguments")
        unused = sorted(set(range(count)) - {m for m in param_map if type(m) is int})
        if unused:
            raise ValueError(f"template arguments {unused} do not reach the statement unchanged")
        self.kinds = kinds
        self.sql = real.sql
        self.param_map = tuple(param_map)
        self.shape = real.shape

    def bind(self, *args: Any) -> Compiled:
        if tuple(type(a) for a in args) != self.kinds:
            raise TypeError("template arguments of other types than the example's")
        params = tuple(args[m] if type(m) is int else m[0] for m in self.param_map)  # type: ignore[index]
        return Compiled(self.sql, params, self.shape)


def _compile_whole(statement: Statement) -> Compiled:
    """Compile one statement with no cache (LIMIT/OFFSET bound as parameters like the cached path)."""
    return StatementCompiler(max_shapes=0).compile(statement)


# --- running statements -----------------------------------------------------------------------------


class CallCancelled(Exception):
    """A statement was about to start for a call that has been cancelled."""


class Execution:
    """The running statements of one call on one pooled connection (cancellation bookkeeping).

    With its ``db``, a statement that finds the connection broken — a PostgreSQL restart or a terminated
    backend leaves dead connections idle in the pool, each noticed only when used — is run once more on
    a fresh connection after the pool's idle connections were swept (``QueryDatabase.replace_broken``):
    every statement is read-only and autocommit, so running it again is safe (issue 17 item 9). The
    connection the call must give back is ``conn`` (the replacement, once replaced).

    The query budget (``budget_s``; by default the ``db``'s) is the call's, counted from here: the first
    guarded statement runs under the session's ``statement_timeout`` (the whole budget), each later one
    under what is left (``set_config`` in the same task as the statement), none starts once nothing is
    left (``QUERY_TIMEOUT``), and ``run_plan`` restores the session's value before the connection goes
    back (``restore_timeout``)."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], db: QueryDatabase | None = None, *, budget_s: float | None = None
    ) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = conn  # None: given back, no replacement to be had
        self.db = db
        self.cancelled = False
        self.cancel_sent = False
        self.replaced = False
        budget = budget_s if budget_s is not None else (db.budget_s if db is not None else None)
        self.deadline = time.monotonic() + budget if budget is not None else None
        self.statements = 0  # guarded statements started
        self.timeout_changed: psycopg.AsyncConnection[Any] | None = None  # the connection whose timeout was set

    @telemetry.traced_statement
    async def _fetch(self, sql: str, params: tuple[Any, ...], timeout_ms: int | None = None) -> list[Any]:
        assert self.conn is not None  # set for as long as statements run
        cursor = self.conn.cursor()
        try:
            if timeout_ms is not None:
                self.timeout_changed = self.conn
                await cursor.execute("SELECT set_config('statement_timeout', %s, false)", (f"{timeout_ms}ms",))
            await cursor.execute(sql, params)
            result = cursor.pgresult
            return await cursor.fetchall() if result is not None and result.status == TUPLES_OK else []
        finally:
            await cursor.close()

    async def _guarded(self, compiled: Compiled, timeout_ms: int | None = None) -> list[Any]:
        task = asyncio.ensure_future(self._fetch(compiled.sql, compiled.params, timeout_ms))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self.cancelled = True
            with anyio.CancelScope(shield=True):
                if not task.done() and self.conn is not None:
                    try:
                        await self.conn.cancel_safe(timeout=2.0)
                        self.cancel_sent = True
                        metrics.STATEMENT_CANCELLATIONS.inc()
                    except Exception as exc:  # the statement timeout still bounds it
                        logger.warning("statement cancel failed error_class=%s", type(exc).__name__)
                # The slot and the connection are given back only once the statement has stopped.
                try:
                    await task
                except BaseException:  # noqa: BLE001 - QueryCanceled is what we expect
                    pass
            raise

    async def run(self, compiled: Compiled, *, guarded: bool = True) -> Any:
        """Run one compiled statement. ``guarded`` (tool queries): in a task of its own, so that a
        cancelled call cancels it in PostgreSQL and waits until it has stopped. Unguarded (the
        sub-millisecond context resolution, before any slot is held): awaited directly — a cancel then
        makes psycopg drop the connection, and the pool replaces it."""
        if self.cancelled:
            raise CallCancelled
        if compiled.shape is None:  # nothing can match: no SQL to run
            return compiled.empty
        timeout_ms = None
        if guarded and self.deadline is not None:
            left = remaining_ms(self.deadline)  # QUERY_TIMEOUT when nothing is left
            timeout_ms = left if self.statements else None  # the first runs under the session's (whole) budget
            self.statements += 1
        while True:
            try:
                if guarded:
                    raw = await self._guarded(compiled, timeout_ms)
                else:
                    raw = await self._fetch(compiled.sql, compiled.params)
                return compiled.shape.rows(raw)
            except psycopg.errors.QueryCanceled:
                raise QueryTimeout() from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                broken = self.conn
                if self.db is None or self.replaced or broken is None or not broken.closed or self.cancelled:
                    logger.warning("query database unavailable error_class=%s", type(exc).__name__)
                    raise DataSourceUnavailable() from None
                logger.warning("query connection found broken, replaced error_class=%s", type(exc).__name__)
                self.replaced, self.conn = True, None
                self.conn = await self.db.replace_broken(broken)  # DataSourceUnavailable when none comes

    async def restore_timeout(self) -> None:
        """Give the connection its session ``statement_timeout`` back (a later call's first statement
        runs under it), shielded; a connection that cannot be reset is closed (the pool replaces it)."""
        conn, self.timeout_changed = self.timeout_changed, None
        if conn is None or conn.closed:
            return
        with anyio.CancelScope(shield=True):
            try:
                await conn.execute("RESET statement_timeout")
            except psycopg.Error as exc:
                logger.warning("statement timeout reset failed error_class=%s", type(exc).__name__)
                await conn.close()


async def run_plan(plan: Plan[R], execution: Execution, compiler: StatementCompiler) -> R:
    """Drive a plan to completion on one connection; return the service's result."""
    try:
        statement = next(plan)
        while True:
            rows = await execution.run(compiler.compile(statement))
            statement = plan.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()
        if execution.timeout_changed is not None:
            await execution.restore_timeout()


#: How long a call may wait for a free tool-query slot of its process before it is refused (RATE_LIMITED):
#: long enough that a burst of short calls is served (a slot frees in milliseconds), short enough that
#: a process full of slow queries refuses quickly. The wait holds nothing shared (no connection, no slot).
TOOL_SLOT_WAIT_S = 0.5

# --- the pool ------------------------------------------------------------------------------------------


def _connection_kwargs(budget_ms: int, connect_timeout_s: int) -> dict[str, Any]:
    """psycopg connect arguments for MCP query connections: Django's own parameters and adapters, plus
    session settings sent in the start-up packet (no extra round trip)."""
    wrapper = connections[DB_ALIAS]
    params = dict(wrapper.get_connection_params())
    params.pop("cursor_factory", None)  # Django's client-side-binding cursor is sync; use psycopg's own
    params["prepare_threshold"] = 2
    params["autocommit"] = True
    params["connect_timeout"] = max(2, int(connect_timeout_s))
    params["application_name"] = "tjwater-mcp-query"
    params["options"] = (
        f"-c default_transaction_read_only=on -c statement_timeout={int(budget_ms)} "
        f"-c idle_in_transaction_session_timeout={int(budget_ms)} -c TimeZone={wrapper.timezone_name}"
    )
    return params


#: The PostGIS types whose values load as text (``register_postgis_types``).
POSTGIS_TYPES = ("geometry", "geography", "raster")


def register_postgis_types(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], infos: Sequence[Any]) -> None:
    """Load PostGIS values as text and dump Django's ``PostGISAdapter`` on ``conn``, as Django's own
    connections do (its converters parse the text); ``infos`` are the ``TypeInfo`` of ``POSTGIS_TYPES``
    (None for a type the database lacks). Shared with the bench's floor (``scripts/bench_floor.py``),
    which runs the same statements on a plain psycopg connection."""
    from django.contrib.gis.db.backends.postgis.adapter import PostGISAdapter
    from django.contrib.gis.db.backends.postgis.base import postgis_adapters
    from psycopg.types.string import TextBinaryLoader, TextLoader

    oids = []
    for info in infos:
        if info:
            info.register(conn)
            conn.adapters.register_loader(info.oid, TextLoader)
            conn.adapters.register_loader(info.oid, TextBinaryLoader)
        oids.append(info.oid if info else None)
    text_dumper, binary_dumper = postgis_adapters(*oids)
    conn.adapters.register_dumper(PostGISAdapter, text_dumper)
    conn.adapters.register_dumper(PostGISAdapter, binary_dumper)


MIN_OPEN = 2
#: psycopg_pool's ``reconnect_timeout`` for the query pool (see ``QueryDatabase``).
RECONNECT_TIMEOUT_S = 1.0


class QueryDatabase:
    """The process's pool of read-only query connections for ``/mcp`` (size ``TJWATER_MCP_DB_POOL_SIZE``).

    ``tool_slots`` connections at most run tool queries at once; the rest are kept for the context
    resolution of new calls, so that a process full of slow queries still resolves (and refuses) new
    calls at once instead of queueing them. A call that finds every tool slot taken waits at most
    ``TOOL_SLOT_WAIT_S`` and is then refused (``RATE_LIMITED``, retryable)."""

    def __init__(self, *, size: int, budget_s: float, checkout_timeout_s: float, connect_timeout_s: int) -> None:
        self.size = size
        self.reserved = 1 if size < 4 else 2
        self.tool_slots = max(1, size - self.reserved)
        self.checkout_timeout_s = checkout_timeout_s
        self.budget_s = budget_s  # per call (``Execution``)
        self.compiler = StatementCompiler()
        self._tool_slots = asyncio.Semaphore(self.tool_slots)
        self._kwargs = _connection_kwargs(int(budget_s * 1000), connect_timeout_s)
        self._geo_infos: list[Any] | None = None
        self._sweep: asyncio.Future[None] | None = None
        self.pool = AsyncConnectionPool(
            kwargs=self._kwargs,
            # Two kept open, up to ``size`` on demand (kept while busy; idle ones close after 10 min): an
            # idle process does not hold ``size`` connections of PostgreSQL's max_connections.
            min_size=min(MIN_OPEN, size),
            max_size=size,
            open=False,
            timeout=checkout_timeout_s,
            configure=self._configure,
            # While PostgreSQL is down, calls fail fast (checkout timeout) and the pool retries in the
            # background: a replacement is tried at once and once more after ~1 s (the pool's back-off),
            # then given up, and the next checkout grows the pool again. So no attempt ever sleeps in a
            # back-off longer than ~1 s — with a longer give-up time the back-off doubles (1, 2, 4, 8 s)
            # and a pool whose connections all wait in it serves nothing for that long after the
            # database is back (issue 17 item 9: recovery ≤ 2 s).
            reconnect_timeout=RECONNECT_TIMEOUT_S,
            name="tjwater-mcp-query",
        )

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """PostGIS types load as text like Django's connections (its converters parse them)."""
        from psycopg.types import TypeInfo

        if self._geo_infos is None:
            self._geo_infos = [await TypeInfo.fetch(conn, name) for name in POSTGIS_TYPES]
        register_postgis_types(conn, self._geo_infos)

    async def open(self) -> None:
        # Not waiting: the server starts even while PostgreSQL is down (calls then answer
        # DATA_SOURCE_UNAVAILABLE, and the pool connects in the background when it comes back).
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    async def take_tool_slot(self, wait_s: float = TOOL_SLOT_WAIT_S) -> bool:
        """Take one of the process's tool-query slots: at once when one is free, else after at most
        ``wait_s`` (a short, bounded wait — never a queue). False: the process is at capacity."""
        if not self._tool_slots.locked():
            await self._tool_slots.acquire()  # free: returns without suspending
            return True
        try:
            await asyncio.wait_for(self._tool_slots.acquire(), wait_s)
        except TimeoutError:
            metrics.LIMITER_REFUSALS_PROCESS.inc()
            return False
        return True

    def tool_slot_free(self) -> bool:
        return not self._tool_slots.locked()

    def give_tool_slot(self) -> None:
        self._tool_slots.release()

    async def replace_broken(self, conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
        """``conn`` was found broken: give it back (the pool discards it and connects a replacement),
        sweep the idle connections (what broke one has usually broken all: a restart), then check out
        another. The sweep (``AsyncConnectionPool.check``: one empty query per idle connection) runs once
        for all the calls that meet a broken connection meanwhile, and only then — no call pays a check
        otherwise."""
        await self.give_back(conn)
        sweep = self._sweep
        if sweep is None or sweep.done():
            sweep = self._sweep = asyncio.ensure_future(self.pool.check())
        with anyio.CancelScope(shield=True):
            try:
                await asyncio.shield(sweep)
            except Exception as exc:  # the checkout below still answers for itself
                logger.warning("query pool sweep failed error_class=%s", type(exc).__name__)
        return await self.checkout()

    async def checkout(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await self.pool.getconn(timeout=self.checkout_timeout_s)
        except PoolTimeout:
            logger.warning("query database unavailable: no connection within %.1f s", self.checkout_timeout_s)
            raise DataSourceUnavailable() from None

    async def give_back(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        if conn is None:  # an ``Execution`` that gave its broken connection back and got none
            return
        with anyio.CancelScope(shield=True):
            await self.pool.putconn(conn)

    def lease(self) -> ConnectionLease:
        """A connection for one call, checked out by its first statement (``ConnectionLease``)."""
        return ConnectionLease(self)

    async def fetch(self, statement: Statement | Compiled) -> Any:
        """Run one statement (e.g. the context resolution) on a pooled connection."""
        compiled = statement if isinstance(statement, Compiled) else self.compiler.compile(statement)
        execution = Execution(await self.checkout(), self)
        try:
            return await execution.run(compiled, guarded=False)
        finally:
            await self.give_back(execution.conn)


class ConnectionLease:
    """One call's pooled connection: checked out by the first statement (the context resolution), kept
    for the tool query when a tool slot is free at once (one checkout per call instead of two), and
    given back by ``release`` (idempotent). A call that must wait for a slot gives it back first, so the
    connections reserved for resolving new calls are never held by waiting ones."""

    __slots__ = ("db", "conn")

    def __init__(self, db: QueryDatabase) -> None:
        self.db = db
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def fetch(self, statement: Statement | Compiled) -> Any:
        compiled = statement if isinstance(statement, Compiled) else self.db.compiler.compile(statement)
        if self.conn is None:
            self.conn = await self.db.checkout()
        execution = Execution(self.conn, self.db)
        try:
            return await execution.run(compiled, guarded=False)
        finally:
            self.conn = execution.conn  # the replacement, if the first one was found broken

    def take(self) -> psycopg.AsyncConnection[Any] | None:
        """The held connection, now owned by the caller (who gives it back), or None."""
        conn, self.conn = self.conn, None
        return conn

    async def release(self) -> None:
        conn = self.take()
        if conn is not None:
            await self.db.give_back(conn)


def warm_django_connection() -> None:
    """Read, in a worker thread at start-up, what compiling a queryset may ask the database for
    (server and PostGIS versions), so the event loop never opens a Django connection."""
    wrapper = connections[DB_ALIAS]
    try:
        _ = wrapper.pg_version
        ops = wrapper.ops
        if hasattr(ops, "spatial_version"):
            _ = ops.spatial_version
            # GeoDjango reads an SRID's units from spatial_ref_sys the first time a geography/distance
            # lookup compiles; cache it now (4326 is the only SRID the models use).
            get_srid_info(4326, wrapper)
    finally:
        wrapper.close()
