"""What the four questions of the demo investigation ("low pressure in Hexi after the LINK-1523 break")
cost an agent, answered twice over real MCP — with the 25 original tools only, and with issue 22's tools:

1. the 10 lowest baseline pressures in Hexi at 2026-11-01T09:00:00Z;
2. the pressure sensors that departed most from the model between 08:00Z and 12:00Z (the break is at 08:00Z);
3. the path that feeds JUNCTION-1304 at 09:00Z;
4. the pipes that meet LINK-1523's end nodes.

Each ``tools/call`` goes over HTTP as an agent would send it (alice's ``ordinary_chat`` context on the demo);
a call counts, and so does every byte of its HTTP response body. The original-tools strategies are the
cheapest this script could find: (1) every junction's pressure at 09:00 (``query_model_baseline_field``, its
pages and inline continuations), sorted here, then ``get_element_gis_properties`` on the lowest until ten
are in Hexi; (2) the device list, the cleaned readings and the baseline series of every pressure device
(20 per call, continuations followed), the difference interpolated here; (3) hop by hop from the junction:
its coordinates, the links within 0.5 m of it (``query_nearby_elements`` per link type), each candidate's
baseline flow, then the largest inflow, until a reservoir or tank; (4) the pipe's end nodes, their
coordinates, the pipes within 0.5 m of each. The demo's data is read, never changed.

Usage (with ``make run`` serving the demo on port 8000):
    .venv/bin/python scripts/investigation_questions.py [--url http://127.0.0.1:8000] [--json]

Prints a table (calls and bytes per question and approach) and the answers; ``--json`` prints one JSON
document instead (the tests read it). Exits non-zero when the two approaches disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from bisect import bisect_right
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parent.parent
CLIENT = "tjwater-agent-mcp"
PROTOCOL = "2026-07-28"
SCOPES = "mcp.catalog.read mcp.query mcp.context.bind"
AT = "2026-11-01T09:00:00Z"
BREAK, NOON = "2026-11-01T08:00:00Z", "2026-11-01T12:00:00Z"
LINK_TYPES = ("pipe", "pump", "valve")
NODE_TYPES = ("junction", "reservoir", "tank")
TOUCH_M = 0.5  # a link's end lies on its node: within half a metre of the node's point
MAX_HOPS = 200


class QuestionsFailed(SystemExit):
    pass


def manage(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, check=True, env=os.environ
    )
    return result.stdout.strip()


class Agent:
    """An MCP client that counts what it pays: calls and response bytes, per question."""

    def __init__(self, url: str, token: str, handle: str) -> None:
        self.url, self.token, self.handle = url, token, handle
        self.http = httpx2.Client(timeout=120)
        self.calls = 0
        self.bytes = 0

    def reset(self) -> None:
        self.calls = self.bytes = 0

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The structuredContent of a tool result; a business error (``isError``) is returned as its body."""
        body = {
            "jsonrpc": "2.0",
            "id": self.calls + 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": {"context_handle": self.handle, **arguments},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "authorization": f"Bearer {self.token}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": PROTOCOL,
            "mcp-method": "tools/call",
            "mcp-name": tool,
        }
        response = self.http.post(f"{self.url}/mcp", json=body, headers=headers)
        self.calls += 1
        self.bytes += len(response.content)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
            reply = json.loads(events[-1])
        else:
            reply = response.json()
        if "result" not in reply:
            raise QuestionsFailed(f"{tool} {arguments}: {json.dumps(reply)[:500]}")
        return dict(reply["result"]["structuredContent"])

    def pages(self, tool: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        """Every item of a paged result: the call, then its ``continue_with`` (inline cuts) or next page."""
        items: list[dict[str, Any]] = []
        args = dict(arguments)
        while True:
            out = self.call(tool, args)
            items += out["data"]["items"]
            if out.get("continue_with"):
                args = {**args, **out["continue_with"]}
            elif out["data"].get("has_more"):
                args = {**args, "offset": out["data"]["offset"] + len(out["data"]["items"])}
            else:
                return items


# --- the 25 original tools ----------------------------------------------------------------------------


def q1_original(agent: Agent) -> list[list[Any]]:
    values = agent.pages(
        "query_model_baseline_field", {"element_type": "junction", "field": "pressure", "time": AT, "limit": 500}
    )
    ranked = sorted((v["value"], v["element_id"]) for v in values)
    answer = []
    for value, element_id in ranked:
        gis = agent.call("get_element_gis_properties", {"element_type": "junction", "element_id": element_id})
        if gis["data"].get("district") == "Hexi":
            answer.append([element_id, value])
            if len(answer) == 10:
                break
    return answer


def _t(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _interpolate(series: list[tuple[float, float]], t: float) -> float | None:
    """The series linearly interpolated at ``t``; ``None`` outside its span (no comparison there)."""
    times = [s[0] for s in series]
    if not times or t < times[0] or t > times[-1]:
        return None
    i = bisect_right(times, t)
    if times[i - 1] == t:
        return series[i - 1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def q2_original(agent: Agent) -> list[list[Any]]:
    devices = [d for d in agent.pages("list_scada_devices", {"limit": 100}) if d["quantity"] == "pressure"]
    readings: dict[str, list[tuple[float, float]]] = {}
    series: dict[str, list[tuple[float, float]]] = {}
    for batch in (devices[i : i + 20] for i in range(0, len(devices), 20)):
        ids = [d["device_id"] for d in batch]
        for p in agent.pages(
            "query_scada_readings", {"device_ids": ids, "start": BREAK, "end": NOON, "field": "cleaned_value"}
        ):
            if p["value"] is not None:
                readings.setdefault(p["device_id"], []).append((_t(p["time"]), p["value"]))
        elements = sorted({d["element_id"] for d in batch})
        for p in agent.pages(
            "query_model_baseline_series",
            {"element_type": "junction", "element_ids": elements, "start": BREAK, "end": "2026-11-01T12:15:00Z",
             "fields": ["pressure"]},
        ):  # fmt: skip
            series.setdefault(p["element_id"], []).append((_t(p["time"]), p["values"]["pressure"]))
    ranked = []
    for d in devices:
        s = sorted(series.get(d["element_id"], []))
        diffs = [abs(v - m) for t, v in readings.get(d["device_id"], []) if (m := _interpolate(s, t)) is not None]
        if diffs:
            ranked.append([d["device_id"], sum(diffs) / len(diffs)])
    ranked.sort(key=lambda r: (-r[1], r[0]))
    return ranked[:10]


def _node(agent: Agent, node_id: str) -> tuple[str, list[float]]:
    for kind in NODE_TYPES:
        out = agent.call("get_element_properties", {"element_type": kind, "element_id": node_id})
        if "data" in out:
            props = out["data"]["properties"]
            return kind, [props["longitude"], props["latitude"]]
    raise QuestionsFailed(f"node {node_id} not found")


def _links_at(agent: Agent, node_id: str, where: list[float]) -> list[tuple[str, dict[str, Any]]]:
    links = []
    for kind in LINK_TYPES:
        near = agent.pages(
            "query_nearby_elements", {"center": where, "element_type": kind, "radius_m": TOUCH_M, "limit": 100}
        )
        links += [
            (kind, n) for n in near if node_id in (n["properties"]["start_node_id"], n["properties"]["end_node_id"])
        ]
    return links


def q3_original(agent: Agent) -> list[str]:
    node, path = "JUNCTION-1304", ["JUNCTION-1304"]
    kind, where = _node(agent, node)
    while len(path) < 2 * MAX_HOPS:
        best: tuple[float, str, str] | None = None
        for link_type, link in _links_at(agent, node, where):
            props = link["properties"]
            at = agent.call(
                "get_model_baseline_at_time", {"element_type": link_type, "element_id": link["element_id"], "time": AT}
            )
            flow = at["data"]["values"]["flow"]
            upstream = props["start_node_id"] if flow > 0 else props["end_node_id"]
            if abs(flow) > 1e-6 and upstream != node and upstream not in path:
                candidate = (-abs(flow), link["element_id"], upstream)
                best = candidate if best is None or candidate < best else best
        if best is None:
            break
        path += [best[1], best[2]]
        node = best[2]
        kind, where = _node(agent, node)
        if kind in ("reservoir", "tank"):
            break
    return path


def q4_original(agent: Agent) -> list[str]:
    props = agent.call("get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523"})["data"]
    ends = [props["properties"]["start_node_id"], props["properties"]["end_node_id"]]
    pipes: set[str] = set()
    for node in ends:
        _, where = _node(agent, node)
        pipes |= {link["element_id"] for kind, link in _links_at(agent, node, where) if kind == "pipe"}
    return sorted(pipes - {"LINK-1523"})


# --- issue 22's tools ---------------------------------------------------------------------------------


def q1_new(agent: Agent) -> list[list[Any]]:
    out = agent.call(
        "rank_model_baseline",
        {"element_type": "junction", "field": "pressure", "time": AT, "limit": 10, "area": {"district": "Hexi"}},
    )
    return [[i["element_id"], i["value"]] for i in out["data"]["items"]]


def q2_new(agent: Agent) -> list[list[Any]]:
    out = agent.call("rank_scada_deviation", {"start": BREAK, "end": NOON, "quantity": "pressure", "limit": 10})
    return [[i["device_id"], i["mean_abs_diff"]] for i in out["data"]["items"]]


def q3_new(agent: Agent) -> list[str]:
    out = agent.call(
        "trace_flow_path",
        {"element_type": "junction", "element_id": "JUNCTION-1304", "direction": "upstream", "time": AT},
    )
    return [i["element_id"] for i in out["data"]["items"] if i["dominant"]]


def q4_new(agent: Agent) -> list[str]:
    out = agent.call("get_connected_elements", {"element_type": "pipe", "element_id": "LINK-1523", "depth": 1})
    return sorted(i["element_id"] for i in out["data"]["items"] if i["element_type"] == "pipe")


QUESTIONS = [
    ("1 lowest pressures in Hexi at 09:00", q1_original, q1_new),
    ("2 sensors departing from the model 08–12", q2_original, q2_new),
    ("3 path feeding JUNCTION-1304 at 09:00", q3_original, q3_new),
    ("4 pipes meeting LINK-1523's end nodes", q4_original, q4_new),
]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return bool(a == b)


def bind(url: str, token: str, project: str) -> str:
    response = httpx2.post(
        f"{url}/api/v1/mcp-query-contexts",
        headers={"Authorization": f"Bearer {token}"},
        json={"project": project, "session_id": f"questions-{uuid.uuid4()}", "purpose": "ordinary_chat"},
        timeout=10,
    )
    if response.status_code != 201:
        raise QuestionsFailed(f"binding a context failed: {response.status_code} {response.text[:300]}")
    return str(response.json()["context_handle"])


def run(url: str, project: str, who: str) -> dict[str, Any]:
    token = manage("mcp_token", "--sub", who, "--client", CLIENT, "--scope", SCOPES)
    handle = bind(url, token, project)
    agent = Agent(url, token, handle)
    report: dict[str, Any] = {"questions": []}
    try:
        for title, original, new in QUESTIONS:
            row: dict[str, Any] = {"question": title}
            for label, answer_it in (("original", original), ("new", new)):
                agent.reset()
                answer = answer_it(agent)
                row[label] = {"calls": agent.calls, "bytes": agent.bytes, "answer": answer}
            row["agree"] = same(row["original"]["answer"], row["new"]["answer"])
            report["questions"].append(row)
    finally:
        httpx2.delete(
            f"{url}/api/v1/mcp-query-contexts/{handle}", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
    return report


def table(report: dict[str, Any]) -> str:
    lines = [
        "| question | 25 original tools: calls | bytes | new tools: calls | bytes | same answer |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in report["questions"]:
        o, n = row["original"], row["new"]
        lines.append(
            f"| {row['question']} | {o['calls']} | {o['bytes']:,} | {n['calls']} | {n['bytes']:,} | "
            f"{'yes' if row['agree'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--project", default="tianjin-demo")
    parser.add_argument("--who", default="alice")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run(args.url.rstrip("/"), args.project, args.who)
    if args.json:
        print(json.dumps(report))
    else:
        print(table(report))
        for row in report["questions"]:
            print(f"{row['question']}: {json.dumps(row['new']['answer'])}")
    if not all(row["agree"] for row in report["questions"]):
        raise QuestionsFailed("the two approaches disagree")


if __name__ == "__main__":
    main()
