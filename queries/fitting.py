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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from typing import TypeVar

import pydantic_core

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


_BUDGET: ContextVar[InlineBudget | None] = ContextVar("tjwater_inline_budget", default=None)


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
