"""What a reply's text says about the inline cut (R-PAGE-5; the cut itself: ``mcp_app.inline``).

``as_returned`` makes the result a tool's summary is written from match what the reply returns;
``cut_summary`` is the sentence naming what the cut left out and how to read the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pydantic_core


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
