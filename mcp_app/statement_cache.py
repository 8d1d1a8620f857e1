"""Statement shapes (issue 10): an ORM statement of a query plan is compiled to SQL once per shape, then only
its values are re-bound.

The ORM compile of a queryset costs hundreds of µs. A shape — model, selected columns, joins, ordering, and
the *structure* of the WHERE tree with its values taken out (``mcp_app.shape_keys``) — is compiled the first
time it is seen, then only its values are re-bound (``_Shape``). A shape is cached only after a second
compile with unique sentinel values proved that every parameter of the SQL is one of the filter values (so
nothing the key does not describe can vary); anything the walker does not understand (expressions,
subqueries, GIS lookups, annotations other than plain SQL functions of columns such as ``ST_X(geom)``…) is
compiled on every call, which is always correct. LIMIT/OFFSET, which Django inlines as literals, are bound
as parameters instead, so every page of a collection shares one shape and one prepared plan. Rows come out
identical to ``run_sync``'s: the compiler's row converters are applied (geometries, JSON, …). ``CompiledFactory``:
a statement factory's SQL (the context resolution, ``get_element_properties``), proved once against
sentinel examples, then only bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet

from mcp_app.django_internals import (
    FlatValuesListIterable,
    NamedValuesListIterable,
    ValuesIterable,
    ValuesListIterable,
    create_namedtuple_class,
    iterable_class,
    values_fields,
)
from mcp_app.shape_keys import (
    _MAX_SHAPES,
    _UNCACHEABLE,
    _count_query,
    _NotCacheable,
    _sentinel_like,
    _shape_key,
    _with_leaves,
)
from queries.plan import Bound, CountOf, Raw, Statement, raw_rows

R = TypeVar("R")
DB_ALIAS = "default"


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
            row: Any = list(record[:n]) if converters or len(record) != n else record  # converted in place
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
    features, never run SQL): looked up once — ``connections[...]`` is a context-local lookup, measurable
    per statement (``mcp_app/README.md`` "Measuring")."""
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
        self._factories: dict[tuple[Any, ...], CompiledFactory | object] = {}
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
        """A bound statement factory: its ``CompiledFactory`` for this shape (static arguments, value types),
        made on first use; a factory whose SQL cannot be proved is built and compiled on every call instead."""
        factory, args = bound.factory, bound.args
        n = factory.static
        static, values = args[:n], args[n:]
        try:
            key = (factory, static, tuple(type(v) for v in values))
            compiled = self._factories.get(key)
        except TypeError:  # an unhashable static argument
            return self.compile(bound.build())
        if compiled is None:
            try:
                compiled = CompiledFactory(lambda *vs: factory.fn(*static, *vs), *values)
            except (_NotCacheable, ValueError, TypeError, EmptyResultSet):
                compiled = _UNCACHEABLE
            if len(self._factories) >= self.max_shapes:
                self._factories.clear()
            if self.max_shapes:
                self._factories[key] = compiled
        if isinstance(compiled, CompiledFactory):
            self.hits += 1
            return compiled.bind(*values)
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


class CompiledFactory:
    """A statement factory's SQL, compiled with the ORM once and bound many times: ``factory(*args)`` must
    build the same statement shape for any arguments of the example's types, each argument reaching the
    SQL unchanged as one parameter. ``bind(*args)`` then costs no ORM work at all.

    The rules a factory must follow (``queries.plan.statement_factory`` documents them for service authors): it
    passes each argument into the statement unchanged (no ``min``/``max``, rounding, defaults or other
    transformation), never decides the statement's shape from an argument's value (no ``if`` on a value,
    no value-dependent column or lookup — put such a choice in a static argument, which keys its own
    compiled factory), and uses every argument.

    Proved at creation by compiling the example and three sentinel sets (large, negative or far, and
    small values that avoid every constant seen; a factory that refuses negative integers — a slice bound,
    ``qs[offset : offset + rows]`` — gets far positive ones instead, and ``bind`` then refuses negative
    ones with the same ``ValueError`` building would raise): the SQL must be identical in all four; every parameter
    must be the same argument in all three sentinel compiles (and equal the example's value), or the
    same constant in all four (e.g. the bound LIMIT; a constant equal to one of the example's arguments
    is accepted only because the small sentinels, whose values differ, gave it too); and every argument
    must reach the SQL — else ``ValueError`` (the factory's SQL cannot be proved). A factory that clamps an
    argument fails the small set or leaves that argument unused; one that branches on a threshold or a
    sign fails the SQL comparison. A branch on one specific value (``if kind == "pipe"``) cannot be
    found by probing: that is what the rules above forbid."""

    def __init__(self, factory: Callable[..., Statement], *example: Any) -> None:
        kinds = tuple(type(a) for a in example)
        count = len(example)
        large = [_sentinel_like(a, i, 0) for i, a in enumerate(example)]
        far = [_sentinel_like(a, i, 1) for i, a in enumerate(example)]
        real = _compile_whole(factory(*example))
        self.non_negative = False
        try:
            far_statement = factory(*far)
        except ValueError:
            # A factory that refuses negative integers (a slice bound: "Negative indexing is not supported")
            # is probed with far positive ones instead, and ``bind`` refuses negative ones as building would.
            if not any(type(a) is int and a < 0 for a in far):
                raise
            far = [_sentinel_like(a, i, 3) for i, a in enumerate(example)]
            far_statement = factory(*far)
            self.non_negative = True
        probes = [_compile_whole(factory(*large)), _compile_whole(far_statement)]
        constants = frozenset(
            (type(p), p)
            for p, q in zip(probes[0].params, probes[1].params, strict=False)
            if type(p) is type(q) and p == q
        )
        small = [_sentinel_like(a, i, 2, constants) for i, a in enumerate(example)]
        probes.append(_compile_whole(factory(*small)))
        if real.shape is None or any(p.sql != real.sql or len(p.params) != len(real.params) for p in probes):
            raise ValueError("the statement's SQL depends on the factory's arguments")
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
                raise ValueError("the statement has parameters that are not the factory's arguments")
        unused = sorted(set(range(count)) - {m for m in param_map if type(m) is int})
        if unused:
            raise ValueError(f"factory arguments {unused} do not reach the statement unchanged")
        self.kinds = kinds
        self.sql = real.sql
        self.param_map = tuple(param_map)
        self.shape = real.shape

    def bind(self, *args: Any) -> Compiled:
        if tuple(type(a) for a in args) != self.kinds:
            raise TypeError("factory arguments of other types than the example's")
        if self.non_negative and any(type(a) is int and a < 0 for a in args):
            raise ValueError("a negative integer for a factory that refuses them (e.g. a slice bound)")
        params = tuple(args[m] if type(m) is int else m[0] for m in self.param_map)  # type: ignore[index]
        return Compiled(self.sql, params, self.shape)


def _compile_whole(statement: Statement) -> Compiled:
    """Compile one statement with no cache (LIMIT/OFFSET bound as parameters like the cached path)."""
    return StatementCompiler(max_shapes=0).compile(statement)
