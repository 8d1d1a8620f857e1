"""Raw MCP 2026-07-28 requests over HTTP, for tests that assert status codes and challenges.

Each request is a self-contained POST with the protocol headers and the request ``_meta`` envelope the
2026-07-28 wire requires. SSE answers are read to their JSON-RPC response.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import httpx2

PROTOCOL_VERSION = "2026-07-28"
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
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "tjwater-interop-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
        **(meta or {}),
    }


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
    body_params = {**(params or {}), "_meta": envelope(meta)}
    request_id = next(_ids)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        "Mcp-Method": method,
    }
    if method in ("tools/call", "prompts/get"):
        headers["Mcp-Name"] = str(body_params["name"])
    elif method == "resources/read":
        headers["Mcp-Name"] = str(body_params["uri"])
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    response = httpx2.post(
        url,
        headers=headers,
        json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params},
        timeout=timeout,
    )
    return McpAnswer(status=response.status_code, headers=response.headers, message=_message(response, request_id))


def _message(response: httpx2.Response, request_id: int) -> dict[str, Any] | None:
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:].strip())
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
        return None
    if content_type.startswith("application/json") and response.content:
        decoded = response.json()
        return decoded if isinstance(decoded, dict) else None
    return None
