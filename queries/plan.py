"""Query services as *plans*: ORM-written statements, no I/O of their own (STYLE "reads").

A query service is written once, as a generator function decorated with ``@service``. It builds its
statements with the Django ORM and ``yield``s each one; whoever runs the plan executes the statement and
sends the rows back in. The service never touches a connection itself, so the same code runs:

- synchronously, through Django's connection (``run_sync``): REST views, admin, Celery tasks, commands
  and tests simply call the service — ``get_element_properties(scope=…, …)`` returns its result;
- on the MCP hot path, by a driver that executes the very same statements on its own connection
  (``mcp_app``), without a worker thread and with the SQL compiled once per statement shape.

What a plan may yield, and what it gets back:

- a ``QuerySet`` of ``.values(…)`` / ``.values_list(…)`` rows, sliced in SQL (never unbounded: every
  collection has a LIMIT — R-PAGE-1) → ``list`` of dicts / tuples, Django's converters applied
  (geometries, JSON, aware datetimes);
- ``count_of(queryset)`` → ``int`` (``SELECT COUNT(*)`` of that queryset);
- ``Raw(sql, params, columns)`` → ``list`` of dicts keyed by ``columns`` (no columns: one empty dict per
  row); only for what the ORM cannot say (e.g. ``pg_sleep``), with ``%s`` placeholders and never client
  text in ``sql``;
- ``Together(a, b, …)`` of statements none of which needs another's rows (a page's count and its rows)
  → a ``tuple`` of what each gives, in order. ``run_sync`` runs them one after the other; the MCP driver
  sends them in one round trip (a pipeline with one Sync: one implicit transaction, read-only);
- a *statement factory* ``STATEMENT(*args)`` (``@statement_factory``: a function of the call's values that
  builds one of the above with the ORM) → what that statement gives. ``run_sync`` builds and runs it
  like any queryset; the MCP driver builds it with the ORM once per shape and afterwards only binds the
  values (no queryset is built per call — issue 10). Write the hot statements of a tool this way.

A service must not evaluate a queryset itself (no ``list(qs)``, ``.first()``, ``.count()``, ``.exists()``,
``.aggregate()`` — each would run SQL outside the plan). On the MCP driver such a query would run the ORM on
the event loop and fail (``SynchronousOnlyOperation``), which ``tests/mcp_app/test_executor.py`` (every
registry tool's samples on both drivers) shows; the services' own tests pin their query counts.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from django.db import OperationalError, connection
from django.db.models import QuerySet
from psycopg.errors import QueryCanceled

from queries.errors import QueryTimeout
from queries.units import present

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class CountOf:
    """``SELECT COUNT(*)`` of a queryset (what ``queryset.count()`` would run)."""

    queryset: QuerySet[Any]


@dataclass(frozen=True, slots=True)
class Raw:
    """A statement the ORM cannot express. ``sql`` is a constant with ``%s`` placeholders; rows come back
    as dicts keyed by ``columns``."""

    sql: str
    params: Sequence[Any] = ()
    columns: Sequence[str] = ()


class StatementFactory:
    """An ORM statement written as a function of the call's values: ``fn(*static, *values)``.

    The first ``static`` arguments choose the statement's shape (e.g. which model) and must be hashable;
    the others are *values* — each must reach the SQL unchanged as one filter value or slice bound
    (no arithmetic or clamping in the factory: do that before calling). Calling the object gives a
    ``Bound`` statement to ``yield``; drivers decide whether to build it every time (``run_sync``) or to
    compile it once and bind values (``mcp_app.executor``, which proves the binding with sentinel
    compiles and otherwise falls back to building it every call)."""

    __slots__ = ("fn", "static", "name")

    def __init__(self, fn: Callable[..., Built], static: int = 0) -> None:
        self.fn = fn
        self.static = static
        self.name = getattr(fn, "__qualname__", repr(fn))

    def __call__(self, *args: Any) -> Bound:
        if len(args) < self.static:
            raise TypeError(f"{self.name} needs its {self.static} shape argument(s)")
        return Bound(self, args)

    def __repr__(self) -> str:
        return f"<statement factory {self.name}>"


@dataclass(frozen=True, slots=True)
class Bound:
    """A statement factory with the call's arguments."""

    factory: StatementFactory
    args: tuple[Any, ...]

    def build(self) -> Built:
        """The statement itself, built with the ORM now."""
        return self.factory.fn(*self.args)


@overload
def statement_factory(fn: Callable[..., Built], *, static: int = 0) -> StatementFactory: ...
@overload
def statement_factory(fn: None = None, *, static: int = 0) -> Callable[[Callable[..., Built]], StatementFactory]: ...
def statement_factory(
    fn: Callable[..., Built] | None = None, *, static: int = 0
) -> StatementFactory | Callable[[Callable[..., Built]], StatementFactory]:
    """Declare a statement factory: ``@statement_factory`` or ``@statement_factory(static=1)`` on a function."""
    if fn is None:
        return lambda f: StatementFactory(f, static)
    return StatementFactory(fn, static)


#: What a statement factory builds: a statement run as it is.
Built = QuerySet[Any] | CountOf | Raw
Statement = QuerySet[Any] | CountOf | Raw | Bound


@dataclass(frozen=True, slots=True, init=False)
class Together:
    """Statements a plan yields at once because none needs another's rows; it gets back a tuple of what
    each gives. A driver may send them in one round trip (the MCP driver does: ``mcp_app.executor``)."""

    statements: tuple[Statement, ...]

    def __init__(self, *statements: Statement) -> None:
        if len(statements) < 2 or any(isinstance(s, Together) for s in statements):
            raise TypeError("Together takes two or more statements, none of them a Together")
        object.__setattr__(self, "statements", statements)


#: A running service: yields statements, receives their rows, returns the result.
Plan = Generator[Statement | Together, Any, R]


def count_of(queryset: QuerySet[Any]) -> CountOf:
    return CountOf(queryset)


def raw_rows(statement: Raw, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """The rows of a ``Raw`` statement as dicts keyed by its ``columns``; a statement that declares no
    columns (e.g. ``SELECT pg_sleep(…)``) gets one empty dict per row (its values are not wanted)."""
    if not statement.columns:
        return [{} for _ in rows]
    return [dict(zip(statement.columns, row, strict=True)) for row in rows]


def execute_sync(statement: Statement) -> Any:
    """Run one statement through Django's connection of this thread."""
    if isinstance(statement, Bound):
        statement = statement.build()
    if isinstance(statement, CountOf):
        return statement.queryset.count()
    if isinstance(statement, Raw):
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, list(statement.params))
            rows = cursor.fetchall() if cursor.description else []
        return raw_rows(statement, rows)
    if isinstance(statement, QuerySet):
        if statement.query.high_mark is None:
            # Every collection is bounded in SQL (R-PAGE-1); an unsliced queryset is a bug in the plan.
            raise ValueError(f"unbounded queryset in a query plan: {statement.model.__name__}")
        return list(statement)
    raise TypeError(f"a query plan yielded {type(statement).__name__}, not a statement")


def run_sync(plan: Plan[R], *, budget_s: float | None = None) -> R:
    """Run a plan to completion with Django's connection; return the service's result.

    With ``budget_s`` (the REST edge, inside its read-only transaction) the budget is the whole call's,
    not each statement's (R-PAGE-7, issue 23 item 12): every statement after the first runs with
    ``statement_timeout`` = what is left of it (``SET LOCAL``: it ends with the transaction), a
    statement that would start with nothing left is refused, and a statement cancelled by the timeout
    is ``QUERY_TIMEOUT``. The first statement runs under the timeout the caller set for the
    transaction (the whole budget)."""
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    first = True

    def execute(statement: Statement) -> Any:
        nonlocal first
        if deadline is not None and not first:
            _set_local_timeout(deadline)
        first = False
        try:
            return execute_sync(statement)
        except OperationalError as exc:
            if deadline is not None and isinstance(exc.__cause__, QueryCanceled):
                raise QueryTimeout() from None
            raise

    try:
        step = next(plan)
        while True:
            if isinstance(step, Together):  # one after the other, each under what is left of the budget
                rows: Any = tuple(execute(s) for s in step.statements)
            else:
                rows = execute(step)
            step = plan.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]  # the generator's return value


def remaining_ms(deadline: float) -> int:
    """Milliseconds left until ``deadline`` (``time.monotonic``), at least 1; ``QUERY_TIMEOUT`` when
    none is left (``statement_timeout = 0`` would mean *no* limit)."""
    left = math.ceil((deadline - time.monotonic()) * 1000)
    if left <= 0:
        raise QueryTimeout()
    return left


def _set_local_timeout(deadline: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{remaining_ms(deadline)}ms"])


class ServiceFunction(Generic[P, R]):
    """A query service: call it for the result (sync), or take ``.plan(…)`` to drive it yourself."""

    def __init__(self, fn: Callable[P, Plan[R]]) -> None:
        functools.update_wrapper(self, fn)
        self.plan = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result = run_sync(self.plan(*args, **kwargs))
        scope = kwargs.get("scope")
        if scope is None:
            return result
        # A direct call answers like a tool call: in the scope's unit system (``queries.units``; the
        # edges get the same through ``ToolSpec.invoke``, which drives ``.plan``).
        return present(result, scope)  # type: ignore[arg-type,return-value]


def service(fn: Callable[P, Plan[R]]) -> ServiceFunction[P, R]:
    """Make a plan generator function callable as a plain service (runs it with ``run_sync``), with
    ``.plan(**kwargs)`` giving the generator for other drivers."""
    return ServiceFunction(fn)
