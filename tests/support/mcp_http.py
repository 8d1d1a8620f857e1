"""Raw MCP 2026-07-28 requests over HTTP, for tests that assert status codes, headers and challenges.

Each request is a self-contained POST with the protocol headers (``rpc_headers``) and the request
``_meta`` envelope the 2026-07-28 wire requires (``rpc_body``); SSE answers are read to their JSON-RPC
response (``parse_rpc_response``). ``mcp_request`` does all three and returns an ``McpAnswer``;
``call_tool`` is ``tools/call`` with a bearer and a context handle.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import httpx2

PROTOCOL_VERSION = PROTOCOL = "2026-07-28"
CLIENT_INFO = {"io.modelcontextprotocol/clientInfo": {"name": "tjwater-interop-tests", "version": "1"}}
_ids = itertools.count(1)


@dataclass
class McpAnswer:
    """The HTTP status, headers and JSON-RPC message of one MCP request."""

    status: int
    headers: httpx2.Headers
    message: dict[str, Any] | None

    @property
    def result(self) -> dict[str, Any]:
        assert self.message is not None and "result" in self.message, (self.status, self.message)
        return dict(self.message["result"])

    @property
    def error(self) -> dict[str, Any]:
        assert self.message is not None and "error" in self.message, (self.status, self.message)
        return dict(self.message["error"])


def envelope(meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request ``_meta`` of the 2026-07-28 wire (``meta`` added, and winning)."""
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        **(meta or {}),
    }


def rpc_body(
    method: str, params: dict[str, Any] | None = None, request_id: int = 1, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-RPC request with the ``_meta`` envelope in its params."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": envelope(meta)}}


def rpc_headers(method: str, bearer: str | None, name: str | None = None, **extra: str) -> dict[str, str]:
    """The protocol headers of a POST (``mcp-name`` for tools/call, prompts/get, resources/read)."""
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    if bearer is not None:
        headers["authorization"] = f"Bearer {bearer}"
    headers.update(extra)
    return headers


def parse_rpc_response(response: httpx2.Response, request_id: int | None = None) -> dict[str, Any]:
    """The JSON-RPC reply of a POST, whether sent as JSON or as an SSE event (the last one, or the one
    answering ``request_id``)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(line[5:].strip()) for line in response.text.splitlines() if line.startswith("data:")]
        if request_id is not None:
            events = [e for e in events if isinstance(e, dict) and e.get("id") == request_id]
        return events[-1]
    return response.json()


def mcp_request(
    url: str,
    token: str | None,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    meta: dict[str, Any] | None = None,
    timeout: float = 15,
) -> McpAnswer:
    """POST one JSON-RPC request to ``url`` (the /mcp endpoint) and return its answer."""
    params = params or {}
    request_id = next(_ids)
    name = None
    if method in ("tools/call", "prompts/get"):
        name = str(params["name"])
    elif method == "resources/read":
        name = str(params["uri"])
    response = httpx2.post(
        url,
        headers=rpc_headers(method, token, name),
        json=rpc_body(method, params, request_id, {**CLIENT_INFO, **(meta or {})}),
        timeout=timeout,
    )
    return McpAnswer(status=response.status_code, headers=response.headers, message=_message(response, request_id))


def _message(response: httpx2.Response, request_id: int) -> dict[str, Any] | None:
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        try:
            return parse_rpc_response(response, request_id)
        except IndexError:
            return None
    if content_type.startswith("application/json") and response.content:
        decoded = response.json()
        return decoded if isinstance(decoded, dict) else None
    return None


def call_tool(
    base: str, name: str, arguments: dict[str, Any], *, bearer: str | None, context_handle: str, timeout: float = 30
) -> dict[str, Any]:
    """``tools/call`` of ``name`` at ``base``/mcp with ``context_handle`` in its arguments: the JSON-RPC reply."""
    response = httpx2.post(
        f"{base}/mcp",
        json=rpc_body("tools/call", {"name": name, "arguments": {"context_handle": context_handle, **arguments}}),
        headers=rpc_headers("tools/call", bearer, name=name),
        timeout=timeout,
    )
    return parse_rpc_response(response)
