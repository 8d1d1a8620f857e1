"""The whole walk of a new user, end to end (README "First call"):

1. mint a token from the embedded dev issuer (or pass one in ``TJWATER_TOKEN``),
2. create a context handle for a project through the REST API,
3. call tools with the official MCP SDK client (protocol 2026-07-28),
4. revoke the context.

Usage (with ``make run`` serving the demo on port 8000), in a new shell (``scripts/dev`` sets the demo
configuration the embedded dev issuer needs to mint the token):
    scripts/dev scripts/example_client.py [--url http://127.0.0.1:8000] [--project tianjin-demo]

It prints what each step returned (never the token or the handle) and exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
SCOPES = "mcp.catalog.read mcp.query mcp.context.bind"


def mint_token(subject: str, client: str) -> str:
    """``manage.py mcp_token`` prints exactly one token on stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", "mcp_token", "--sub", subject, "--client", client, "--scope", SCOPES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    return result.stdout.strip()


def create_context(base_url: str, token: str, project: str) -> dict[str, object]:
    response = httpx2.post(
        f"{base_url}/api/v1/mcp-query-contexts",
        headers={"Authorization": f"Bearer {token}"},
        json={"project": project, "session_id": f"example-{uuid.uuid4()}", "purpose": "ordinary_chat"},
        timeout=10,
    )
    if response.status_code != 201:
        raise SystemExit(f"creating the context failed: HTTP {response.status_code} {response.text}")
    return response.json()


def revoke_context(base_url: str, token: str, handle: str) -> None:
    response = httpx2.delete(
        f"{base_url}/api/v1/mcp-query-contexts/{handle}", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    if response.status_code != 204:
        raise SystemExit(f"revoking the context failed: HTTP {response.status_code}")


async def call_tools(base_url: str, token: str, handle: str) -> list[dict[str, object]]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    outputs: list[dict[str, object]] = []
    async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode="2026-07-28") as mcp:
        page = await mcp.call_tool(
            "list_elements", {"context_handle": handle, "element_type": "junction", "limit": 3, "offset": 0}
        )
        if page.is_error:
            raise SystemExit(f"list_elements failed: {json.dumps(page.structured_content)}")
        outputs.append(page.structured_content or {})
        first = page.structured_content["data"]["items"][0]["element_id"]
        element = await mcp.call_tool(
            "get_element_properties", {"context_handle": handle, "element_type": "junction", "element_id": first}
        )
        if element.is_error:
            raise SystemExit(f"get_element_properties failed: {json.dumps(element.structured_content)}")
        outputs.append(element.structured_content or {})
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--project", default="tianjin-demo")
    parser.add_argument("--sub", default="alice")
    parser.add_argument("--client", default="tjwater-agent-mcp")
    args = parser.parse_args()

    token = os.environ.get("TJWATER_TOKEN") or mint_token(args.sub, args.client)
    context = create_context(args.url, token, args.project)
    print(f"context created: project={context['project']} purpose={context['purpose']} tools={len(context['tools'])}")
    handle = str(context["context_handle"])
    try:
        outputs = anyio.run(call_tools, args.url, token, handle)
    finally:
        revoke_context(args.url, token, handle)
    for output in outputs:
        print(json.dumps({k: output[k] for k in ("source", "data") if k in output}, ensure_ascii=False)[:600])
    print("context revoked")


if __name__ == "__main__":
    main()
