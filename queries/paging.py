"""One page of a collection, cut in SQL, with a total that stays cheap at any size (R-PAGE-1, issue 25).

Every collection tool takes its total and its page from here, as plan fragments, so they all behave the
same: a collection declared once with ``@collection`` (its ordered ``.values()`` queryset as a function of
the call's values) is paged with ``total, items, has_more = yield from page_of(…)`` — its count and its
rows are statement factories, compiled once per shape and afterwards only bound on the MCP hot path:

- the total is counted with a cap: ``SELECT COUNT(*) FROM (… LIMIT cap + 1)``, which reads at most
  ``cap + 1`` rows. Up to ``TJWATER_EXACT_TOTAL_MAX`` rows it is the exact ``total``; above it ``total`` is
  ``null`` — R-PAGE-1's "no stable total" — never an estimate. An exact ``COUNT(*)`` of a very large
  collection reads all of it on every page (most of a ``list_elements`` page on the scale network), for a
  number no client can page through anyway (offsets stop at ``MAX_OFFSET``);
- ``has_more`` is always exact: the page reads one row more than it returns (that row is not returned);
- the count and the page are yielded ``Together`` (neither needs the other's rows): the MCP driver sends
  both in one round trip.

How the threshold was chosen (a measurement) is in ``mcp_app/README.md`` ("Measuring"); the page's
output schema says when ``total`` is null.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from queries.fitting import read_all_fetched, rows_to_fetch
from queries.plan import Built, Statement, StatementFactory, Together, count_of
from queries.schemas.common import PageRequest

#: Above this many rows a collection's ``total`` is null (``TJWATER_EXACT_TOTAL_MAX``; measured, see the
#: README). The default when the setting is absent.
EXACT_TOTAL_MAX = 10_000


def exact_total_max() -> int:
    return int(getattr(settings, "TJWATER_EXACT_TOTAL_MAX", EXACT_TOTAL_MAX))


def budgeted_read(
    read: Callable[[int], Statement], limit: int, least_item_bytes: int | None, *, extra: int = 1
) -> tuple[Statement, Callable[[Sequence[Any]], tuple[list[Any], bool | None]]]:
    """The statement for up to ``limit`` rows of a page, read with ``read(n)`` (the statement for ``n`` rows
    from the page's offset), and how to take the page and what it says of ``has_more`` from its rows.
    With ``extra`` one row more than the page is read to tell it; without, None (the caller knows it from
    a total). With ``least_item_bytes`` (the fewest bytes one item writes,
    ``queries.fitting.least_json_bytes``) and under the MCP edge's inline budget, no more rows are read
    than can fit (``queries.fitting.rows_to_fetch``): when the page goes on beyond them, ``has_more`` is
    true (the edge cuts the page there); when it ended inside them, None (nothing beyond what was read,
    as far as this page can tell: the caller's total, else false)."""
    cap = rows_to_fetch(limit, least_item_bytes) if least_item_bytes is not None else limit
    if cap < limit:
        return read(cap), lambda fetched: (
            list(fetched),
            None if read_all_fetched(len(fetched), cap, limit) else True,
        )
    return read(limit + extra), lambda fetched: (
        list(fetched[:limit]),
        len(fetched) > limit if extra else None,
    )


def budgeted_rows(
    read: Callable[[int], Statement], limit: int, least_item_bytes: int | None, *, extra: int = 1
) -> Generator[Statement, Any, tuple[list[Any], bool | None]]:
    """``budgeted_read`` as a plan fragment: its statement, then the page and what it says of ``has_more``."""
    statement, page = budgeted_read(read, limit, least_item_bytes, extra=extra)
    fetched = yield statement
    return page(fetched)


@dataclass(frozen=True, slots=True)
class Collection:
    """An ordered collection's three statement factories (``collection``): its capped count, its first
    rows and its rows from an offset. Each is proved once per shape by the MCP driver and afterwards only
    bound (``mcp_app.statement_cache.CompiledFactory``): no queryset is built per call — building the
    count and the page was 15–19 % of a maximal page's CPU (``mcp_app/README.md`` "Measuring", seventh
    session)."""

    count: StatementFactory
    first: StatementFactory
    at: StatementFactory


def collection(static: int = 0) -> Callable[[Callable[..., QuerySet[Any]]], Collection]:
    """Declare an ordered collection: ``@collection(static=n)`` on ``rows(*shape, *values)``, which builds
    the collection's ordered ``.values()`` queryset from ``n`` shape arguments (hashable; e.g. the
    element type) and values that each reach the SQL unchanged (the statement-factory rules,
    ``queries.plan.statement_factory``). Page it with ``page_of``."""

    def declare(rows: Callable[..., QuerySet[Any]]) -> Collection:
        name = getattr(rows, "__qualname__", "collection")

        def count(*args: Any) -> Built:  # (*shape, most, *values)
            # In the page's own order, so the count takes the page's index path and stops after ``most``
            # rows of it. Without an order the LIMIT makes a sequential scan look cheapest, and a collection
            # much smaller than its table is read whole (the demo's junctions among the scale network's:
            # measured in mcp_app/README.md, "Measuring").
            shape, most, values = args[:static], args[static], args[static + 1 :]
            return count_of(rows(*shape, *values).values("pk")[:most])

        def first(*args: Any) -> Built:  # (*shape, *values, n)
            return rows(*args[:-1])[: args[-1]]

        def at(*args: Any) -> Built:  # (*shape, *values, offset, n)
            offset, n = args[-2], args[-1]
            return rows(*args[:-2])[offset : offset + n]

        for fn, what in ((count, "count"), (first, "first"), (at, "at")):
            fn.__qualname__ = f"{name}.{what}"
        return Collection(
            StatementFactory(count, static + 1), StatementFactory(first, static), StatementFactory(at, static)
        )

    return declare


def page_rows(rows: Collection, shape: Sequence[Any], values: Sequence[Any], offset: int, n: int) -> Statement:
    """The statement for ``n`` rows of a ``collection`` from ``offset``: its first rows, or its rows from
    there (two shapes: Django leaves out an OFFSET of 0)."""
    return rows.at(*shape, *values, offset, n) if offset else rows.first(*shape, *values, n)


def page_of(
    rows: Collection,
    shape: Sequence[Any],
    values: Sequence[Any],
    page: PageRequest,
    least_item_bytes: int | None = None,
) -> Generator[Statement | Together, Any, tuple[int | None, list[Any], bool]]:
    """``(total, items, has_more)`` of one page of a ``collection``: its count capped at
    ``exact_total_max() + 1`` rows (the total is exact up to the cap, else None) and its first rows or,
    with an offset, its rows from there (``budgeted_read``: under the inline budget with
    ``least_item_bytes``, only the rows that can fit), yielded ``Together`` — neither needs the other's
    rows, so the MCP driver sends both in one round trip. The page reads one row more than it returns,
    so ``has_more`` is exact with or without a total."""
    offset = page.offset
    cap = exact_total_max()
    statement, page_from = budgeted_read(
        lambda n: page_rows(rows, shape, values, offset, n), page.limit, least_item_bytes, extra=1
    )
    n, fetched = yield Together(rows.count(*shape, cap + 1, *values), statement)
    total = int(n) if n <= cap else None
    items, more = page_from(fetched)
    if more is None:
        more = offset + len(items) < total if total is not None else False
    return total, items, more
