"""Parts of a result and the values left out of it (R-PAGE-5, issue 23 item 9; the cut as a whole:
``mcp_app.inline``).

For a tool where one item can exceed the cap (``ToolSpec.item_parts``): ``fit_part`` answers a ``part``
call — the value at ``part.data_path`` of the result, from ``part.offset``, cut to what fits — and
``outline`` answers a result whose one item does not fit: its largest nested values left out, each named
by a path description in ``omitted``, with ``continue_with`` reading the first of them with ``part``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from contexts.errors import InvalidParameter, LimitExceeded
from mcp_app.inline_prefix import (
    Validity,
    cut_prefix,
    json_size,
    node_at,
    prefix,
    valid_continuation,
    without_handle,
)

#: ``part.limit`` when the caller leaves it out: members of an object or array, characters of a string.
PART_DEFAULT_ITEMS = 50
PART_DEFAULT_CHARS = 4000
#: A nested value smaller than this is never left out (a path description would not be much smaller).
OMIT_MIN_BYTES = 256


def fit_part(
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
    whole = node_at(structured, resolved)
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
    node_at(structured, resolved[:-1])[resolved[-1]] = prefix(members, limit)
    structured["truncated"] = True
    rest = without_handle(arguments)
    info: dict[str, Any] = {"data_path": path, "kind": kind, "total": total, "offset": offset}
    structured["part"] = info

    def next_part(n: int) -> dict[str, Any] | None:
        info["limit"] = max(n, 1)
        info["has_more"] = offset + n < total
        if offset + n >= total:
            return None
        return valid_continuation(
            {**rest, "part": {"data_path": path, "offset": offset + n, "limit": max(n, 1)}}, arguments, validator
        )

    shown = min(limit, len(members))
    structured["continue_with"] = next_part(shown)
    if json_size(structured) <= max_bytes:
        return structured
    # What is around the part goes first (named in ``omitted``), then the part is cut to what fits.
    node_at(structured, resolved[:-1])[resolved[-1]] = prefix(members, 0)
    structured["continue_with"] = next_part(0)
    if json_size(structured) > max_bytes:
        _leave_out(structured, ["data"], max_bytes, protect=resolved, strict=False)
    if json_size(structured) > max_bytes:
        _trim_ancestors(structured, resolved, max_bytes)
    node_at(structured, resolved[:-1])[resolved[-1]] = members
    if cut_prefix(structured, resolved, max_bytes, next_part) or shown == 0:
        return _tidy(structured)
    if kind == "string":
        raise LimitExceeded("The result is too large to return inline even with its nested values left out.")
    # Not even one member fits: the first one, its largest nested values left out.
    node_at(structured, resolved[:-1])[resolved[-1]] = prefix(members, 1)
    structured["continue_with"] = next_part(1)
    first = resolved + [next(iter(members)) if kind == "object" else 0]
    omitted = _leave_out(structured, first, max_bytes, protect=None)
    if structured["continue_with"] is None and omitted:
        structured["continue_with"] = valid_continuation(
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
    top = node_at(structured, under)
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
        parent = node_at(structured, path[:-1])
        value = parent[path[-1]]
        description = _describe(path, value)
        omitted.append(description)
        removed.append(path)
        removed_descriptions.append(description)
        parent[path[-1]] = prefix(value, 0)
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
        holder = node_at(structured, holder_path)
        if not isinstance(holder, dict) or len(holder) < 2:
            continue
        description = _describe(holder_path, holder)
        description["shown"] = 1
        omitted.append(description)
        node_at(structured, holder_path[:-1])[holder_path[-1]] = {path[depth]: holder[path[depth]]}
    if json_size(structured) > max_bytes:
        raise LimitExceeded("The result is too large to return inline even with its nested values left out.")


def _tidy(structured: dict[str, Any]) -> dict[str, Any]:
    """``omitted`` only when something was left out (an empty one would cost bytes for nothing)."""
    if "omitted" in structured and not structured["omitted"]:
        del structured["omitted"]
    return structured


def outline(
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
    value = node_at(pristine, path)

    def read_on(n: int) -> dict[str, Any] | None:
        first["shown"] = n
        if n >= first["length"]:
            return None
        return valid_continuation(
            {**rest, "part": {"data_path": first["data_path"], "offset": n}}, arguments, validator
        )

    node_at(structured, path[:-1])[path[-1]] = value
    shown = cut_prefix(structured, path, max_bytes, read_on)
    if not shown:
        del first["shown"]
    if shown >= first["length"]:
        omitted.pop(0)
    if omitted and structured.get("continue_with") is None:
        structured["continue_with"] = valid_continuation(
            {**rest, "part": {"data_path": omitted[0]["data_path"], "offset": 0}}, arguments, validator
        )
    return _tidy(structured)
