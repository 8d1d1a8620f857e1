"""``make bench``: what a call costs on this hardware, with production settings (issue 10).

Starts, from a fresh clone: a benchmark database (``tjwater_bench``: the demo utility and the Net6 tiled
scale network), the Keycloak-shaped OpenID provider of ``devtools/`` as the one trusted issuer (the dev
issuer refuses ``DEBUG=False``), and one uvicorn process with ``DEBUG=False`` pinned to CPU 0; the load
generator runs here, pinned to CPU 1. Tokens are real: alice signs in through the provider's login form
and her token is exchanged (RFC 8693) for an ``/mcp`` token; her memberships are granted with the
onboarding service (``manage.py membership_grant``); contexts are created through the REST API.

For every scenario (each tool at a typical and at its maximum size): p50/p95 at concurrency 1, req/s at
concurrency 1 and 8, server CPU per call (utime+stime of the server process over the measured phase),
and the scenario's own floor measured in the same run with its ratio (issue 25): the tool's SQL — the
statements the call runs, captured from the tool's plan through the MCP driver — executed with psycopg
alone, plus serialising the same answer with the fastest serialiser at hand (``scripts/bench_floor.py``).
The header also gives the one-row psycopg lookup (a prepared statement, no HTTP) as the machine's scale.
Then the cancellation latency (client disconnect → the statement gone from ``pg_stat_activity``, p95
over 20 runs) and the server's peak RSS. Every response is checked (HTTP 200, a result, not ``isError``)
and errors are counted. Results: ``var/bench/results.json`` and a Markdown table on stdout.

Two scenarios run in a ``task_execution`` context for the demo task's current run (session
``session-demo-1``, execution request ``exec-demo-1``, as seeded): the evidence save (each call carries a
fresh ``_meta["cn.tjwater/requestKey"]``, so it claims a receipt, runs the query and saves a snapshot before
it answers; the answer must name its evidence — its floor claims and saves too,
``bench_floor.EvidenceSteps``) and the max evidence page (``get_task_evidence`` reading 500 items, its maximum
page, of a 500-item snapshot saved just before).

The cancellation probe needs a statement that runs long enough to be seen: the server runs with
``scripts.bench_settings`` (production settings plus the test-only ``test_slow_query`` tool — nothing
else differs).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.investigation_walk import (  # noqa: E402  (the demo investigation: its run's lease is held by
    DEMO_EXECUTION_REQUEST,  # this session until 2099, and this execution request belongs to that run)
    DEMO_SESSION,
    REQUEST_KEY,
)
from tests.support.idp import AGENT_CLIENT_ID, USERS, start_provider  # noqa: E402  (the tests' provider driver)
from tests.support.servers import free_port, launch  # noqa: E402  (the one server launcher, shared with the tests)

FLOOR_RUNS = 200  # statements + serialisation per scenario floor (its median)

DB = os.environ.get("BENCH_DB", "tjwater_bench")
DSN = f"postgresql://postgres@127.0.0.1:5432/{DB}"
DATABASE_URL = f"postgis://postgres@127.0.0.1:5432/{DB}"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/10")
OUT = ROOT / "var" / "bench"
PROTOCOL = "2026-07-28"
DEMO = "tianjin-demo"
SCALE = "scale-net6"
ALL_PERMISSIONS = "webgis.view scada.view simulation.view optimization.run"
TASK_EXECUTION = "task_execution"
RUN_LIFETIME_S = 7200
#: In a scenario's arguments: replaced by the id of the max-size evidence snapshot saved before it runs.
SAVED_EVIDENCE = "<saved evidence id>"
#: What is saved for the max evidence page to read: a 500-item page (more than get_task_evidence's page).
EVIDENCE_SOURCE = ("list_elements", {"element_type": "junction", "limit": 500})
EVIDENCE_MAX_ITEMS = 500  # evidence/task_tools.py MAX_ITEMS (the input schema's limit for arrays and objects)


def fresh_request_key() -> dict[str, Any]:
    """A new ``_meta`` request key: every call claims its own receipt and saves its own evidence."""
    return {REQUEST_KEY: f"bench-{uuid.uuid4()}"}


def has_evidence_id(result: dict[str, Any]) -> str | None:
    structured = result.get("structuredContent") or {}
    evidence_id = structured.get("evidence_id") or (structured.get("details") or {}).get("evidence_id")
    return None if evidence_id else "no_evidence_id"


def is_max_evidence_page(result: dict[str, Any]) -> str | None:
    data = (result.get("structuredContent") or {}).get("data") or {}
    full = data.get("kind") == "array" and data.get("limit") == EVIDENCE_MAX_ITEMS
    return None if full and data.get("total", 0) >= EVIDENCE_MAX_ITEMS and data.get("items") else "not_a_max_page"


@dataclass
class Scenario:
    name: str
    tool: str
    args: dict[str, Any]
    project: str = DEMO
    #: ``task_execution``: the demo task's current run (a call of an evidence tool saves evidence).
    purpose: str = "ordinary_chat"
    #: Extra ``_meta`` for each call, made anew per call (e.g. a fresh request key).
    meta: Callable[[], dict[str, Any]] | None = None
    #: A further check of a successful result: an error label, or ``None`` when it is as expected.
    check: Callable[[dict[str, Any]], str | None] | None = None


# Each tool at a typical and at its maximum size. Arguments follow the tools' input schemas; a tool the
# catalog does not serve is reported as such, never silently dropped.
START, END, AT = "2026-11-01T06:00:00Z", "2026-11-01T10:00:00Z", "2026-11-01T08:30:00Z"
DAY = ("2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z")
PRESSURE_DEVICES = [f"PT-{n:03d}" for n in range(1, 21)]
HISTORY = [{"element_type": "pipe", "element_id": "LINK-225"}, {"element_type": "pipe", "element_id": "LINK-1523"}]

SCENARIOS: list[Scenario] = [
    Scenario(
        "get_element_properties pipe", "get_element_properties", {"element_type": "pipe", "element_id": "LINK-1523"}
    ),
    Scenario("list_elements 20", "list_elements", {"element_type": "junction", "limit": 20}),
    Scenario("list_elements 500 (max page)", "list_elements", {"element_type": "junction", "limit": 500}),
    Scenario("list_elements 500 (max page, scale)", "list_elements", {"element_type": "junction", "limit": 500}, SCALE),
    Scenario("get_network_options hydraulic", "get_network_options", {"kind": "hydraulic"}),
    Scenario("get_network_schema pipe", "get_network_schema", {"kind": "pipe"}),
    Scenario("query_nearby_elements 200 m (demo)", "query_nearby_elements", {"center": [117.2, 39.1]}),
    Scenario("query_nearby_elements 200 m (scale)", "query_nearby_elements", {"center": [117.2, 39.1]}, SCALE),
    Scenario(
        "query_nearby_elements 1 km, page 100 (scale)",
        "query_nearby_elements",
        {"center": [117.2, 39.1], "radius_m": 1000, "limit": 100},
        SCALE,
    ),
    Scenario(
        "get_element_gis_properties",
        "get_element_gis_properties",
        {"element_type": "junction", "element_id": "JUNCTION-1"},
    ),
    Scenario(
        "get_source_gis_properties",
        "get_source_gis_properties",
        {"layer_key": "water_mains", "source_fid": "WM-200003"},
    ),
    Scenario("list_scada_devices 20", "list_scada_devices", {}),
    Scenario("get_scada_device", "get_scada_device", {"device_id": "PT-004"}),
    Scenario(
        "query_scada_readings 2 devices × 4 h",
        "query_scada_readings",
        {"device_ids": ["PT-004", "FT-001"], "start": START, "end": END, "field": "cleaned_value"},
    ),
    Scenario(
        "query_scada_readings 20 devices × 24 h (max)",
        "query_scada_readings",
        {"device_ids": PRESSURE_DEVICES, "start": DAY[0], "end": DAY[1], "field": "monitored_value"},
    ),
    Scenario(
        "query_model_baseline_series 2 × 4 h",
        "query_model_baseline_series",
        {"element_type": "junction", "element_ids": ["JUNCTION-0", "JUNCTION-1"], "start": START, "end": END},
    ),
    Scenario(
        "get_model_baseline_at_time",
        "get_model_baseline_at_time",
        {"element_type": "pipe", "element_id": "LINK-1523", "time": AT},
    ),
    Scenario(
        "query_model_baseline_field 500 (max page)",
        "query_model_baseline_field",
        {"element_type": "junction", "field": "pressure", "time": AT, "limit": 500},
    ),
    Scenario("list_analysis_runs", "list_analysis_runs", {}),
    Scenario("get_analysis_run", "get_analysis_run", {"run_id": "burst-20261101-0800"}),
    Scenario("list_analysis_results", "list_analysis_results", {"run_id": "isolation-20261101-0830"}),
    Scenario(
        "query_analysis_series 4 h",
        "query_analysis_series",
        {
            "run_id": "burst-20261101-0800",
            "element_type": "pipe",
            "element_id": "LINK-1523",
            "field": "flow",
            "start": START,
            "end": END,
        },
    ),  # fmt: skip
    Scenario(
        "query_analysis_values 20",
        "query_analysis_values",
        {"run_id": "burst-20261101-0800", "element_type": "junction", "field": "pressure", "time": AT},
    ),
    Scenario("list_sensor_placement_runs", "list_sensor_placement_runs", {}),
    Scenario("get_sensor_placement_run", "get_sensor_placement_run", {"run_id": "placement-coverage-10"}),
    Scenario(
        "query_element_history realtime 4 h",
        "query_element_history",
        {"elements": HISTORY, "start": START, "end": END, "mode": "realtime_comparison"},
    ),
    Scenario(
        "query_element_history max page",
        "query_element_history",
        {"elements": HISTORY, "start": DAY[0], "end": DAY[1], "mode": "observed", "limit": 500},
    ),
    # Issue 22: topology, flow path, rankings — each at a typical size and at its maximum (the scale
    # network's tile T0505 is Net6 with prefixed ids; its baseline is hourly from 2026-11-01T00:00Z).
    Scenario(
        "get_connected_elements depth 1",
        "get_connected_elements",
        {"element_type": "pipe", "element_id": "LINK-1523"},
    ),
    Scenario(
        "get_connected_elements depth 3, page 500 (max, scale)",
        "get_connected_elements",
        {"element_type": "junction", "element_id": "T0505-JUNCTION-1304", "depth": 3, "limit": 500},
        SCALE,
    ),
    Scenario(
        "trace_flow_path upstream 60 (demo)",
        "trace_flow_path",
        {"element_type": "junction", "element_id": "JUNCTION-1304", "direction": "upstream", "time": AT},
    ),
    Scenario(
        "trace_flow_path upstream to the source, 500 (max, scale)",
        "trace_flow_path",
        {
            "element_type": "junction",
            "element_id": "T0505-JUNCTION-1304",
            "direction": "upstream",
            "time": "2026-11-01T09:00:00Z",
            "max_elements": 500,
        },
        SCALE,
    ),  # fmt: skip
    Scenario(
        "trace_flow_path downstream 500 (max, scale)",
        "trace_flow_path",
        {
            "element_type": "pipe",
            "element_id": "T0505-LINK-1523",
            "direction": "downstream",
            "time": "2026-11-01T09:00:00Z",
            "max_elements": 500,
        },
        SCALE,
    ),  # fmt: skip
    Scenario(
        "rank_model_baseline Hexi 10",
        "rank_model_baseline",
        {"element_type": "junction", "field": "pressure", "time": AT, "limit": 10, "area": {"district": "Hexi"}},
    ),
    Scenario(
        "rank_model_baseline 50, whole network (max, scale)",
        "rank_model_baseline",
        {"element_type": "junction", "field": "pressure", "time": "2026-11-01T09:00:00Z", "limit": 50},
        SCALE,
    ),
    Scenario(
        "rank_model_baseline 50 in 2 km (scale)",
        "rank_model_baseline",
        {
            "element_type": "junction",
            "field": "pressure",
            "time": "2026-11-01T09:00:00Z",
            "limit": 50,
            "area": {"center": [117.2437, 39.1491], "radius_m": 2000},
        },
        SCALE,
    ),  # fmt: skip
    Scenario(
        "rank_scada_deviation pressure 4 h",
        "rank_scada_deviation",
        {"start": "2026-11-01T08:00:00Z", "end": "2026-11-01T12:00:00Z", "quantity": "pressure"},
    ),
    Scenario(
        "rank_scada_deviation pressure 24 h, 50 (max)",
        "rank_scada_deviation",
        {"start": DAY[0], "end": DAY[1], "quantity": "pressure", "limit": 50},
    ),
    Scenario("get_workbench_runtime", "get_workbench_runtime", {}),
    Scenario("query_peripheral_data observations", "query_peripheral_data", {"source": "observations"}),
    # Task purpose (R-EVID): each call claims a receipt, runs the query and saves an evidence snapshot
    # before it answers; then a page of saved evidence at get_task_evidence's maximum page size.
    Scenario(
        "evidence save get_element_properties pipe",
        "get_element_properties",
        {"element_type": "pipe", "element_id": "LINK-1523"},
        purpose=TASK_EXECUTION,
        meta=fresh_request_key,
        check=has_evidence_id,
    ),
    Scenario(
        "evidence page get_task_evidence 500 (max page)",
        "get_task_evidence",
        {"evidence_id": SAVED_EVIDENCE, "data_path": ["data", "items"], "limit": EVIDENCE_MAX_ITEMS},
        purpose=TASK_EXECUTION,
        check=is_max_evidence_page,
    ),
]


def manage(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return result.stdout


def base_env(issuer: str, port: int) -> dict[str, str]:
    """Production settings: DEBUG off, a real secret, real ALLOWED_HOSTS, the provider as issuer."""
    return {
        "DEBUG": "0",
        "TJWATER_READ_ENV_FILE": "0",
        "SECRET_KEY": secrets.token_urlsafe(48),
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "TJWATER_MCP_ENABLED": "1",
        "TJWATER_DEV_ISSUER": "0",
        "TJWATER_OIDC_ISSUER": issuer,
        "TJWATER_MCP_RESOURCE_URI": f"http://127.0.0.1:{port}/mcp",
        # c=8 from one principal measures throughput, not the per-tenant limit (as perf-anchors does).
        "TJWATER_MCP_MAX_CONCURRENT": "16",
        # The client whose tokens may bind task contexts: the provider's tjwater-agent-mcp (the exchanged
        # tokens' azp) — the default, pinned so the evidence scenarios never depend on it.
        "TJWATER_MCP_HOST_CLIENT": AGENT_CLIENT_ID,
        # Production logging: every call writes its audit line (part of what a call costs).
        "LOG_LEVEL": "INFO",
        # One client for the whole run (≈ 20 min): its contexts outlive it (a real host binds per session).
        "TJWATER_CONTEXT_TTL_S": str(RUN_LIFETIME_S),
    }


def ensure_database(tiles: int, issuer: str, *, scale: bool = True) -> None:
    """The benchmark database with the demo and (``scale``) the scale network (each loaded only once)."""
    admin = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)
    if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB]).fetchone() is None:
        admin.execute(f'CREATE DATABASE "{DB}"')
    admin.close()
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    env = {**base_env(issuer, 8000), "TJWATER_MCP_ENABLED": "0"}
    manage("migrate", "--noinput", "-v", "0", env=env)
    manage("seed_demo", "--if-empty", env=env)
    if not scale:
        return
    with psycopg.connect(DSN) as conn:
        pipes = conn.execute(
            "SELECT count(*) FROM queries_pipe p JOIN contexts_project c ON c.id = p.project_id WHERE c.slug = %s",
            [SCALE],
        ).fetchone()[0]
    if not pipes:  # (re)generated whole: the generator is atomic and creates the project
        print(f"[bench] generating the {tiles}x{tiles} scale network (about 5 minutes for 10x10) …", flush=True)
        manage("generate_scale_network", "--tiles", str(tiles), "--project", SCALE, env=env)


def grant(issuer: str, subject: str, projects: tuple[str, ...] = (DEMO, SCALE)) -> None:
    env = {**base_env(issuer, 8000), "TJWATER_MCP_ENABLED": "0"}
    for project in projects:
        manage(
            "membership_grant", "--project", project, "--issuer", issuer, "--sub", subject,
            "--permissions", ALL_PERMISSIONS, env=env,
        )  # fmt: skip


def start_server(issuer: str, port: int, log: Path, *, workers: int = 0) -> subprocess.Popen[bytes]:
    """The service with production settings on ``port``, started by the tests' launcher: one process pinned
    to CPU 0 (``workers`` 0), or ``uvicorn --workers N`` unpinned in a process group of its own."""
    env = {**os.environ, **base_env(issuer, port), "DJANGO_SETTINGS_MODULE": "scripts.bench_settings"}
    server = launch(
        env,
        log.parent,
        port=port,
        log_name=log.name,
        workers=max(1, workers),
        prefix=() if workers else ("taskset", "-c", "0"),
        new_session=bool(workers),
    )
    return server.process


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rpc(tool: str, args: dict[str, Any], request_id: int, extra_meta: dict[str, Any] | None = None) -> bytes:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    meta.update(extra_meta or {})
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": meta}}  # fmt: skip
    return json.dumps(body).encode()


def headers(token: str, tool: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }


def reply_of(text: str) -> dict[str, Any]:
    events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads(events[-1] if events else text)


@dataclass
class Measured:
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    bytes_out: int = 0


async def _one_call(
    client: aiohttp.ClientSession,
    url: str,
    call_headers: dict[str, str],
    body: bytes,
    check: Callable[[dict[str, Any]], str | None] | None,
) -> tuple[float, str, int]:
    """One checked call: (ms, outcome — ``ok`` or what was wrong —, reply bytes)."""
    started = time.perf_counter()
    async with client.post(url, data=body, headers=call_headers) as response:
        raw = await response.read()
        status = response.status
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        return elapsed, f"http_{status}", len(raw)
    reply = reply_of(raw.decode())
    result = reply.get("result")
    if result is None:
        return elapsed, f"rpc_{reply.get('error', {}).get('code')}", len(raw)
    if result.get("isError"):
        return elapsed, str(result["structuredContent"].get("code")), len(raw)
    if check is not None and (problem := check(result)):
        return elapsed, problem, len(raw)
    return elapsed, "ok", len(raw)


async def drive(
    url: str,
    token: str,
    tool: str,
    args: dict[str, Any],
    *,
    concurrency: int,
    requests: int,
    meta: Callable[[], dict[str, Any]] | None = None,
    check: Callable[[dict[str, Any]], str | None] | None = None,
) -> Measured:
    """``requests`` calls of ``tool`` from ``concurrency`` keep-alive connections (aiohttp, as the
    perf-anchors load generator: far less client time per call than httpx2), each reply checked."""
    measured = Measured()
    counter = iter(range(requests))
    call_headers = headers(token, tool)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:

        async def worker() -> None:
            for i in counter:
                body = rpc(tool, args, i + 1, meta() if meta else None)
                elapsed, outcome, size = await _one_call(client, url, call_headers, body, check)
                if outcome == "ok":
                    measured.bytes_out = size
                    measured.latencies_ms.append(elapsed)
                else:
                    measured.errors[outcome] = measured.errors.get(outcome, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        measured.wall_s = time.perf_counter() - started
    return measured


@dataclass(frozen=True)
class Call:
    """One kind of call the bench makes: whose token, which tool, with what."""

    token: str
    tool: str
    args: dict[str, Any]
    meta: Callable[[], dict[str, Any]] | None = None
    check: Callable[[dict[str, Any]], str | None] | None = None


@dataclass
class Paired:
    """Pairs of calls made back to back: ``probe_ms[i]`` and ``scenario_ms[i]`` are one pair (both ok)."""

    probe_ms: list[float] = field(default_factory=list)
    scenario_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def excess_ms(self) -> float | None:
        """Median over the pairs of (scenario − probe): what the scenario costs beyond the probe's call."""
        if not self.probe_ms:
            return None
        return statistics.median(s - p for p, s in zip(self.probe_ms, self.scenario_ms, strict=True))


async def drive_paired(url: str, probe: Call, scenario: Call, pairs: int) -> Paired:
    """``pairs`` pairs of calls at c=1 on one keep-alive connection, the probe and the scenario back to
    back, the probe first in even pairs and second in odd ones. The machine's speed drifts by seconds
    (the one-row call's cost moved 1.5–6.3 ms within one run): a pair's two calls see the same machine,
    so their difference does not carry the drift a probe timed minutes apart would. A pair in which
    either call failed is left out and its error counted."""
    paired = Paired()
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:
        for i in range(pairs):
            order = ((True, probe), (False, scenario)) if i % 2 == 0 else ((False, scenario), (True, probe))
            timed: dict[bool, float] = {}  # is the probe → ms, for the calls of this pair that were ok
            for is_probe, call in order:
                body = rpc(call.tool, call.args, i + 1, call.meta() if call.meta else None)
                elapsed, outcome, _ = await _one_call(client, url, headers(call.token, call.tool), body, call.check)
                if outcome == "ok":
                    timed[is_probe] = elapsed
                else:
                    key = f"{'probe' if is_probe else 'scenario'}:{outcome}"
                    paired.errors[key] = paired.errors.get(key, 0) + 1
            if len(timed) == 2:
                paired.probe_ms.append(timed[True])
                paired.scenario_ms.append(timed[False])
    return paired


class Profile:
    """``py-spy record --gil`` of the server while a scenario's c=1 phase runs (``--profile``): raw
    collapsed stacks in ``var/bench/profiles/<scenario>.txt`` (the sampling costs the server CPU: a
    profiled run's timings are not the table's)."""

    def __init__(self, pid: int, name: str, enabled: bool) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        if not enabled:
            return
        out = OUT / "profiles" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") + ".txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        py_spy = Path(sys.executable).parent / "py-spy"
        command = [str(py_spy), "record", "-p", str(pid), "-r", "500", "--gil", "-f", "raw", "-o", str(out)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached before the phase starts

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            self.process.wait(timeout=60)


def demo_task_run(issuer: str) -> tuple[int, int]:
    """The demo task and its current run, handed to the bench's own user (alice of the provider): an
    investigation belongs to its run's owner (issue 17, ``contexts.access.owns_run``) and the bench binds as
    alice, not as the seeded ``svc-worker``. In the bench's own database only (``tjwater_bench``)."""
    env = {**base_env(issuer, 8000), "TJWATER_MCP_ENABLED": "0"}
    code = (
        "from contexts.models import Principal, TaskRun; "
        "r = TaskRun.objects.get(task__project__slug='tianjin-demo', task__title__contains='LINK-1523', "
        "superseded_at__isnull=True); "
        f"owner = Principal.objects.get(issuer={issuer!r}, subject={USERS['alice'][0]!r}); "
        "TaskRun.objects.filter(pk=r.pk).update(owner=owner); print(r.task_id, r.pk)"
    )
    task_id, run_id = manage("shell", "--no-imports", "-c", code, env=env).splitlines()[-1].split()
    return int(task_id), int(run_id)


def bind_context(base: str, token: str, body: dict[str, Any]) -> str:
    """A context bound through the REST API; returns its handle (never printed)."""
    created = httpx2.post(
        f"{base}/api/v1/mcp-query-contexts", json=body, headers={"authorization": f"Bearer {token}"}, timeout=30
    )
    if created.status_code != 201:
        raise RuntimeError(f"binding a {body['purpose']} context: HTTP {created.status_code} {created.text[:800]}")
    return str(created.json()["context_handle"])


def bind_task_context(provider: Any, base: str, resource: str) -> tuple[str, str]:
    """(token, handle) of a ``task_execution`` context for the demo task's current run, whose lease the
    seeded session holds. The token is a fresh one of alice exchanged by tjwater-agent-mcp — the host client
    (``TJWATER_MCP_HOST_CLIENT``), the only one that may bind task contexts; her memberships come from
    ``grant``. (The provider's client_credentials token carries only ``mcp.catalog.read``: it can neither
    bind a context nor call a tool.) Fresh, because the provider's tokens live 300 s."""
    user_token = provider.user_token("alice", resource=resource)
    token = provider.exchange(user_token, resource=resource, scope="mcp.query mcp.context.bind")
    task_id, run_id = demo_task_run(provider.issuer)
    body = {
        "project": DEMO,
        "session_id": DEMO_SESSION,
        "purpose": TASK_EXECUTION,
        "task_id": task_id,
        "run_id": run_id,
        "execution_request_id": DEMO_EXECUTION_REQUEST,
    }
    return token, bind_context(base, token, body)


def save_evidence(url: str, token: str, handle: str) -> str:
    """Save one evidence snapshot of ``EVIDENCE_SOURCE`` (500 items) in the task context; its id."""
    tool, args = EVIDENCE_SOURCE
    body = rpc(tool, {"context_handle": handle, **args}, 1, fresh_request_key())
    response = httpx2.post(url, content=body, headers=headers(token, tool), timeout=60)
    response.raise_for_status()
    reply = reply_of(response.text)
    result = reply.get("result") or {}
    if not result or result.get("isError") or has_evidence_id(result):
        raise RuntimeError(f"saving the {tool} evidence failed: {json.dumps(reply)[:800]}")
    structured = result["structuredContent"]
    return str(structured.get("evidence_id") or structured["details"]["evidence_id"])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def psycopg_floor(runs: int) -> float:
    """p50 (ms) of the one-row element lookup straight through psycopg (prepared, no HTTP, no checks)."""
    sql = "SELECT element_id, length, diameter FROM queries_pipe WHERE project_id = %s AND element_id = %s"
    with psycopg.connect(DSN, prepare_threshold=0) as conn:
        project_id = conn.execute("SELECT id FROM contexts_project WHERE slug = %s", [DEMO]).fetchone()[0]
        timings = []
        for _ in range(runs):
            started = time.perf_counter()
            conn.execute(sql, [project_id, "LINK-1523"]).fetchone()
            timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def setup_floor(issuer: str, port: int) -> psycopg.Connection[Any]:
    """Django in this process (the bench database, the server's settings) to build the tools' plans for
    the floors, and the psycopg connection the floors run on."""
    import django

    # (LOG_LEVEL: the bench's own HTTP client must not log every request through Django's logging.)
    os.environ.update({**base_env(issuer, port), "TJWATER_MCP_ENABLED": "0", "LOG_LEVEL": "WARNING"})
    os.environ["DJANGO_SETTINGS_MODULE"] = "tjwater.settings"
    django.setup()
    from scripts import bench_floor

    return bench_floor.connect()


def scenario_floor(
    scenario: Scenario, subject: str, args: dict[str, Any], conn: psycopg.Connection[Any], issuer: str
) -> dict[str, Any]:
    """The scenario's floor (``scripts/bench_floor.py``): its statements captured from one run of its
    tool's plan, then timed with psycopg alone with the serialisation of the same answer. For a call that
    saves evidence the floor also claims its receipt and saves its snapshot (``bench_floor.EvidenceSteps``),
    in the task context the bench bound."""
    from contexts.errors import ApplicationError
    from contexts.models import QueryContext
    from scripts import bench_floor

    binding: dict[str, Any] = {}
    writer = None
    if scenario.purpose == TASK_EXECUTION:
        task_id, run_id = demo_task_run(issuer)
        context_id = (
            QueryContext.objects.filter(
                run_id=run_id, purpose=TASK_EXECUTION, session_id=DEMO_SESSION, revoked_at__isnull=True
            )
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        binding = {
            "purpose": TASK_EXECUTION,
            "task_id": task_id,
            "run_id": run_id,
            "session_id": DEMO_SESSION,
            "context_id": context_id,
        }
        writer = floor_writer()
    try:
        scope = bench_floor.scope_for(scenario.project, subject, issuer=issuer, **binding)
        captured = bench_floor.capture(scenario.tool, scope, args, writer)
    except ApplicationError as exc:  # reported in the row, never a silent zero
        return {"floor_ms": None, "floor_note": f"not measured: {exc.code}"}
    floor = bench_floor.measure(captured, conn, FLOOR_RUNS)
    out: dict[str, Any] = {
        "floor_ms": round(floor.p50_ms, 3),
        "floor_sql_ms": round(floor.sql_ms, 3),
        "floor_json_ms": round(floor.json_ms, 3),
        "floor_statements": floor.statements,
        "floor_serialiser": floor.serialiser,
        "floor_runs": floor.runs,
    }
    if captured.evidence is not None:
        out["floor_note"] = "with the receipt claim and the snapshot save"
    return out


@functools.cache
def floor_writer() -> psycopg.Connection[Any]:
    """One writable connection for the evidence floors of the run (``bench_floor.connect_writer``)."""
    from scripts import bench_floor

    return bench_floor.connect_writer()


async def cancellation_latency(url: str, token: str, handle: str, runs: int) -> list[float]:
    """Client disconnect → the statement gone from pg_stat_activity (ms), ``runs`` times."""
    latencies = []
    probe = (
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%%' "
        "AND datname = current_database()"
    )
    with psycopg.connect(DSN, autocommit=True) as watch:
        for i in range(runs):
            args = {"context_handle": handle, "seconds": 20}
            # With a progress token the first notification commits text/event-stream at once (no wait
            # for the 15 s keepalive window before the response starts).
            body = rpc("test_slow_query", args, i, {"progressToken": f"cancel-{i}"})
            async with httpx2.AsyncClient(timeout=30) as client:
                request = client.build_request("POST", url, content=body, headers=headers(token, "test_slow_query"))
                response = await client.send(request, stream=True)
                if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    text = (await response.aread())[:300]
                    raise RuntimeError(f"the slow query was refused: HTTP {response.status_code} {text!r}")
                deadline = time.monotonic() + 10
                while watch.execute(probe).fetchone()[0] == 0:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the slow query never started")
                    await asyncio.sleep(0.005)
                started = time.perf_counter()
                await response.aclose()
            while watch.execute(probe).fetchone()[0] != 0:
                await asyncio.sleep(0.002)
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.2)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=10, help="scale network tiles per side (default 10)")
    parser.add_argument("--requests", type=int, default=400, help="measured calls per scenario and concurrency")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--cancel-runs", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated scenario name prefixes")
    parser.add_argument("--profile", action="store_true", help="py-spy each scenario's c=1 phase (var/bench/profiles)")
    options = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {1})  # the load generator on CPU 1, the server on CPU 0
    load_at_start = [round(x, 2) for x in os.getloadavg()]  # a shared machine: say how busy it was

    # Tokens valid for the whole run (the provider's default is 300 s; a real host refreshes them).
    provider = start_provider(OUT / "provider.log", IDP_ACCESS_TOKEN_TTL=str(RUN_LIFETIME_S))
    server = None
    floor_conn = None
    try:
        ensure_database(options.tiles, provider.issuer)
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        user_token = provider.user_token("alice", resource=resource)
        token = provider.exchange(user_token, resource=resource, scope="mcp.query mcp.context.bind")
        subject = USERS["alice"][0]
        grant(provider.issuer, subject)
        server = start_server(provider.issuer, port, OUT / "server.log")
        floor_conn = setup_floor(provider.issuer, port)
        base = f"http://127.0.0.1:{port}"
        handles = {}
        for project in (DEMO, SCALE):
            created = httpx2.post(
                f"{base}/api/v1/mcp-query-contexts",
                json={"project": project, "session_id": f"bench-{project}", "purpose": "ordinary_chat"},
                headers={"authorization": f"Bearer {token}"},
                timeout=30,
            )
            created.raise_for_status()
            handles[project] = created.json()["context_handle"]
        served = {t["name"] for t in _tools(base, token)}
        floor_ms = psycopg_floor(2000)
        rows = []
        wanted = [
            s for s in SCENARIOS if not options.only or any(s.name.startswith(p) for p in options.only.split(","))
        ]
        task: tuple[str, str] | None = None  # (token, handle) of the task context, bound when first needed
        saved_evidence: str | None = None
        for scenario in wanted:
            if scenario.tool not in served:
                rows.append({"scenario": scenario.name, "tool": scenario.tool, "status": "not in the catalog"})
                print(f"[bench] {scenario.name}: not in the catalog", flush=True)
                continue
            url = f"{base}/mcp"
            call_token, handle = token, handles[scenario.project]
            if scenario.purpose == TASK_EXECUTION:
                task = task or bind_task_context(provider, base, resource)
                call_token, handle = task
            args = {"context_handle": handle, **scenario.args}
            if SAVED_EVIDENCE in args.values():
                saved_evidence = saved_evidence or save_evidence(url, call_token, handle)
                args = {k: saved_evidence if v == SAVED_EVIDENCE else v for k, v in args.items()}
            run = {"meta": scenario.meta, "check": scenario.check}
            asyncio.run(drive(url, call_token, scenario.tool, args, concurrency=1, requests=options.warmup, **run))
            # A call's fixed cost paired with this scenario, call by call (the machine's speed drifts).
            probe_call = Call(token, CALL_COST.tool, {"context_handle": handles[DEMO], **CALL_COST.args})
            pairs = asyncio.run(
                drive_paired(
                    url, probe_call, Call(call_token, scenario.tool, args, **run), max(30, options.requests // 2)
                )
            )
            profile = Profile(server.pid, scenario.name, options.profile)
            ticks = cpu_ticks(server.pid)
            one = asyncio.run(
                drive(url, call_token, scenario.tool, args, concurrency=1, requests=options.requests, **run)
            )
            profile.stop()
            cpu_ms = (cpu_ticks(server.pid) - ticks) / os.sysconf("SC_CLK_TCK") * 1000 / max(1, options.requests)
            eight = asyncio.run(
                drive(url, call_token, scenario.tool, args, concurrency=8, requests=options.requests, **run)
            )
            p50 = percentile(one.latencies_ms, 0.5)
            floor = scenario_floor(scenario, subject, args, floor_conn, provider.issuer)
            row = {
                "scenario": scenario.name,
                "tool": scenario.tool,
                "project": scenario.project,
                "status": "ok" if not (one.errors or eight.errors or pairs.errors) else "errors",
                "p50_ms": round(p50, 2),
                "p95_ms": round(percentile(one.latencies_ms, 0.95), 2),
                "rps_c1": round(len(one.latencies_ms) / one.wall_s, 1),
                "rps_c8": round(len(eight.latencies_ms) / eight.wall_s, 1),
                "p99_c8_ms": round(percentile(eight.latencies_ms, 0.99), 2),
                "cpu_ms_per_call": round(cpu_ms, 2),
                **floor,
                "x_floor": round(p50 / floor["floor_ms"], 1) if floor.get("floor_ms") else None,
                "response_bytes": one.bytes_out,
                "call_probe_p50_ms": round(percentile(pairs.probe_ms, 0.5), 2) if pairs.probe_ms else None,
                "paired_excess_ms": round(excess, 3) if (excess := pairs.excess_ms()) is not None else None,
                "errors": {
                    **one.errors,
                    **{f"c8:{k}": v for k, v in eight.errors.items()},
                    **{f"paired:{k}": v for k, v in pairs.errors.items()},
                },
            }
            rows.append(row)
            print(f"[bench] {json.dumps(row)}", flush=True)
        add_beyond_call_cost(rows)
        cancel = asyncio.run(cancellation_latency(f"{base}/mcp", token, handles[DEMO], options.cancel_runs))
        summary = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
            "load_average": {"start": load_at_start, "end": [round(x, 2) for x in os.getloadavg()]},
            "psycopg_floor_p50_ms": round(floor_ms, 3),
            "cancellation_ms": {"p50": round(percentile(cancel, 0.5), 1), "p95": round(percentile(cancel, 0.95), 1)},
            "peak_rss_mb": round(peak_rss_mb(server.pid), 1),
            "scenarios": rows,
        }
        (OUT / "results.json").write_text(json.dumps(summary, indent=2))
        print(markdown(summary))
        failed = [r for r in rows if r.get("status") == "errors"]
        return 1 if failed else 0
    finally:
        if floor_conn is not None:
            floor_conn.close()
        if server is not None:
            server.terminate()
            server.wait(timeout=15)
        provider.stop()


def _tools(base: str, token: str) -> list[dict[str, Any]]:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    hdrs = {**headers(token, "x"), "mcp-method": "tools/list"}
    hdrs.pop("mcp-name")
    response = httpx2.post(f"{base}/mcp", json=body, headers=hdrs, timeout=30)
    response.raise_for_status()
    return list(reply_of(response.text)["result"]["tools"])


#: The call whose answer costs next to nothing (one row by key): each scenario is timed in pairs with it at
#: c=1 (``drive_paired``), and what a pair's scenario call costs beyond its probe call, plus the probe's own
#: floor, is the scenario's work beyond a call — HTTP, this client, the token, the context re-read, the
#: limiter and the audit line being in both calls of a pair.
CALL_COST_SCENARIO = "get_element_properties pipe"


CALL_COST = next(s for s in SCENARIOS if s.name == CALL_COST_SCENARIO)


def add_beyond_call_cost(rows: list[dict[str, Any]]) -> None:
    """Each row's ``x_floor_beyond_call``: (the median over its pairs of scenario − probe, plus the probe's
    floor) / the scenario's floor — the tool's own work against its floor, a call's fixed cost taken off
    pair by pair. ``x_floor`` compares a whole call with SQL + JSON alone, so for a tool whose floor is
    below a call's fixed cost it measures the per-call path (perf-anchors' subject); this column measures
    the tool's own work. ``call_cost_ms`` (the probe's p50 in the pairs less its floor) says what a call's
    fixed cost was meanwhile. Nothing is added when ``CALL_COST_SCENARIO``'s floor was not measured."""
    base = next((r for r in rows if r.get("scenario") == CALL_COST_SCENARIO and r.get("floor_ms")), None)
    if base is None:
        return
    for row in rows:
        if row.get("floor_ms") and row.get("paired_excess_ms") is not None and row.get("call_probe_p50_ms"):
            row["call_cost_ms"] = round(max(row["call_probe_p50_ms"] - base["floor_ms"], 0.0), 2)
            beyond = max(row["paired_excess_ms"] + base["floor_ms"], 0.0)
            row["x_floor_beyond_call"] = round(beyond / row["floor_ms"], 1)


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"Measured {summary['date']} on {summary['machine']} (load average {summary['load_average']['start']} → "
        f"{summary['load_average']['end']}); one-row psycopg lookup p50 {summary['psycopg_floor_p50_ms']} ms; "
        f"cancellation p50 {summary['cancellation_ms']['p50']} ms, p95 {summary['cancellation_ms']['p95']} ms; "
        f"peak RSS {summary['peak_rss_mb']} MB.",
        "",
        "Floor: the scenario's statements with psycopg alone + serialising its answer (scripts/bench_floor.py). "
        f"× floor beyond a call: each scenario timed in pairs with {CALL_COST_SCENARIO!r} at c=1, call after call; "
        "(median over the pairs of scenario − probe, + the probe's floor) / floor. Call ms: the probe's p50 in "
        "the pairs less its floor (a call's fixed cost meanwhile).",
        "",
        "| scenario | p50 ms | p95 ms | req/s c=1 | req/s c=8 | p99 c=8 ms | CPU ms/call | floor ms | × floor "
        "| call ms | × floor beyond a call | bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["scenarios"]:
        if "p50_ms" not in row:
            lines.append(f"| {row['scenario']} | {row['status']} | | | | | | | | | | |")
            continue
        lines.append(
            f"| {row['scenario']} | {row['p50_ms']} | {row['p95_ms']} | {row['rps_c1']} | {row['rps_c8']} | "
            f"{row['p99_c8_ms']} | {row['cpu_ms_per_call']} | {row.get('floor_ms') or row.get('floor_note')} | "
            f"{row['x_floor'] if row.get('x_floor') is not None else '–'} | "
            f"{row.get('call_cost_ms', '–')} | {row.get('x_floor_beyond_call', '–')} | {row['response_bytes']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
