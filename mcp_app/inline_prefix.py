"""The inline cut's size measure and its prefix cut (R-PAGE-5; the cut as a whole: ``mcp_app.inline``).

``json_size`` is the one size measure of an inline reply; ``cut_prefix`` finds the longest prefix of a
list, object or string with which the whole reply, its continuation included, fits; ``cut_items`` cuts
a page with it and marks it as having more. A continuation is offered only when it is itself a valid
call (``valid_continuation``). Used by the plain call's cut (``mcp_app.inline``), the cut of a part
(``mcp_app.inline_parts``) and the saved task call's pages (``mcp_app.resources``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pydantic_core

Continuation = Callable[[int], "dict[str, Any] | None"]


class Validity(Protocol):
    """What checks a continuation is a valid call: a jsonschema validator, or the catalog's
    ``mcp_app.schema_check.InputCheck`` (the fast predicate first)."""

    def is_valid(self, instance: Any) -> bool: ...


def json_size(payload: Any) -> int:
    """The one size measure of an inline reply: bytes of its compact UTF-8 JSON."""
    return len(pydantic_core.to_json(payload))


def cut_prefix(
    structured: dict[str, Any],
    path: Sequence[str | int],
    max_bytes: int,
    continuation: Continuation,
    *,
    pure: bool = False,
    unchecked: Continuation | None = None,
) -> int:
    """Cut the list, object or string at ``path`` of ``structured`` (in place) to its longest prefix with
    which the whole reply — ``continue_with = continuation(kept)`` included — fits ``max_bytes``; return
    how much was kept (0: not even one element fits; ``structured`` then holds the empty prefix).
    ``pure``: ``continuation`` changes nothing of ``structured`` (then a list's prefixes are sized from
    its items' sizes, not by serialising the reply at each step). ``unchecked``: ``continuation(n)`` is
    either ``unchecked(n)`` or None (it checks that the call is valid, ``valid_continuation``); the search
    then checks a continuation only where its answer decides whether the prefix fits — when the prefix
    fits with the unchecked continuation, or does not fit even with none — so the check (the tool's input
    schema, up to ≈ 10 % of a maximal trace's CPU when run at every step) runs about once per cut, with
    the same result."""
    parent = node_at(structured, path[:-1])
    key = path[-1]
    whole = parent[key]
    count = len(whole)

    def put(n: int) -> None:
        parent[key] = prefix(whole, n)
        structured["continue_with"] = continuation(n)

    size = _list_sizes(structured, parent, key, whole) if pure and isinstance(whole, list) else None
    low, high, best = 1, count, 0
    while low <= high:
        mid = (low + high) // 2
        if size is not None:
            bare = size(mid, None)  # with ``continue_with: null``
            offered = (unchecked or continuation)(mid)
            if (size(mid, offered) <= max_bytes) == (bare <= max_bytes):
                fits = bare <= max_bytes  # the same whether or not the continuation is offered: not checked
            else:
                fits = size(mid, continuation(mid)) <= max_bytes
        else:
            put(mid)
            fits = json_size(structured) <= max_bytes
        if fits:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    put(best)
    return best


def _list_sizes(
    structured: dict[str, Any], parent: Any, key: str | int, whole: list[Any]
) -> Callable[[int, dict[str, Any] | None], int]:
    """The exact size of ``structured`` with the first ``n`` items of ``whole`` at ``parent[key]`` and the
    continuation ``c``, from each item's size measured once: compact JSON writes a list as its items
    joined by commas, and a value in place of ``null`` adds its own size less four. (Serialising the
    whole reply at every step of the search was ≈ 5 % of a maximal page's CPU.)"""
    parent[key] = []
    structured["continue_with"] = None
    base = json_size(structured) - len(b"null")
    ends = [0]
    for item in whole:
        ends.append(ends[-1] + json_size(item) + 1)  # the item and the comma before the next

    def size(n: int, c: dict[str, Any] | None) -> int:
        return base + json_size(c) + ends[n] - (1 if n else 0)

    return size


def prefix(value: Any, n: int) -> Any:
    """The first ``n`` members of a list, string or object (an object's in code-point order of its keys)."""
    if isinstance(value, dict):
        return {k: value[k] for k in sorted(value)[:n]}  # code-point order = the C collation of R-PAGE-4
    return value[:n]


def node_at(root: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` (keys and indexes) of ``root``."""
    node = root
    for segment in path:
        node = node[segment]
    return node


def without_handle(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments without its ``context_handle`` (a continuation is sent back with the caller's own)."""
    return {k: v for k, v in arguments.items() if k != "context_handle"}


def valid_continuation(
    continuation: dict[str, Any] | None, arguments: Mapping[str, Any], validator: Validity | None
) -> dict[str, Any] | None:
    """A continuation is offered only when it is itself a valid call (sent back with the caller's own
    handle, checked as the call it will be); otherwise none (the rest cannot be asked for this way)."""
    if continuation is None or validator is None or "context_handle" not in arguments:
        return continuation
    return continuation if validator.is_valid({**continuation, "context_handle": arguments["context_handle"]}) else None


def page_holder_of(structured: dict[str, Any], holder: Sequence[str]) -> dict[str, Any] | None:
    """The dict that holds a page's ``items`` (``data``, or e.g. ``data.page``), if the result has one."""
    node: Any = structured
    for key in holder:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def mark_more(structured: dict[str, Any], holder: Sequence[str] = ("data",)) -> None:
    """The reply marked ``truncated``, and its page (and a top-level ``page``) as having more."""
    structured["truncated"] = True
    data = page_holder_of(structured, holder)
    if data is not None and "has_more" in data:
        data["has_more"] = True
    if isinstance(structured.get("page"), dict):
        structured["page"]["has_more"] = True


def cut_items(
    structured: dict[str, Any],
    max_bytes: int,
    continuation: Continuation,
    holder: Sequence[str] = ("data",),
    *,
    pure: bool = False,
    unchecked: Continuation | None = None,
) -> int:
    """A page (``data.items``, or the ``items`` of ``holder``) cut to the items that fit, marked
    ``truncated`` with more to come; returns the number kept (0: not even one item fits, nothing was
    marked). ``pure``, ``unchecked``: as for ``cut_prefix``."""
    data = page_holder_of(structured, holder)
    items = data.get("items") if data is not None else None
    if data is None or not isinstance(items, list) or not items:
        return 0
    before = structured.get("continue_with")
    kept = cut_prefix(structured, (*holder, "items"), max_bytes, continuation, pure=pure, unchecked=unchecked)
    if kept == 0:
        data["items"] = items
        structured["continue_with"] = before
        return 0
    mark_more(structured, holder)
    return kept
