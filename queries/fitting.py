"""Build only the items of a page that can be returned inline (R-PAGE-5, issue 25 "fetch only what fits").

An MCP reply is capped at ``TJWATER_MCP_INLINE_MAX_BYTES``; a bigger page is cut to the items that fit
(``mcp_app.inline``), so at a page's maximum most of its items were built, validated and serialised only
to be thrown away (``list_elements`` with ``limit=500`` keeps ≈ 30). The MCP edge therefore runs a plain
call of a paged tool under an ``InlineBudget``, and a service builds its page's items with ``fitting``:
under a budget it stops one item after the items built so far exceed the budget — the reply then cannot
fit whole, and ``mcp_app.inline`` cuts it exactly as it would have cut the whole page (the cut keeps the
longest prefix that fits, and this prefix plus one item is there). Everywhere else (REST, admin,
commands, evidence, which saves the whole result) there is no budget and the whole page is built.

The size counted is each item's compact JSON (``pydantic_core.to_json``, the inline cut's own measure),
before unit presentation (``queries.units.present`` scales some numbers afterwards). Scaling can make a
number's text shorter, so a page stopped early might, presented, fit after all: the edge checks that
(``InlineBudget.stopped``) and then runs the call again without a budget — never returns a short page
as if it were whole.

Nor are the rows that cannot fit fetched (issue 25 "only the rows that fit need fetching"): a page's
items each write at least some bytes — their keys, and one byte per value (``least_json_bytes``) — so at
most ``max_bytes // least`` of them fit, and ``rows_to_fetch`` asks SQL for one more than that (``LIMIT``),
never for the 500 rows or 10000 points of a maximal page. Reading that many rows back means the page is
cut at the edge (the rows read exceed the budget by construction), so ``stopped`` is set; reading fewer
means the collection ended there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel

Row = TypeVar("Row")
Item = TypeVar("Item")


class InlineBudget:
    """How many bytes of items the caller can take inline (None: no limit), and whether a page stopped
    early under it. A context manager: the plans run in its block, in this task, build under it."""

    __slots__ = ("max_bytes", "stopped", "_token")
    _token: Token[InlineBudget | None]

    def __init__(self, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self.stopped = False

    def __enter__(self) -> InlineBudget:
        self._token = _BUDGET.set(self if self.max_bytes is not None else None)
        return self

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self._token)

    def build_whole(self, presented_bytes: int) -> bool:
        """Whether the call must be run again without a budget: its page stopped early, yet presented it
        fits after all (unit scaling shortened numbers) — never a short page returned as if whole."""
        return self.stopped and self.max_bytes is not None and presented_bytes <= self.max_bytes


_BUDGET: ContextVar[InlineBudget | None] = ContextVar("tjwater_inline_budget", default=None)


def least_json_bytes(skeleton: Any) -> int:
    """A lower bound of the compact JSON size of every item shaped like ``skeleton`` — an object with the
    item's keys (nested objects with theirs) whatever its values: every value that is not an object is
    counted as the one byte no JSON value is shorter than. Valid only for items that always carry the
    same keys (a model dumped whole, a dict built from a fixed list of names)."""
    return len(pydantic_core.to_json(_zeroed(skeleton)))


def _zeroed(value: Any) -> Any:
    return {k: _zeroed(v) for k, v in value.items()} if isinstance(value, dict) else 0


def model_skeleton(model: type[BaseModel], **nested: Any) -> dict[str, Any]:
    """The skeleton of ``model``'s dump for ``least_json_bytes``: its fields, ``nested`` giving the
    skeleton of a field whose value is an object with known keys."""
    return {name: nested.get(name, 0) for name in model.model_fields}


def rows_to_fetch(limit: int, least_item_bytes: int) -> int:
    """How many rows a page of ``limit`` items needs read: ``limit`` — under an ``InlineBudget``, at most
    one more than the most items of at least ``least_item_bytes`` each that can fit the budget."""
    budget = _BUDGET.get()
    if budget is None or budget.max_bytes is None:
        return limit
    return min(limit, budget.max_bytes // max(1, least_item_bytes) + 1)


def read_all_fetched(fetched: int, cap: int, limit: int) -> bool:
    """After reading a page with ``LIMIT cap`` (``rows_to_fetch``) instead of ``limit``: True when the
    collection ended inside it (fewer rows than ``cap``). Otherwise the page goes on beyond what was read
    and cannot fit: ``stopped`` is set (the edge cuts it, or builds it whole should it fit after all)."""
    if cap >= limit or fetched < cap:
        return True
    budget = _BUDGET.get()
    if budget is not None:
        budget.stopped = True
    return False


def fitting(rows: Sequence[Row], build: Callable[[Row], Item]) -> list[Item]:
    """``[build(row) for row in rows]`` — under an ``InlineBudget``, only up to one item past the budget
    (``stopped`` is set when rows were left unbuilt)."""
    budget = _BUDGET.get()
    if budget is None or budget.max_bytes is None:
        return [build(row) for row in rows]
    items: list[Item] = []
    size = 0
    for row in rows:
        item = build(row)
        items.append(item)
        size += len(pydantic_core.to_json(item)) + 1  # + the comma between items
        if size > budget.max_bytes:
            budget.stopped = len(items) < len(rows)
            break
    return items
