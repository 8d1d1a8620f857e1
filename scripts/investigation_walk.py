"""The worked investigation of the demo's task 1 ("low pressure in Hexi after the LINK-1523 break"),
end to end over HTTP (issue 12, SPEC §8):

1. the worker identity (``svc-worker``) mints a token and binds a ``task_execution`` context for the
   task's current run (session ``session-demo-1``, execution request ``exec-demo-1``);
2. it reads the task context and queries with request keys (``_meta["cn.tjwater/requestKey"]``); every
   result comes back with an ``evidence_id`` and a ``tjwater://evidence/…`` resource link;
3. one call is sent and its connection dropped before the answer is read (a forced disconnect); the
   retry with the same request key returns the same evidence (one receipt, one snapshot);
4. a ``task_reader`` sub-agent binds to the parent run and reads that evidence (``get_task_evidence``
   and ``resources/read``);
5. an ``ordinary_chat`` context of the same identity reads none of it;
6. every context is revoked.

Usage (with ``make run`` serving the demo on port 8000):
    .venv/bin/python scripts/investigation_walk.py [--url http://127.0.0.1:8000]

It prints one line per step (never a token or a handle) and exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
SCOPES = "mcp.catalog.read mcp.query mcp.context.bind"
CLIENT = "tjwater-agent-mcp"
PROTOCOL = "2026-07-28"
REQUEST_KEY = "cn.tjwater/requestKey"
HANDLE_KEY = "cn.tjwater/contextHandle"
DEMO_SESSION = "session-demo-1"
DEMO_EXECUTION_REQUEST = "exec-demo-1"
DEMO_TASK_QUERY = (
    "from contexts.models import TaskRun; "
    "r = TaskRun.objects.get(task__project__slug='tianjin-demo', task__title__contains='LINK-1523', "
    "superseded_at__isnull=True); print(r.task_id, r.pk)"
)


class WalkFailed(SystemExit):
    pass


def fail(step: str, detail: Any) -> WalkFailed:
    return WalkFailed(f"{step} failed: {json.dumps(detail, ensure_ascii=False, default=str)[:800]}")


def manage(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, check=True, env=os.environ
    )
    return result.stdout.strip()


def mint_token(subject: str) -> str:
    return manage("mcp_token", "--sub", subject, "--client", CLIENT, "--scope", SCOPES)


def demo_task() -> tuple[int, int]:
    """The demo task and its current run (a local demo walk may ask the database; a host knows them)."""
    task_id, run_id = manage("shell", "--no-imports", "-c", DEMO_TASK_QUERY).splitlines()[-1].split()
    return int(task_id), int(run_id)


def bind(base_url: str, token: str, body: dict[str, Any]) -> str:
    response = httpx2.post(
        f"{base_url}/api/v1/mcp-query-contexts", headers={"Authorization": f"Bearer {token}"}, json=body, timeout=10
    )
    if response.status_code != 201:
        raise fail(f"binding a {body['purpose']} context", {"status": response.status_code, "body": response.text})
    created = response.json()
    print(f"context bound: purpose={created['purpose']} project={created['project']} tools={len(created['tools'])}")
    return str(created["context_handle"])


def revoke(base_url: str, token: str, handle: str) -> None:
    httpx2.delete(
        f"{base_url}/api/v1/mcp-query-contexts/{handle}", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def client(base_url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=PROTOCOL)


def evidence_of(step: str, result: Any) -> str:
    if result.is_error:
        raise fail(step, result.structured_content)
    structured = result.structured_content or {}
    evidence_id = structured.get("evidence_id") or (structured.get("details") or {}).get("evidence_id")
    links = [c.uri for c in result.content if getattr(c, "type", "") == "resource_link"]
    if not evidence_id or f"tjwater://evidence/{evidence_id}" not in links:
        raise fail(step, {"expected": "evidence_id and a resource_link", "got": structured})
    return str(evidence_id)


def disconnecting_call(base_url: str, token: str, handle: str, name: str, arguments: dict[str, Any], key: str) -> None:
    """Send a tools/call and drop the connection without reading the answer (a forced disconnect)."""
    body = {
        "jsonrpc": "2.0",
        "id": 9001,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": {"context_handle": handle, **arguments},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
                REQUEST_KEY: key,
            },
        },
    }
    headers = {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    with httpx2.Client(timeout=30) as http, http.stream("POST", f"{base_url}/mcp", json=body, headers=headers):
        time.sleep(0.5)  # the server runs the call; we leave without reading a byte of the answer


async def walk(base_url: str, worker: str, task_id: int, run_id: int, project: str) -> None:
    token = mint_token(worker)
    handles: list[str] = []
    try:
        exec_handle = bind(
            base_url,
            token,
            {
                "project": project,
                "session_id": DEMO_SESSION,
                "purpose": "task_execution",
                "task_id": task_id,
                "run_id": run_id,
                "execution_request_id": DEMO_EXECUTION_REQUEST,
            },
        )
        handles.append(exec_handle)
        async with client(base_url, token) as mcp:
            context = await mcp.call_tool("get_task_context", {"context_handle": exec_handle, "section": "findings"})
            if context.is_error:
                raise fail("get_task_context", context.structured_content)
            data = context.structured_content["data"]
            print(f"task {data['task_id']}: {data['title']} — report revision {data['report_revision']} "
                  f"({data['revision_source']}), {data['note']}")  # fmt: skip

            element = {"element_type": "junction", "element_id": "JUNCTION-1304"}
            first = await mcp.call_tool(
                "get_element_properties",
                {"context_handle": exec_handle, **element},
                meta={REQUEST_KEY: f"walk-{uuid.uuid4()}"},
            )
            element_evidence = evidence_of("get_element_properties", first)
            print(f"get_element_properties JUNCTION-1304 → evidence {element_evidence}")
            run = await mcp.call_tool(
                "get_analysis_run",
                {"context_handle": exec_handle, "run_id": "burst-20261101-0800"},
                meta={REQUEST_KEY: f"walk-{uuid.uuid4()}"},
            )
            print(f"get_analysis_run burst-20261101-0800 → evidence {evidence_of('get_analysis_run', run)}")

            # 3. a forced disconnect, then the retry with the same request key
            key = f"walk-disconnect-{uuid.uuid4()}"
            pipe = {"element_type": "pipe", "element_id": "LINK-1523"}
            before = {r.uri for r in (await mcp.list_resources(meta={HANDLE_KEY: exec_handle})).resources}
            disconnecting_call(base_url, token, exec_handle, "get_element_properties", pipe, key)
            retry = await mcp.call_tool(
                "get_element_properties", {"context_handle": exec_handle, **pipe}, meta={REQUEST_KEY: key}
            )
            retried = evidence_of("the retry after a disconnect", retry)
            after = {r.uri for r in (await mcp.list_resources(meta={HANDLE_KEY: exec_handle})).resources}
            new = after - before
            if new != {f"tjwater://evidence/{retried}"}:
                raise fail("exactly one evidence for the disconnected call and its retry", sorted(new))
            print(f"disconnected call + retry with the same request key → one evidence {retried}")

        # 4. a task_reader sub-agent of the parent run
        reader_handle = bind(
            base_url,
            token,
            {
                "project": project,
                "session_id": f"walk-reader-{uuid.uuid4()}",
                "purpose": "task_reader",
                "task_id": task_id,
                "parent_session_id": DEMO_SESSION,
            },
        )
        handles.append(reader_handle)
        async with client(base_url, token) as mcp:
            page = await mcp.call_tool(
                "get_task_evidence",
                {"context_handle": reader_handle, "evidence_id": element_evidence, "data_path": ["data", "properties"]},
            )
            if page.is_error:
                raise fail("reader get_task_evidence", page.structured_content)
            members = {e["key"]: e["value"] for e in page.structured_content["data"]["items"]}
            print(f"reader: get_task_evidence {element_evidence} → elevation {members.get('elevation')}")
            read = await mcp.read_resource(f"tjwater://evidence/{element_evidence}", meta={HANDLE_KEY: reader_handle})
            print(f"reader: resources/read → {len(read.contents[0].text)} bytes of evidence")

        # 5. ordinary chat of the same identity: none of it
        chat_handle = bind(
            base_url, token, {"project": project, "session_id": f"walk-chat-{uuid.uuid4()}", "purpose": "ordinary_chat"}
        )
        handles.append(chat_handle)
        async with client(base_url, token) as mcp:
            listed = await mcp.list_resources(meta={HANDLE_KEY: chat_handle})
            if listed.resources:
                raise fail("ordinary_chat lists no evidence", [r.uri for r in listed.resources])
            try:
                await mcp.read_resource(f"tjwater://evidence/{element_evidence}", meta={HANDLE_KEY: chat_handle})
            except Exception as exc:  # the SDK raises the JSON-RPC error (-32602 "Resource not found")
                print(f"ordinary_chat: resources/read refused ({type(exc).__name__}: {str(exc)[:60]})")
            else:
                raise fail("ordinary_chat reads no evidence", "the read succeeded")
            try:
                refused = await mcp.call_tool(
                    "get_task_evidence", {"context_handle": chat_handle, "evidence_id": element_evidence}
                )
            except Exception as exc:  # -32602 "Unknown tool": task tools are never in an ordinary_chat binding
                print(f"ordinary_chat: get_task_evidence refused ({type(exc).__name__})")
            else:
                raise fail("ordinary_chat has no get_task_evidence", refused.structured_content)
    finally:
        for handle in handles:
            revoke(base_url, token, handle)
    print("contexts revoked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--project", default="tianjin-demo")
    parser.add_argument("--worker", default="svc-worker")
    parser.add_argument("--task-id", type=int)
    parser.add_argument("--run-id", type=int)
    args = parser.parse_args()
    task_id, run_id = (args.task_id, args.run_id) if args.task_id and args.run_id else demo_task()
    anyio.run(walk, args.url, args.worker, task_id, run_id, args.project)


if __name__ == "__main__":
    main()
