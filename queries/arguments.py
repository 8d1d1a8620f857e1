"""Checks every edge makes on a tool's arguments before its schema: they must be valid text.

PostgreSQL text cannot hold a NUL, and a lone surrogate (``"\\ud800"`` in JSON) cannot be encoded as
UTF-8; either would fail deep in the driver and look like a server fault. Refused up front instead, as
the caller's error (issue 9 item 2), by the MCP dispatch path and the REST API alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def bad_text_path(value: Any, path: str = "") -> str | None:
    """The path of the first string (key or value) that is not valid text for PostgreSQL — a lone
    surrogate or a NUL — else None. A bad key is reported by its parent's path (never echoed)."""
    if isinstance(value, str):
        if value.isascii():
            return path if "\x00" in value else None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return path if "\x00" in value else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if bad_text_path(key, path) is not None:
                return path or "(arguments)"
            found = bad_text_path(item, f"{path}/{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = bad_text_path(item, f"{path}/{i}")
            if found is not None:
                return found
    return None
