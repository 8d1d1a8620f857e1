"""The one inline cut (R-PAGE-5): what of a result goes into a ``tools/call`` reply of at most
``TJWATER_MCP_INLINE_MAX_BYTES`` (12000) bytes, and how the caller reads the rest.

One size measure — the compact UTF-8 JSON ``pydantic_core.to_json`` writes — and one algorithm, used by
both replies: a plain call (``fit_inline``, from ``mcp_app.dispatch``) and a task call whose result was
saved as evidence (``mcp_app.resources.evidence_call_result``, which continues on the saved document
with ``get_task_evidence``). Nothing is stored between calls (no global result store, R-PAGE-5): every
continuation is a set of arguments the caller sends back with its own context handle.

Every result is reachable (issue 23 item 9):

- a page (``data.items``) is cut to the items that fit; ``continue_with`` pages on with ``offset``;
- a time series that is not a page (``ToolSpec.series_start``: ``data.points`` in time order) is cut
  to the points that fit; ``continue_with`` asks again from the first point left out (its ``start``);
- a tool where one item can exceed the cap (``ToolSpec.item_parts``) takes a ``part`` argument
  (``queries.registry.PART_SCHEMA``): the value at ``part.data_path`` of the same call's result, paged
  like evidence (R-PAGE-4: arrays by index, objects by key in code-point order, strings by character).
  When one item does not fit, its largest nested values are left out, each named by a path description
  in ``omitted`` (``{"path": "$.data.properties", "data_path": [...], "kind": "object", "length": 900}``),
  and ``continue_with`` reads the first of them. ``omitted`` and ``part`` appear only when used: they
  cost no bytes in a result that fits.

Anything else over the cap is refused with ``LIMIT_EXCEEDED`` — only for tools whose single item cannot
be larger than the cap (``ToolSpec`` declares the others).

One job per module: ``fit_inline`` (here) decides how a plain call's result is cut; the size measure and
the prefix cut are in ``mcp_app.inline_prefix``, parts and left-out values in ``mcp_app.inline_parts``,
and what a reply's text says about the cut in ``mcp_app.inline_text``. Their public names are importable
from here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contexts.errors import LimitExceeded
from mcp_app.inline_parts import OMIT_MIN_BYTES, PART_DEFAULT_CHARS, PART_DEFAULT_ITEMS, fit_part, outline
from mcp_app.inline_prefix import (
    Continuation,
    Validity,
    cut_items,
    cut_prefix,
    json_size,
    mark_more,
    page_holder_of,
    valid_continuation,
    without_handle,
)
from mcp_app.inline_text import as_returned, cut_summary

__all__ = [
    "OMIT_MIN_BYTES",
    "PART_DEFAULT_CHARS",
    "PART_DEFAULT_ITEMS",
    "Continuation",
    "Validity",
    "as_returned",
    "cut_items",
    "cut_prefix",
    "cut_summary",
    "fit_inline",
    "json_size",
]


def fit_inline(
    structured: dict[str, Any],
    arguments: Mapping[str, Any],
    max_bytes: int,
    validator: Validity | None = None,
    *,
    item_parts: bool = False,
    series_start: str | None = None,
    page_holder: Sequence[str] = ("data",),
    size: int | None = None,
) -> dict[str, Any]:
    """R-PAGE-5 for a plain call: the result as it fits ``max_bytes`` (see the module docstring). With
    the tool's input ``validator`` every continuation is checked to be a valid call. ``size``: the
    result's ``json_size`` when the caller has measured it already."""
    part = arguments.get("part") if item_parts else None
    if part is not None:
        return fit_part(structured, arguments, part, max_bytes, validator)
    if (json_size(structured) if size is None else size) <= max_bytes:
        return structured
    rest = without_handle(arguments)
    data = structured.get("data")
    holder = page_holder_of(structured, page_holder)
    items = holder.get("items") if holder is not None else None
    if holder is not None and isinstance(items, list) and items:
        offset = int(holder.get("offset", 0))

        def page_from(n: int) -> dict[str, Any] | None:
            return {**rest, "offset": offset + n, "limit": n}

        def next_page(n: int) -> dict[str, Any] | None:
            return valid_continuation(page_from(n), arguments, validator)

        kept = cut_items(structured, max_bytes, next_page, page_holder, pure=True, unchecked=page_from)
        if kept and (structured["continue_with"] is not None or not item_parts):
            return structured
        if kept:  # the rest is not a valid page call (no offset to page with): read on inside this result
            holder["items"] = items
            where = [*page_holder, "items"]
            return fit_part(structured, arguments, {"data_path": where}, max_bytes, validator)
    if series_start is not None and isinstance(data, dict) and isinstance(data.get("points"), list):
        points = data["points"]

        def series_from(n: int) -> dict[str, Any] | None:
            return {**rest, series_start: points[n]["time"]} if n < len(points) else None

        def from_point(n: int) -> dict[str, Any] | None:
            return valid_continuation(series_from(n), arguments, validator)

        if cut_prefix(structured, ("data", "points"), max_bytes, from_point, pure=True, unchecked=series_from):
            structured["truncated"] = True
            return structured
        data["points"] = points
    if not item_parts:
        if isinstance(items, list) and items:
            raise LimitExceeded("Even one item of this page is too large to return inline.")
        raise LimitExceeded("The result is too large to return inline; narrow the request.")
    if holder is not None and isinstance(items, list) and items and "offset" in holder:
        # One item is over the cap: a page of that one item, its largest nested values left out.
        holder["items"] = items[:1]
        rest = {**rest, "offset": int(holder["offset"]), "limit": 1}
        if len(items) > 1 or holder.get("has_more"):
            mark_more(structured, page_holder)
    return outline(structured, rest, max_bytes, arguments, validator)
