"""One page of a collection, cut in SQL, with a total that stays cheap at any size (R-PAGE-1, issue 25).

Every collection tool that pages a queryset takes its total and its page from here (``paged``), as plan
fragments (``total, items, has_more = yield from paged(…)``), so they all behave the same:

- the total is counted with a cap: ``SELECT COUNT(*) FROM (… LIMIT cap + 1)``, which reads at most
  ``cap + 1`` rows. Up to ``TJWATER_EXACT_TOTAL_MAX`` rows it is the exact ``total``; above it ``total`` is
  ``null`` — R-PAGE-1's "no stable total" — never an estimate. An exact ``COUNT(*)`` of a very large
  collection reads all of it on every page (most of a ``list_elements`` page on the scale network), for a
  number no client can page through anyway (offsets stop at ``MAX_OFFSET``);
- ``has_more`` is always exact: from the total when there is one, else by reading one row more than the
  page (that row is not returned).

How the threshold was chosen (a measurement) is in ``mcp_app/README.md`` ("Measuring"); the page's
output schema says when ``total`` is null.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from queries.fitting import read_all_fetched, rows_to_fetch
from queries.plan import Statement, count_of
from queries.schemas.common import PageRequest

#: Above this many rows a collection's ``total`` is null (``TJWATER_EXACT_TOTAL_MAX``; measured, see the
#: README). The default when the setting is absent.
EXACT_TOTAL_MAX = 10_000


def exact_total_max() -> int:
    return int(getattr(settings, "TJWATER_EXACT_TOTAL_MAX", EXACT_TOTAL_MAX))


def capped_total(counted: QuerySet[Any], ordering: Sequence[Any] = ()) -> Generator[Statement, Any, int | None]:
    """The number of rows of ``counted`` when at most ``exact_total_max()``, else None (one statement
    that reads at most that many rows plus one).

    The rows are read in ``ordering`` — the page's own order (``paged``) — so the count takes the page's
    index path and stops after ``cap + 1`` rows of it. Without an order the LIMIT makes a sequential scan
    look cheapest, and a collection much smaller than its table is then read whole (the demo's junctions
    among the scale network's: measured in ``mcp_app/README.md``, "Measuring")."""
    cap = exact_total_max()
    n = yield count_of(counted.order_by(*ordering).values("pk")[: cap + 1])
    return int(n) if n <= cap else None


def budgeted_rows(
    read: Callable[[int], Statement], limit: int, least_item_bytes: int | None, *, extra: int = 1
) -> Generator[Statement, Any, tuple[list[Any], bool | None]]:
    """Up to ``limit`` rows of a page, read with ``read(n)`` (the statement for ``n`` rows from the page's
    offset), and what they say of ``has_more``. With ``extra`` one row more than the page is read to tell
    it; without, None (the caller knows it from a total). With ``least_item_bytes`` (the fewest bytes one
    item writes, ``queries.fitting.least_json_bytes``) and under the MCP edge's inline budget, no more rows
    are read than can fit (``queries.fitting.rows_to_fetch``): when the page goes on beyond them,
    ``has_more`` is true (the edge cuts the page there); when it ended inside them, None (nothing beyond
    what was read, as far as this page can tell: the caller's total, else false)."""
    cap = rows_to_fetch(limit, least_item_bytes) if least_item_bytes is not None else limit
    if cap < limit:
        fetched = yield read(cap)
        return list(fetched), (None if read_all_fetched(len(fetched), cap, limit) else True)
    fetched = yield read(limit + extra)
    return list(fetched[:limit]), (len(fetched) > limit if extra else None)


def page_rows(
    rows: QuerySet[Any], page: PageRequest, total: int | None, least_item_bytes: int | None = None
) -> Generator[Statement, Any, tuple[list[Any], bool]]:
    """The page of ``rows`` (ordered, ``.values()``) and an exact ``has_more``: from ``total`` when known,
    else from one row read beyond the page (``budgeted_rows``: under the inline budget with
    ``least_item_bytes``, only the rows that can fit)."""
    items, more = yield from budgeted_rows(
        lambda n: rows[page.offset : page.offset + n], page.limit, least_item_bytes, extra=0 if total is not None else 1
    )
    if more is None:
        more = page.offset + len(items) < total if total is not None else False
    return items, more


def paged(
    counted: QuerySet[Any], rows: QuerySet[Any], page: PageRequest, least_item_bytes: int | None = None
) -> Generator[Statement, Any, tuple[int | None, list[Any], bool]]:
    """``(total, items, has_more)`` of one page: the capped total of ``counted`` (read in the order of
    ``rows``), then the page of ``rows`` (two statements; ``least_item_bytes``: see ``page_rows``)."""
    total = yield from capped_total(counted, rows.query.order_by)
    items, has_more = yield from page_rows(rows, page, total, least_item_bytes)
    return total, items, has_more


def paged_by(
    count: Callable[[int], Statement],
    read: Callable[[int], Statement],
    page: PageRequest,
    least_item_bytes: int | None = None,
) -> Generator[Statement, Any, tuple[int | None, list[Any], bool]]:
    """``paged`` for statements a service writes itself (e.g. statement factories): ``count(k)`` counts
    at most ``k`` rows of the collection (in the page's order, see ``capped_total``), ``read(n)`` reads
    ``n`` rows from the page's offset. Same total, page and ``has_more`` as ``paged``."""
    cap = exact_total_max()
    n = yield count(cap + 1)
    total = int(n) if n <= cap else None
    items, more = yield from budgeted_rows(read, page.limit, least_item_bytes, extra=0 if total is not None else 1)
    if more is None:
        more = page.offset + len(items) < total if total is not None else False
    return total, items, more
