"""Evidence snapshots as MCP resources (R-EVID-4) and the inline reply of a saved result (R-PAGE-5).

Called by the SDK handlers / dispatch *after* the context was resolved from
``_meta["cn.tjwater/contextHandle"]`` (``mcp_app.dispatch.Dispatcher.resource_scope``, the same checks as
a tool call): the URI ``tjwater://evidence/{evidence_id}`` names the evidence and carries no handle or
token. Every answer is ``ttlMs=0``, ``cacheScope=private`` (R-PROTO-5).

- ``list_evidence_resources(scope, cursor)`` — the bound task's readable evidence, newest first, 50 a
  page (keyset cursor). An ``ordinary_chat`` scope lists none.
- ``read_evidence_resource(scope, uri)`` — the whole snapshot (its RFC 8785 form, digest verified) when
  within 8 MiB; a bigger one → a JSON summary with the ``get_task_evidence`` arguments to page it.
  Unknown, foreign or unreadable → -32602 "Resource not found" (SEP-2164), the same answer.
- ``evidence_call_result(spec, structured)`` — the ``CallToolResult`` of a task call whose result was
  saved (``evidence.services.run_with_evidence``): the result inline when it fits 12000 bytes, else a
  summary cut to fit plus a ``resource_link`` to the saved evidence; a ``resource_link`` is always there.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from django.db import connection
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import BaseModel

from contexts.scope import QueryScope
from evidence import reads
from evidence.task_tools import MAX_ITEMS, PAGE_CEILING_BYTES
from mcp_app import inline
from mcp_app.errors import resource_internal_error, resource_not_found
from queries.registry import ToolSpec

logger = logging.getLogger("tjwater.mcp")

MIME_JSON = "application/json"
EVIDENCE_META_KEY = "cn.tjwater/evidence"


def _closing(fn: Any, **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    finally:
        connection.close()


def _resource(info: reads.SnapshotInfo) -> types.Resource:
    return types.Resource(
        uri=info.uri,
        name=f"evidence-{info.evidence_id}",
        title=f"{info.tool} evidence ({info.created_at:%Y-%m-%d %H:%M:%S} UTC)",
        description=f"Saved result of {info.tool} (source {info.source}) in run {info.run_id}; "
        f"{info.byte_size} bytes, sha256 {info.sha256}.",
        mime_type=MIME_JSON,
        size=info.byte_size,
    )


def invalid_cursor() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Invalid cursor")


def check_cursor(cursor: str | None) -> None:
    """-32602 "Invalid cursor" for anything ``evidence.reads`` did not issue (issue 17 item 4): a cursor
    is client input, so a crafted one (``[iso, 5]``, ``[iso, {}]``, a naive or out-of-range time, deep
    nesting, …) is the client's error — never a server fault with a traceback. Decoded with the reader's
    own ``decode_cursor`` (one format), which raises more than ``InvalidCursor`` on some crafted input;
    then the time must be one the query can compare (aware, convertible to UTC)."""
    if not cursor:
        return
    try:
        created, _ = reads.decode_cursor(cursor)
        if created.tzinfo is None or created.utcoffset() is None:
            raise reads.InvalidCursor()
        created.astimezone(UTC)
    except (reads.InvalidCursor, ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        raise invalid_cursor() from None


async def list_evidence_resources(scope: QueryScope, cursor: str | None) -> types.ListResourcesResult:
    """``resources/list`` for a resolved scope: one page of the bound task's evidence, newest first."""
    check_cursor(cursor)
    try:
        infos, next_cursor = await anyio.to_thread.run_sync(
            lambda: _closing(reads.list_snapshots, scope=scope, cursor=cursor)
        )
    except reads.InvalidCursor:
        raise invalid_cursor() from None
    return types.ListResourcesResult(
        resources=[_resource(i) for i in infos], next_cursor=next_cursor, ttl_ms=0, cache_scope="private"
    )


def _meta(info: reads.SnapshotInfo, params: dict[str, Any]) -> dict[str, Any]:
    return {
        EVIDENCE_META_KEY: {
            "evidence_id": info.evidence_id,
            "tool": info.tool,
            "source": info.source,
            "params": params,
            "run_id": info.run_id,
            "created_at": info.created_at.isoformat(),
            "byte_size": info.byte_size,
            "sha256": info.sha256,
            "origin": "system",
        }
    }


async def read_evidence_resource(scope: QueryScope, uri: str) -> types.ReadResourceResult:
    """``resources/read`` of ``tjwater://evidence/{id}`` for a resolved scope. Raises the SDK's -32602
    "Resource not found" for anything the scope may not read or that does not exist."""
    evidence_id = reads.parse_evidence_uri(uri)
    if evidence_id is None:
        raise resource_not_found(uri)
    try:
        document = await anyio.to_thread.run_sync(
            lambda: _closing(reads.read_snapshot, scope=scope, evidence_id=evidence_id)
        )
    except reads.EvidenceDigestMismatch:
        raise resource_internal_error() from None
    if document is None:
        raise resource_not_found(uri)
    info = document.info
    if document.text is not None:
        text = document.text
    else:
        text = json.dumps(
            {
                "evidence_id": info.evidence_id,
                "truncated": True,
                "reason": f"The document is {info.byte_size} bytes, over the {PAGE_CEILING_BYTES}-byte "
                "ceiling for a whole transfer; page it with get_task_evidence.",
                "byte_size": info.byte_size,
                "sha256": info.sha256,
                "outline": document.outline,
                "get_task_evidence": document.page_with,
            },
            ensure_ascii=False,
        )
    contents = types.TextResourceContents(
        uri=info.uri, mime_type=MIME_JSON, text=text, _meta=_meta(info, document.params)
    )
    return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")


# --- R-PAGE-5: the reply of a saved task call ---------------------------------------------------------


def _link(structured: dict[str, Any]) -> types.ResourceLink:
    return types.ResourceLink(
        uri=structured["evidence_uri"],
        name=f"evidence-{structured['evidence_id']}",
        description="The whole saved result (resources/read with the context handle in _meta).",
        mime_type=MIME_JSON,
    )


def _cut_items(structured: dict[str, Any], max_bytes: int) -> dict[str, Any] | None:
    """The result with ``data.items`` cut to the longest prefix that fits (``mcp_app.inline``, the one
    cut), pointing at the rest of the saved evidence (``get_task_evidence`` on ``["data", "items"]``);
    ``None`` if there is nothing to cut."""
    data = structured.get("data")
    if not isinstance(data, dict):
        return None
    items = data.get("items")
    if not isinstance(items, list) or not items:
        return None
    evidence_id = structured["evidence_id"]
    reply = {**structured, "data": {**data}}
    if isinstance(structured.get("page"), dict):
        reply["page"] = {**structured["page"]}
    kept = inline.cut_items(reply, max_bytes, lambda n: _continue(evidence_id, n, len(items) - n), pure=True)
    return reply if kept else None


def _continue(evidence_id: str, offset: int, remaining: int) -> dict[str, Any]:
    return {
        "tool": "get_task_evidence",
        "arguments": {
            "evidence_id": evidence_id,
            "data_path": ["data", "items"],
            "offset": offset,
            "limit": max(1, min(remaining, MAX_ITEMS)),
        },
    }


def evidence_call_result(
    spec: ToolSpec, structured: dict[str, Any], *, max_bytes: int | None = None, result: BaseModel | None = None
) -> types.CallToolResult:
    """The ``CallToolResult`` of a task call whose result was saved as evidence (R-PAGE-5): inline when
    the JSON fits ``max_bytes`` (``TJWATER_MCP_INLINE_MAX_BYTES``); otherwise a page result cut to fit
    (``truncated=true``, ``continue_with`` → ``get_task_evidence`` on the saved document), or — when
    nothing can be cut — a ``{code: RESULT_SAVED_AS_EVIDENCE, …}`` body (valid against every tool's
    output schema) naming the evidence and the arguments to page it. Always with a ``resource_link``.
    ``result``: the model ``structured`` was dumped from, when the caller ran the query (a retry answered
    from a saved snapshot has only the saved document, validated here for the summary)."""
    max_bytes = max_bytes or settings.TJWATER_MCP_INLINE_MAX_BYTES
    evidence_id = structured["evidence_id"]
    summary = spec.summarize(result if result is not None else spec.output_model.model_validate(structured))
    link = _link(structured)
    if inline.json_size(structured) <= max_bytes:
        text = f"{summary} Saved as evidence {evidence_id}."
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text), link],
            structured_content=structured,
            is_error=False,
            result_type="complete",
        )
    cut = _cut_items(structured, max_bytes)
    if cut is not None:
        text = (
            f"{summary} Truncated to fit inline: {len(cut['data']['items'])} items shown. The whole result is "
            f"saved as evidence {evidence_id}; continue with {json.dumps(cut['continue_with'])}."
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text), link],
            structured_content=cut,
            is_error=False,
            result_type="complete",
        )
    size = inline.json_size(structured)
    body = {
        "code": "RESULT_SAVED_AS_EVIDENCE",
        "message": f"The result ({size} bytes) is larger than {max_bytes} bytes inline. It was saved as evidence "
        f"{evidence_id}: read {structured['evidence_uri']} or page it with get_task_evidence.",
        "retryable": False,
        "details": {
            "evidence_id": evidence_id,
            "evidence_uri": structured["evidence_uri"],
            "byte_size": size,
            "get_task_evidence": {"evidence_id": evidence_id, "data_path": ["data"], "offset": 0, "limit": 20},
        },
    }
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{summary} {body['message']}"), link],
        structured_content=body,
        is_error=False,
        result_type="complete",
    )
