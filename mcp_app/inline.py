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
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pydantic_core

from contexts.errors import InvalidParameter, LimitExceeded

#: ``part.limit`` when the caller leaves it out: members of an object or array, characters of a string.
PART_DEFAULT_ITEMS = 50
PART_DEFAULT_CHARS = 4000
#: A nested value smaller than this is never left out (a path description would not be much smaller).
OMIT_MIN_BYTES = 256

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
    either ``unchecked(n)`` or None (it checks that the call is valid, ``_valid``); the search then checks
    a continuation only where its answer decides whether the prefix fits — when the prefix fits with the
    unchecked continuation, or does not fit even with none — so the check (the tool's input schema, up to
    ≈ 10 % of a maximal trace's CPU when run at every step) runs about once per cut, with the same result."""
    parent = _node(structured, path[:-1])
    key = path[-1]
    whole = parent[key]
    count = len(whole)

    def put(n: int) -> None:
        parent[key] = _prefix(whole, n)
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


def _prefix(value: Any, n: int) -> Any:
    if isinstance(value, dict):
        return {k: value[k] for k in sorted(value)[:n]}  # code-point order = the C collation of R-PAGE-4
    return value[:n]


def _node(root: Any, path: Sequence[str | int]) -> Any:
    node = root
    for segment in path:
        node = node[segment]
    return node


def _without_handle(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if k != "context_handle"}


def _valid(
    continuation: dict[str, Any] | None, arguments: Mapping[str, Any], validator: Validity | None
) -> dict[str, Any] | None:
    """A continuation is offered only when it is itself a valid call (sent back with the caller's own
    handle, checked as the call it will be); otherwise none (the rest cannot be asked for this way)."""
    if continuation is None or validator is None or "context_handle" not in arguments:
        return continuation
    return continuation if validator.is_valid({**continuation, "context_handle": arguments["context_handle"]}) else None


def _holder(structured: dict[str, Any], holder: Sequence[str]) -> dict[str, Any] | None:
    """The dict that holds a page's ``items`` (``data``, or e.g. ``data.page``), if the result has one."""
    node: Any = structured
    for key in holder:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _mark_more(structured: dict[str, Any], holder: Sequence[str] = ("data",)) -> None:
    structured["truncated"] = True
    data = _holder(structured, holder)
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
    data = _holder(structured, holder)
    items = data.get("items") if data is not None else None
    if data is None or not isinstance(items, list) or not items:
        return 0
    before = structured.get("continue_with")
    kept = cut_prefix(structured, (*holder, "items"), max_bytes, continuation, pure=pure, unchecked=unchecked)
    if kept == 0:
        data["items"] = items
        structured["continue_with"] = before
        return 0
    _mark_more(structured, holder)
    return kept


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
        return _fit_part(structured, arguments, part, max_bytes, validator)
    if (json_size(structured) if size is None else size) <= max_bytes:
        return structured
    rest = _without_handle(arguments)
    data = structured.get("data")
    holder = _holder(structured, page_holder)
    items = holder.get("items") if holder is not None else None
    if holder is not None and isinstance(items, list) and items:
        offset = int(holder.get("offset", 0))

        def page_from(n: int) -> dict[str, Any] | None:
            return {**rest, "offset": offset + n, "limit": n}

        def next_page(n: int) -> dict[str, Any] | None:
            return _valid(page_from(n), arguments, validator)

        kept = cut_items(structured, max_bytes, next_page, page_holder, pure=True, unchecked=page_from)
        if kept and (structured["continue_with"] is not None or not item_parts):
            return structured
        if kept:  # the rest is not a valid page call (no offset to page with): read on inside this result
            holder["items"] = items
            where = [*page_holder, "items"]
            return _fit_part(structured, arguments, {"data_path": where}, max_bytes, validator)
    if series_start is not None and isinstance(data, dict) and isinstance(data.get("points"), list):
        points = data["points"]

        def series_from(n: int) -> dict[str, Any] | None:
            return {**rest, series_start: points[n]["time"]} if n < len(points) else None

        def from_point(n: int) -> dict[str, Any] | None:
            return _valid(series_from(n), arguments, validator)

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
            _mark_more(structured, page_holder)
    return _outline(structured, rest, max_bytes, arguments, validator)


def _fit_part(
    structured: dict[str, Any],
    arguments: Mapping[str, Any],
    part: Mapping[str, Any],
    max_bytes: int,
    validator: Validity | None,
) -> dict[str, Any]:
    """The value at ``part.data_path`` of this result, from ``part.offset``: cut to what fits."""
    path = list(part["data_path"])
    offset = int(part.get("offset", 0))
    resolved = _resolve(structured, path)
    whole = _node(structured, resolved)
    members: dict[str, Any] | list[Any] | str
    if isinstance(whole, dict):
        kind, members = "object", {k: whole[k] for k in sorted(whole)[offset:]}
    elif isinstance(whole, list):
        kind, members = "array", whole[offset:]
    elif isinstance(whole, str):
        kind, members = "string", whole[offset:]
    else:
        raise InvalidParameter("part.data_path: names a single value, which has no parts; read it whole.")
    default = PART_DEFAULT_CHARS if kind == "string" else PART_DEFAULT_ITEMS
    limit = int(part.get("limit", default))
    total = len(whole)
    _node(structured, resolved[:-1])[resolved[-1]] = _prefix(members, limit)
    structured["truncated"] = True
    rest = _without_handle(arguments)
    info: dict[str, Any] = {"data_path": path, "kind": kind, "total": total, "offset": offset}
    structured["part"] = info

    def next_part(n: int) -> dict[str, Any] | None:
        info["limit"] = max(n, 1)
        info["has_more"] = offset + n < total
        if offset + n >= total:
            return None
        return _valid(
            {**rest, "part": {"data_path": path, "offset": offset + n, "limit": max(n, 1)}}, arguments, validator
        )

    shown = min(limit, len(members))
    structured["continue_with"] = next_part(shown)
    if json_size(structured) <= max_bytes:
        return structured
    # What is around the part goes first (named in ``omitted``), then the part is cut to what fits.
    _node(structured, resolved[:-1])[resolved[-1]] = _prefix(members, 0)
    structured["continue_with"] = next_part(0)
    if json_size(structured) > max_bytes:
        _leave_out(structured, ["data"], max_bytes, protect=resolved, strict=False)
    if json_size(structured) > max_bytes:
        _trim_ancestors(structured, resolved, max_bytes)
    _node(structured, resolved[:-1])[resolved[-1]] = members
    if cut_prefix(structured, resolved, max_bytes, next_part) or shown == 0:
        return _tidy(structured)
    if kind == "string":
        raise LimitExceeded("The result is too large to return inline even with its nested values left out.")
    # Not even one member fits: the first one, its largest nested values left out.
    _node(structured, resolved[:-1])[resolved[-1]] = _prefix(members, 1)
    structured["continue_with"] = next_part(1)
    first = resolved + [next(iter(members)) if kind == "object" else 0]
    omitted = _leave_out(structured, first, max_bytes, protect=None)
    if structured["continue_with"] is None and omitted:
        structured["continue_with"] = _valid(
            {**rest, "part": {"data_path": omitted[0]["data_path"], "offset": 0}}, arguments, validator
        )
    return _tidy(structured)


def _resolve(structured: dict[str, Any], path: Sequence[str]) -> list[str | int]:
    """``data_path`` (strings, as in evidence paging) as keys and indexes of this result; refused with
    a message naming the field when it does not name a value under ``data``."""
    if not path or path[0] != "data":
        raise InvalidParameter("part.data_path: must start with 'data'.")
    resolved: list[str | int] = []
    node: Any = structured
    for segment in path:
        if isinstance(node, dict) and segment in node:
            resolved.append(segment)
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
            resolved.append(int(segment))
            node = node[int(segment)]
        else:
            raise InvalidParameter("part.data_path: nothing at that path in this result.")
    return resolved


def as_returned(
    result: Any, structured: Mapping[str, Any], page_holder: Sequence[str] = ("data",), series_start: str | None = None
) -> Any:
    """``result`` with its page's items (or its series' points) cut to the ones ``structured`` returns, and
    ``has_more`` set where it was cut — what a reply's text describes: a tool's summary counts what the
    caller got, not what was built (under an ``InlineBudget`` a page is built one item past what fits, so
    it was neither the page asked for nor the one returned). In place: the result was built for this
    call. Nothing changes when the reply is a ``part`` of the result (not a prefix of it)."""
    if not structured.get("truncated") or structured.get("part") is not None:
        return result
    paths = [(tuple(page_holder), "items")]
    if series_start is not None:
        paths.append((("data",), "points"))
    for holder, key in paths:
        model: Any = result
        node: Any = structured
        for name in holder:
            model = getattr(model, name, None)
            node = node.get(name) if isinstance(node, Mapping) else None
        kept = node.get(key) if isinstance(node, Mapping) else None
        whole = getattr(model, key, None)
        if isinstance(kept, list) and isinstance(whole, list) and len(kept) < len(whole):
            setattr(model, key, whole[: len(kept)])
            if getattr(model, "has_more", None) is False:
                model.has_more = True
    return result


def cut_summary(structured: dict[str, Any]) -> str:
    """The sentence a reply's text adds about what the cut left out and how to read it."""
    if not structured.get("truncated"):
        return ""
    text = ""
    part = structured.get("part")
    if isinstance(part, dict):
        where = "/".join(part["data_path"])
        text += f" Part of {where}: from {part['offset']}, {part.get('limit', 0)} of {part['total']}."
    omitted = structured.get("omitted") or []
    if omitted:
        names = ", ".join(f"{o['path']} ({o['kind']}, {o['length']})" for o in omitted)
        text += f" Left out to fit inline (read each with part.data_path as given): {names}."
    more = structured.get("continue_with")
    if more is not None:
        text += f" Truncated to fit inline: call again with {pydantic_core.to_json(more).decode()} for more."
    elif omitted:
        pass  # each is read with part, as the sentence above says
    elif isinstance(part, dict):
        text += " That is the last of it."
    else:
        text += " Truncated to fit inline; the rest is beyond what one call may page to: narrow the request."
    return text


def _describe(path: Sequence[str | int], value: Any) -> dict[str, Any]:
    text = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "string"
    return {"path": text, "data_path": [str(p) for p in path], "kind": kind, "length": len(value)}


def _collections(node: Any, path: list[str | int]) -> list[tuple[int, list[str | int]]]:
    """(size, path) of every array, object or long string under ``node`` worth leaving out."""
    found: list[tuple[int, list[str | int]]] = []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        if isinstance(child, dict | list | str):
            size = json_size(child)
            if size >= OMIT_MIN_BYTES:
                found.append((size, [*path, key]))
                found.extend(_collections(child, [*path, key]))
    return found


def _leave_out(
    structured: dict[str, Any],
    under: list[str | int],
    max_bytes: int,
    *,
    protect: list[str | int] | None,
    strict: bool = True,
) -> list[dict[str, Any]]:
    """Leave out (empty, in place) the largest nested values under ``under`` until the reply fits, each
    named by a path description added to ``structured["omitted"]``; ``protect`` (a part being read),
    what holds it and what it holds are kept. Free-form values (holding no other candidate) go before
    records; refused with ``LIMIT_EXCEEDED`` when even that does not make it fit. Returns the
    descriptions (all of ``omitted``)."""
    top = _node(structured, under)
    found = _collections(top, list(under))
    if under != ["data"] and isinstance(top, dict | list | str):
        found.append((json_size(top), list(under)))  # a part's one member may itself be left out
    if protect is not None:
        found = [(n, p) for n, p in found if p[: len(protect)] != protect and protect[: len(p)] != p]
    paths = [p for _, p in found]

    def leaf(path: list[str | int]) -> bool:  # holds no other candidate: a free-form value, not a record
        return not any(len(q) > len(path) and q[: len(path)] == path for q in paths)

    candidates = sorted(found, key=lambda c: (not leaf(c[1]), -c[0]))
    omitted: list[dict[str, Any]] = structured.setdefault("omitted", [])
    removed: list[list[str | int]] = []
    removed_descriptions: list[dict[str, Any]] = []
    structured["truncated"] = True
    for _, path in candidates:
        if json_size(structured) <= max_bytes:
            break
        if any(path[: len(p)] == p for p in removed):
            continue  # inside a value already left out
        for i in reversed([i for i, p in enumerate(removed) if p[: len(path)] == path]):
            # this value goes whole: what was left out inside it is named by it
            omitted.remove(removed_descriptions[i])
            del removed[i], removed_descriptions[i]
        parent = _node(structured, path[:-1])
        value = parent[path[-1]]
        description = _describe(path, value)
        omitted.append(description)
        removed.append(path)
        removed_descriptions.append(description)
        parent[path[-1]] = _prefix(value, 0)
    if strict and (json_size(structured) > max_bytes or not omitted):
        raise LimitExceeded("The result is too large to return inline even with its nested values left out.")
    return omitted


def _trim_ancestors(structured: dict[str, Any], path: list[str | int], max_bytes: int) -> None:
    """A part inside a free-form object of many small members (attributes): the objects that hold the
    part keep only the member on its path, deepest first, each named in ``omitted`` with ``shown: 1``.
    Records (a result's fixed fields) are never this large, and ``data`` itself is never trimmed."""
    omitted: list[dict[str, Any]] = structured.setdefault("omitted", [])
    for depth in range(len(path) - 1, 1, -1):
        if json_size(structured) <= max_bytes:
            return
        holder_path = path[:depth]
        holder = _node(structured, holder_path)
        if not isinstance(holder, dict) or len(holder) < 2:
            continue
        description = _describe(holder_path, holder)
        description["shown"] = 1
        omitted.append(description)
        _node(structured, holder_path[:-1])[holder_path[-1]] = {path[depth]: holder[path[depth]]}
    if json_size(structured) > max_bytes:
        raise LimitExceeded("The result is too large to return inline even with its nested values left out.")


def _tidy(structured: dict[str, Any]) -> dict[str, Any]:
    """``omitted`` only when something was left out (an empty one would cost bytes for nothing)."""
    if "omitted" in structured and not structured["omitted"]:
        del structured["omitted"]
    return structured


def _outline(
    structured: dict[str, Any],
    rest: dict[str, Any],
    max_bytes: int,
    arguments: Mapping[str, Any],
    validator: Validity | None,
) -> dict[str, Any]:
    """One item over the cap: its largest nested values left out (``_leave_out``), then as much of the
    first one left out as fits, with ``continue_with`` reading the rest of it with ``part``."""
    pristine = copy.deepcopy(structured)
    omitted = _leave_out(structured, ["data"], max_bytes, protect=None)
    first = omitted[0]
    path = _resolve(structured, first["data_path"])
    value = _node(pristine, path)

    def read_on(n: int) -> dict[str, Any] | None:
        first["shown"] = n
        if n >= first["length"]:
            return None
        return _valid({**rest, "part": {"data_path": first["data_path"], "offset": n}}, arguments, validator)

    _node(structured, path[:-1])[path[-1]] = value
    shown = cut_prefix(structured, path, max_bytes, read_on)
    if not shown:
        del first["shown"]
    if shown >= first["length"]:
        omitted.pop(0)
    if omitted and structured.get("continue_with") is None:
        structured["continue_with"] = _valid(
            {**rest, "part": {"data_path": omitted[0]["data_path"], "offset": 0}}, arguments, validator
        )
    return _tidy(structured)
