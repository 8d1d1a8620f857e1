"""``make bench-analysis``: what an analysis run costs against the engine's own floor (issue 42), never part
of ``make test``.

In one run, on Net6 (3,356 nodes, 3,892 links) imported into its own database (``tjwater_bench_analysis``,
dropped and migrated at the start) with its own Redis index (13), a strategic valve layer, analyses on for
the project (CPU budget, ``max_concurrent`` and storage cap raised for the bench) and five principals
holding ``simulation.run``; one uvicorn server (``tjwater.asgi:application``) and one Celery worker of the
``analysis`` queue with two processes (``--concurrency=2``, otherwise ``make run``'s flags) as subprocesses:

1. ``tools/call run_*`` latency, before the worker starts (a call only queues): ``--calls`` calls over the
   five kinds and five principals, each with inputs of its own so that each queues, each run cancelled
   (in-process, untimed) right after its call — p50/p95, overall and per kind.
2. End to end, per kind, ``--reps`` runs one at a time: from ``tools/call run_*`` to the run's
   ``finished_at`` (its job's ``succeeded``; the client also polls ``get_analysis_run`` until it says so),
   with the wait in the queue, the run's own wall time and what came after it (results, series COPY,
   commit); the estimate against the run's measured CPU seconds.
3. 20 burst runs from 5 principals (each at most 2 queued or running: submitted as slots free) on the
   two worker processes: the makespan against 20 × one burst end to end ÷ 2.
4. The engine's floor of each kind, in this process: the same scenarios (the pinned model version, the
   kind's own window, steps, pattern clock and preparation) solved by EPANET 2.2 through WNTR's toolkit
   (``wntr.epanet.toolkit.ENepanet``: the library every run uses) with the model opened once and the
   scenario's change made through the toolkit — the burst's emitter on the split pipe's new junction
   (the split is part of the model written once), the hydrants' extra demand, the contaminant's source,
   the pump's status as a timer control (its own controls deleted, as the simulation does), the valve
   check's closed links and PDA demand model. Only the solves are timed: ``ENopenH``/``ENinitH``/
   ``ENrunH``/``ENnextH`` loops, and ``ENsolveH`` + ``ENopenQ``/``ENinitQ``/``ENrunQ``/``ENnextQ`` for
   water quality; medians of ``--floor-reps``.
5. The COPY of each kind's series: the rows one run wrote, read back (``COPY … TO STDOUT``) and written
   again with ``COPY … FROM STDIN`` into the same tables under a cancelled run of the bench, in a
   transaction rolled back — the COPY alone, its indexes and foreign key included.

Goals (issue 42): each kind end to end ≤ 1.5 × its floor + the COPY of its series; ``run_*`` p50 ≤ 50 ms;
estimates within ±30 % of the actual CPU seconds; the makespan ≤ 1.15 × the ideal. Results go to
``var/bench/analysis.json`` and a Markdown table on stdout; the exit status is 0 when every run succeeded
(goals missed are reported, not an error).

Tokens are the development issuer's (``DEBUG=1``, ``TJWATER_DEV_ISSUER=1``: five principals are needed
and the devtools provider has two users); the settings are otherwise the product's.

    .venv/bin/python scripts/bench_analysis.py            # about 6–8 minutes on the 2-core VM
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DB = os.environ.get("BENCH_ANALYSIS_DB", "tjwater_bench_analysis")
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DSN = f"postgresql://postgres@127.0.0.1:5432/{DB}"
REDIS_URL = os.environ.get("BENCH_ANALYSIS_REDIS_URL", "redis://127.0.0.1:6379/13")
OUT = ROOT / "var" / "bench"
SLUG = "bench-analysis"
CLIENT = "tjwater-agent-mcp"
SCOPES = ["mcp.query", "mcp.analysis.run"]
PRINCIPALS = [f"bench-analyst-{n}" for n in range(1, 6)]
PERMISSIONS = ["simulation.run", "simulation.view", "webgis.view"]
START = "2026-11-01T06:00:00Z"
KINDS = ("simulation", "burst", "valve_isolation", "flushing", "contaminant")
TOOLS = {
    "simulation": "run_simulation",
    "burst": "run_burst_analysis",
    "valve_isolation": "run_valve_isolation_analysis",
    "flushing": "run_flushing_analysis",
    "contaminant": "run_contaminant_simulation",
}
BURST_PIPE, HYDRANT, INJECTION, ISOLATED_PIPE = "LINK-1523", "JUNCTION-1304", "JUNCTION-10", "LINK-1523"
EMITTER = 0.002  # m³/s per m^0.5 (the project is SI): about 10 L/s at 25 m
HYDRANT_FLOW = 0.03  # m³/s
TERMINAL = ("succeeded", "failed", "cancelled")
GOAL_E2E, GOAL_P50_MS, GOAL_ESTIMATE, GOAL_MAKESPAN = 1.5, 50.0, 0.30, 1.15


def bench_env() -> dict[str, str]:
    """The environment of this process, the server and the worker: its own database and Redis index."""
    return {
        "DJANGO_SETTINGS_MODULE": "tjwater.settings",
        "TJWATER_READ_ENV_FILE": "0",
        "DEBUG": "1",  # the dev issuer needs it (five principals; the devtools provider has two users)
        "TJWATER_DEV_ISSUER": "1",
        "SECRET_KEY": secrets.token_urlsafe(48),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": f"postgis://postgres@127.0.0.1:5432/{DB}",
        "REDIS_URL": REDIS_URL,
        "TJWATER_DATA_DIR": str(OUT / "analysis-data"),
        "TJWATER_MCP_ENABLED": "1",
        "TJWATER_MCP_ANALYSIS_TOOLS": "1",
        "TJWATER_MCP_ALLOWED_CLIENTS": CLIENT,
        "TJWATER_MCP_MAX_CONCURRENT": "16",
        "TJWATER_CONTEXT_TTL_S": "7200",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def log(message: str) -> None:
    print(f"[bench-analysis {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --- the database and the project ---------------------------------------------------------------------


def fresh_database() -> None:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [DB],
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        conn.execute(f'CREATE DATABASE "{DB}"')
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")


@dataclass
class World:
    project: Any
    version: Any
    handles: dict[str, str]  # principal → context handle
    tokens: dict[str, str]  # principal → bearer
    principal_ids: dict[str, int]
    pump: str  # the pump the simulation trips
    valves: int


def build_world(tmp: Path) -> World:
    """Net6 imported (no baseline), its valve layer, analyses on, five members, their contexts."""
    import wntr
    from django.conf import settings
    from django.core.management import call_command

    from contexts import dev_issuer
    from contexts.grants import tool_catalog
    from contexts.models import Membership, Principal, Project, ProjectCompute
    from contexts.services import context_create
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.models.baseline import current_model_version
    from tests.support.tokens import verified_token

    net6 = wntr_network_path("Net6.inp")
    project = Project.objects.create(slug=SLUG, name="Analysis bench (Net6)")
    import_network(project=project, inp_path=net6, center=(117.2, 39.1), scale=1.0, baseline_hours=0)
    wn = wntr.network.WaterNetworkModel(str(net6))
    layer = wntr.network.layer.generate_valve_layer(wn, "strategic", 2, seed=123)
    features = [
        {
            "type": "Feature",
            "properties": {"VALVE_ID": f"V-{i}", "PIPE": link, "NODE": node},
            "geometry": {"type": "Point", "coordinates": [117.2 + i * 1e-6, 39.1]},
        }
        for i, (link, node) in enumerate(zip(layer["link"], layer["node"], strict=True))
    ]
    valves = tmp / "valves.geojson"
    valves.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    call_command("import_gis", str(valves), "--project", SLUG, "--layer-key", "valves", "--as-valves",
                 "--link-field", "PIPE", "--node-field", "NODE", verbosity=0)  # fmt: skip
    ProjectCompute.objects.update_or_create(
        project=project,
        defaults={"enabled": True, "cpu_seconds_per_day": 10_000_000, "max_concurrent": 40,
                  "max_run_seconds": 600, "max_series_rows": 10_000_000_000},
    )  # fmt: skip
    catalog, task_scoped = tool_catalog()
    handles, tokens, ids = {}, {}, {}
    for subject in PRINCIPALS:
        principal, _ = Principal.objects.get_or_create(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=subject)
        Membership.objects.update_or_create(principal=principal, project=project, defaults={"permissions": PERMISSIONS})
        token = verified_token(subject, client=CLIENT, scopes=SCOPES, issuer=settings.TJWATER_DEV_ISSUER_ID)
        created = context_create(token=token, project_slug=SLUG, session_id=f"bench-{subject}",
                                 purpose="ordinary_chat", catalog=catalog, task_scoped=task_scoped)  # fmt: skip
        missing = set(TOOLS.values()) - set(created.tools)
        if missing:
            raise RuntimeError(f"the context of {subject} lacks {sorted(missing)}")
        handles[subject] = created.handle
        tokens[subject] = dev_issuer.mint_token(subject=subject, client_id=CLIENT, scopes=SCOPES, ttl_s=7200)
        ids[subject] = principal.pk
    version = current_model_version(project.pk)
    pump = next(p for p in wn.pump_name_list if str(wn.get_link(p).initial_status) == "Open")
    return World(project, version, handles, tokens, ids, pump, len(features))


def variant(kind: str, n: int, pump: str, *, hours: float) -> dict[str, Any]:
    """The arguments of run ``n`` of ``kind``: the same scenario each time, with a threshold that differs by
    a negligible amount so that each run is a new question (a repeated one would return the earlier run)."""
    minutes = int(hours * 60)
    eps = n * 1e-4
    if kind == "simulation":
        at = (datetime.fromisoformat(START) + timedelta(hours=1)).isoformat()
        return {"start": START, "duration_minutes": minutes, "pressure_threshold": 20.0 + eps,
                "changes": [{"type": "pump", "pump_id": pump, "status": "off", "at": at}]}  # fmt: skip
    if kind == "burst":
        return {"pipe_id": BURST_PIPE, "start": START, "duration_minutes": minutes,
                "emitter_coefficient": EMITTER, "pressure_drop_threshold": 1.0 + eps}  # fmt: skip
    if kind == "valve_isolation":
        return {"pipe_ids": [ISOLATED_PIPE], "hydraulic_check": {"start": START, "duration_minutes": minutes,
                                                                 "pressure_threshold": 20.0 + eps}}  # fmt: skip
    if kind == "flushing":
        return {"hydrant_node_ids": [HYDRANT], "flow": HYDRANT_FLOW, "start": START, "duration_minutes": minutes,
                "target_velocity": 0.75 + eps}  # fmt: skip
    return {"injection_node_ids": [INJECTION], "start": START, "injection_minutes": 30, "concentration": 10.0,
            "duration_minutes": minutes, "threshold": 0.1 + eps}  # fmt: skip


# --- processes ----------------------------------------------------------------------------------------


def start_worker(env: dict[str, str], log_path: Path, concurrency: int) -> subprocess.Popen[bytes]:
    """The analysis worker as ``make run`` starts it, with ``concurrency`` processes; ready once it says so."""
    command = [str(ROOT / ".venv" / "bin" / "celery"), "-A", "tjwater", "worker", "-Q", "analysis",
               "-n", f"bench-analysis-{os.getpid()}@%h", "--loglevel=INFO", f"--concurrency={concurrency}",
               "--max-tasks-per-child=20", "--max-memory-per-child=2000000", "--without-gossip",
               "--without-mingle"]  # fmt: skip
    handle = log_path.open("wb")
    worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while "ready." not in log_path.read_text(errors="replace"):
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    return worker


def stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


# --- the MCP client -----------------------------------------------------------------------------------


class Mcp:
    """``tools/call`` on one keep-alive connection (httpx2), the 2026-07-28 wire of the tests' helpers."""

    def __init__(self, url: str, world: World) -> None:
        self.url, self.world = f"{url}/mcp", world
        self.http = httpx2.Client(timeout=60)
        self.ids = iter(range(1, 10**9))
        self.poll_ms: list[float] = []  # get_analysis_run: a read-only call, the reference for run_*

    def call(self, subject: str, tool: str, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """(ms, the result) of one call; an ``isError`` result comes back as it is."""
        from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers

        request_id = next(self.ids)
        body = rpc_body("tools/call", {"name": tool, "arguments": {"context_handle": self.world.handles[subject],
                                                                   **args}}, request_id)  # fmt: skip
        headers = rpc_headers("tools/call", self.world.tokens[subject], name=tool)
        t0 = time.perf_counter()
        response = self.http.post(self.url, json=body, headers=headers)
        ms = (time.perf_counter() - t0) * 1000
        reply = parse_rpc_response(response, request_id)
        if "result" not in reply:
            raise RuntimeError(f"{tool}: {reply}")
        return ms, reply["result"]

    def submit(self, subject: str, kind: str, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        ms, result = self.call(subject, TOOLS[kind], args)
        if result.get("isError"):
            raise RuntimeError(f"{TOOLS[kind]} refused: {result.get('structuredContent')}")
        return ms, result["structuredContent"]["data"]

    def status(self, subject: str, run_id: str) -> str:
        ms, result = self.call(subject, "get_analysis_run", {"run_id": run_id})
        self.poll_ms.append(ms)
        return str(result["structuredContent"]["data"]["status"])


def run_row(run_id: str) -> dict[str, Any]:
    from queries.models import AnalysisRun

    run = AnalysisRun.objects.get(run_id=run_id)
    return {
        "run_id": run.run_id, "pk": run.pk, "status": run.status, "created_at": run.created_at,
        "started_at": run.started_at, "finished_at": run.finished_at, "estimate": run.estimate,
        "cost": run.cost, "error": f"{run.error_code} {run.error_message}".strip(),
    }  # fmt: skip


def cancel_run(world: World, subject: str, run_id: str) -> None:
    from analyses.submit import Submitter, cancel

    cancel(
        project=world.project, run_id=run_id, who=Submitter(actor=subject, principal_id=world.principal_ids[subject])
    )


# --- 1. run_* latency ---------------------------------------------------------------------------------


def measure_latency(mcp: Mcp, world: World, calls: int, hours: float) -> dict[str, Any]:
    """``calls`` submissions with no worker running, each cancelled after its call; the first call of
    each kind (the server parses the model version and loads the engine's stack then) is a warm-up."""
    warm: dict[str, float] = {}
    by_kind: dict[str, list[float]] = {k: [] for k in KINDS}
    cancelled: list[str] = []
    for n in range(len(KINDS) + calls):
        kind, subject = KINDS[n % len(KINDS)], PRINCIPALS[n % len(PRINCIPALS)]
        ms, answer = mcp.submit(subject, kind, variant(kind, 1000 + n, world.pump, hours=hours))
        if answer["status"] != "queued" or not answer["created"]:
            raise RuntimeError(f"a latency call did not queue a new run: {answer}")
        if n < len(KINDS):
            warm[kind] = ms
        else:
            by_kind[kind].append(ms)
        cancel_run(world, subject, answer["run_id"])
        cancelled.append(answer["run_id"])
    every = [ms for values in by_kind.values() for ms in values]
    return {
        "calls": len(every), "p50_ms": round(median(every), 1), "p95_ms": round(percentile(every, 0.95), 1),
        "max_ms": round(max(every), 1), "first_call_ms": {k: round(v, 1) for k, v in warm.items()},
        "per_kind_p50_ms": {k: round(median(v), 1) for k, v in by_kind.items()}, "cancelled_runs": cancelled,
    }  # fmt: skip


# --- 2. end to end ------------------------------------------------------------------------------------


def wait_for(mcp: Mcp, subject: str, run_id: str, timeout_s: float = 300) -> tuple[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = mcp.status(subject, run_id)
        if status in TERMINAL:
            return status, time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} is still {status} after {timeout_s} s")
        time.sleep(0.1)


def one_run(mcp: Mcp, world: World, kind: str, n: int, subject: str, hours: float) -> dict[str, Any]:
    t0 = time.time()
    ms, answer = mcp.submit(subject, kind, variant(kind, n, world.pump, hours=hours))
    status, seen = wait_for(mcp, subject, answer["run_id"])
    row = run_row(answer["run_id"])
    if status != "succeeded":
        raise RuntimeError(f"{kind} run {answer['run_id']} ended {status}: {row['error']}")
    finished, started = row["finished_at"].timestamp(), row["started_at"].timestamp()
    wall = float(row["cost"].get("wall_seconds", 0.0))
    return {
        "kind": kind, "run_id": answer["run_id"], "pk": row["pk"], "call_ms": round(ms, 1),
        "e2e_s": round(finished - t0, 3), "polled_s": round(seen - t0, 3), "queued_s": round(started - t0, 3),
        "run_wall_s": round(wall, 3), "after_compute_s": round(finished - started - wall, 3),
        "estimate_cpu_s": float(row["estimate"]["cpu_seconds"]), "actual_cpu_s": float(row["cost"]["cpu_seconds"]),
        "series_rows": int(row["cost"].get("series_rows", 0)), "peak_rss_mb": row["cost"].get("peak_rss_mb"),
    }  # fmt: skip


def warm_workers(mcp: Mcp, world: World) -> list[float]:
    """One short burst per worker process, at once: each child loads the engine's stack and the model
    version (the first run of a process pays for it; a long-lived worker pays it once)."""
    t0 = time.time()
    answers = [mcp.submit(PRINCIPALS[i], "burst", variant("burst", 9000 + i, world.pump, hours=1))[1] for i in (0, 1)]
    return [round(wait_for(mcp, PRINCIPALS[i], a["run_id"])[1] - t0, 2) for i, a in enumerate(answers)]


# --- 3. the makespan ----------------------------------------------------------------------------------


def makespan(mcp: Mcp, world: World, runs: int, hours: float) -> dict[str, Any]:
    """``runs`` bursts from the five principals, each keeping at most two queued or running."""
    from queries.models import AnalysisRun

    per = {s: runs // len(PRINCIPALS) + (1 if i < runs % len(PRINCIPALS) else 0) for i, s in enumerate(PRINCIPALS)}
    inflight: dict[str, list[str]] = {s: [] for s in PRINCIPALS}
    submitted: list[str] = []
    t0 = time.time()
    n = 0
    while True:
        active = set(AnalysisRun.objects.filter(run_id__in=submitted, status__in=["queued", "running"])
                     .values_list("run_id", flat=True))  # fmt: skip
        if not active and len(submitted) == runs:
            break
        for subject in PRINCIPALS:
            inflight[subject] = [r for r in inflight[subject] if r in active]
            while per[subject] and len(inflight[subject]) < 2:
                _, answer = mcp.submit(subject, "burst", variant("burst", 5000 + n, world.pump, hours=hours))
                n += 1
                per[subject] -= 1
                inflight[subject].append(answer["run_id"])
                submitted.append(answer["run_id"])
        time.sleep(0.05)
    rows = [run_row(r) for r in submitted]
    failed = [r for r in rows if r["status"] != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} makespan runs did not succeed: {failed[0]['error']}")
    end = max(r["finished_at"].timestamp() for r in rows)
    walls = [float(r["cost"]["wall_seconds"]) for r in rows]
    # A run of a fresh worker child (``--max-tasks-per-child``) loads the engine's stack and the model first.
    cold = [w for w in walls if w > 2 * median(walls)]
    return {"runs": runs, "makespan_s": round(end - t0, 2), "run_wall_median_s": round(median(walls), 3),
            "run_wall_max_s": round(max(walls), 3), "runs_over_twice_the_median_wall": len(cold),
            "sum_run_wall_s": round(sum(walls), 2), "run_ids": submitted}  # fmt: skip


# --- 4. the engine's floor ----------------------------------------------------------------------------

# EPANET 2.2's codes (epanet2_enums.h).
EN_EMITTER, EN_SOURCEQUAL, EN_SOURCEPAT, EN_SOURCETYPE, EN_SETPOINT = 3, 5, 6, 7, 2
EN_INITSTATUS, EN_TIMER, EN_CONTROLCOUNT, EN_PDA = 4, 2, 5, 1
LPS = 1000.0  # the floor's model is written in L/s: m³/s × 1000


class Toolkit:
    """One EPANET 2.2 project (WNTR's toolkit wrapper and its library), the model opened once."""

    def __init__(self, inp: Path) -> None:
        from wntr.epanet import toolkit

        self.en = toolkit.ENepanet()
        self.en.ENopen(str(inp), str(inp.with_suffix(".rpt")), str(inp.with_suffix(".bin")))
        self.lib, self.ph = self.en.ENlib, self.en._project  # the 2.2 project handle of the wrapper

    def check(self, code: int) -> None:
        if code > 100:
            raise RuntimeError(f"EPANET error {code}")

    def node(self, name: str) -> int:
        return int(self.en.ENgetnodeindex(name))

    def link(self, name: str) -> int:
        return int(self.en.ENgetlinkindex(name))

    def hydraulics(self) -> float:
        """Seconds of one hydraulic solve over the model's window."""
        t0 = time.perf_counter()
        self.en.ENopenH()
        self.en.ENinitH(0)
        while True:
            self.en.ENrunH()
            if self.en.ENnextH() <= 0:
                break
        self.en.ENcloseH()
        return time.perf_counter() - t0

    def quality(self) -> float:
        """Seconds of one hydraulic solve and one water-quality solve over the model's window."""
        t0 = time.perf_counter()
        self.en.ENsolveH()
        self.en.ENopenQ()
        self.en.ENinitQ(0)
        while True:
            self.en.ENrunQ()
            if self.en.ENnextQ() <= 0:
                break
        self.en.ENcloseQ()
        return time.perf_counter() - t0

    def add_constant_demand(self, node: str, pattern: str) -> int:
        """A demand category of base 0 on a constant pattern at ``node``: its index (for ``set_demand``)."""
        self.check(self.lib.EN_addpattern(self.ph, pattern.encode()))
        index = ctypes.c_int()
        self.check(self.lib.EN_getpatternindex(self.ph, pattern.encode(), ctypes.byref(index)))
        self.check(self.lib.EN_setpattern(self.ph, index, (ctypes.c_double * 1)(1.0), 1))
        self.check(self.lib.EN_adddemand(self.ph, self.node(node), ctypes.c_double(0.0), pattern.encode(), b"hydrant"))
        count = ctypes.c_int()
        self.check(self.lib.EN_getnumdemands(self.ph, self.node(node), ctypes.byref(count)))
        return count.value

    def set_demand(self, node: str, category: int, value: float) -> None:
        self.check(self.lib.EN_setbasedemand(self.ph, self.node(node), category, ctypes.c_double(value)))

    def delete_controls_on(self, link: str) -> int:
        index, removed = self.link(link), 0
        for k in range(int(self.en.ENgetcount(EN_CONTROLCOUNT)), 0, -1):
            if int(self.en.ENgetcontrol(k)["linkindex"]) == index:
                self.en.ENdeletecontrol(k)
                removed += 1
        return removed

    def close(self) -> None:
        self.en.ENclose()


def timed(solve: Callable[[], float], reps: int) -> float:
    return median([solve() for _ in range(reps)])


@contextmanager
def toolkit_of(wn: Any, tmp: Path, name: str) -> Iterator[Toolkit]:
    from wntr.network.io import write_inpfile

    inp = tmp / f"{name}.inp"
    write_inpfile(wn, str(inp), units="LPS")
    kit = Toolkit(inp)
    try:
        yield kit
    finally:
        kit.close()


def floors(world: World, tmp: Path, hours: float, reps: int) -> dict[str, dict[str, Any]]:
    """Each kind's scenarios as its run prepares them, solved by the toolkit (see the module docstring)."""
    import copy

    import numpy as np
    import wntr

    from analyses.kinds.base import parse_utc, window_step
    from analyses.network import fresh
    from queries.importer.baseline_window import align_patterns
    from queries.runs.burst import BURST_NODE
    from queries.runs.burst import BURST_PIPE as SPLIT_PIPE
    from queries.runs.contaminant import SOURCE_PATTERN
    from queries.runs.engine import run_epanet, set_window
    from queries.runs.flushing import HYDRANT_PATTERN
    from queries.runs.model import read_model_version

    start = parse_utc(START)
    duration_s = int(hours * 3600)
    step = window_step(duration_s, 900)
    base = fresh(world.version)
    align_patterns(base, start, world.project)
    set_window(base, duration_s=duration_s, step_s=step)
    out: dict[str, dict[str, Any]] = {}

    # WNTR's EpanetSimulator on the same window, as every run calls it (an .inp written, EPANET run, the
    # binary output read back into frames): the reference the issue quotes (≈ 0.75 s per 24 h of Net6).
    simulator = median([_timed_call(lambda: run_epanet(copy.deepcopy(base))) for _ in range(reps)])
    # Two steps every run takes besides EPANET, for reading the table: the model version parsed into a WNTR
    # network (once per worker process) and a deep copy of it (a run computes on copies).
    parse = median([_timed_call(lambda: read_model_version(world.version)) for _ in range(min(reps, 3))])
    deepcopy = median([_timed_call(lambda: copy.deepcopy(base)) for _ in range(reps)])

    # The what-if simulation: the pump off one hour in, its own controls deleted.
    with toolkit_of(base, tmp, "simulation") as kit:
        kit.delete_controls_on(world.pump)
        kit.en.ENaddcontrol(EN_TIMER, kit.link(world.pump), 0.0, 0, 3600.0)
        out["simulation"] = {"scenarios": 1, "floor_s": timed(kit.hydraulics, reps)}

    # The burst: the split pipe in the model; the baseline (no emitter) and the scenario (the emitter).
    split = wntr.morph.split_pipe(base, BURST_PIPE, SPLIT_PIPE, BURST_NODE, split_at_point=0.5)
    with toolkit_of(split, tmp, "burst") as kit:
        node = kit.node(BURST_NODE)
        kit.en.ENsetnodevalue(node, EN_EMITTER, 0.0)
        baseline = timed(kit.hydraulics, reps)
        kit.en.ENsetnodevalue(node, EN_EMITTER, EMITTER * LPS)
        out["burst"] = {"scenarios": 2, "floor_s": baseline + timed(kit.hydraulics, reps)}

    # Valve isolation's hydraulic check: the segment's and the valves' links closed, PDA.
    closed = isolation_links(world)
    with toolkit_of(base, tmp, "valve_isolation") as kit:
        for link in closed:
            kit.delete_controls_on(link)
            kit.en.ENsetlinkvalue(kit.link(link), EN_INITSTATUS, 0.0)
        kit.check(kit.lib.EN_setdemandmodel(kit.ph, EN_PDA, ctypes.c_double(0.0), ctypes.c_double(20.0),
                                            ctypes.c_double(0.5)))  # fmt: skip
        out["valve_isolation"] = {"scenarios": 1, "floor_s": timed(kit.hydraulics, reps), "links_closed": len(closed)}

    # Flushing: the baseline, then the hydrant's extra demand on a constant pattern.
    with toolkit_of(base, tmp, "flushing") as kit:
        category = kit.add_constant_demand(HYDRANT, HYDRANT_PATTERN)
        baseline = timed(kit.hydraulics, reps)
        kit.set_demand(HYDRANT, category, HYDRANT_FLOW * LPS)
        out["flushing"] = {"scenarios": 2, "floor_s": baseline + timed(kit.hydraulics, reps)}

    # The contaminant: the model as queries.runs.contaminant prepares it (report and hydraulics at the
    # quality step, the patterns refined to the injection's step, CHEM), the source set by the toolkit.
    chem = copy.deepcopy(base)
    t = chem.options.time
    t.duration, t.report_timestep, t.report_start = duration_s, 300, 0
    t.hydraulic_timestep, t.quality_timestep = min(step, 300), 300
    fine = int(np.gcd(int(t.pattern_timestep), 30 * 60))
    factor = int(t.pattern_timestep) // fine
    if factor > 1:
        for _, pattern in chem.patterns():
            pattern.multipliers = np.repeat(np.asarray(pattern.multipliers, dtype=float), factor)
        t.pattern_timestep = fine
    chem.options.quality.parameter = "CHEMICAL"
    on = 30 * 60 // fine
    chem.add_pattern(SOURCE_PATTERN, [1.0] * on + [0.0] * max(1, -(-duration_s // fine) - on))
    with toolkit_of(chem, tmp, "contaminant") as kit:
        node = kit.node(INJECTION)
        pattern = ctypes.c_int()
        kit.check(kit.lib.EN_getpatternindex(kit.ph, SOURCE_PATTERN.encode(), ctypes.byref(pattern)))
        kit.en.ENsetnodevalue(node, EN_SOURCETYPE, float(EN_SETPOINT))
        kit.en.ENsetnodevalue(node, EN_SOURCEQUAL, 10.0)  # mg/L
        kit.en.ENsetnodevalue(node, EN_SOURCEPAT, float(pattern.value))
        out["contaminant"] = {"scenarios": 1, "floor_s": timed(kit.quality, reps), "quality": True}
    for row in out.values():
        row["floor_s"] = round(row["floor_s"], 4)
    out["_reference"] = {
        "wntr_epanet_simulator_s": round(simulator, 4),
        "model_parse_s": round(parse, 4),
        "model_deepcopy_s": round(deepcopy, 4),
        "hours": hours,
    }
    return out


def _timed_call(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def isolation_links(world: World) -> list[str]:
    """The links the valve check closes: the isolated segment's pipes and the valves' links (the run's
    own ``isolation_segment`` result)."""
    from queries.models import AnalysisResult

    segment = (
        AnalysisResult.objects.filter(run__project=world.project, run__kind="valve_isolation",
                                      run__status="succeeded", result_type="isolation_segment")
        .order_by("pk").values_list("payload", flat=True).first()
    )  # fmt: skip
    if segment is None:
        raise RuntimeError("no succeeded valve isolation run to take the closed links from")
    return sorted({*segment["pipes"], *(v["pipe_id"] for v in segment["valves_to_close"])})


# --- 5. the COPY of a run's series --------------------------------------------------------------------


def copy_seconds(source_pk: int, target_pk: int, reps: int) -> tuple[float, int]:
    """Seconds to COPY the series rows of run ``source_pk`` again under run ``target_pk`` (rolled back)."""
    from queries.models import AnalysisLinkSeries, AnalysisNodeSeries

    times: list[float] = []
    rows = 0
    with psycopg.connect(DSN) as conn:
        data: dict[str, tuple[list[str], bytes]] = {}
        for model in (AnalysisNodeSeries, AnalysisLinkSeries):
            table = model._meta.db_table
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND column_name "
                "NOT IN ('id', 'run_id') ORDER BY ordinal_position", [table]).fetchall()]  # fmt: skip
            chunks = []
            listed = ", ".join(f'"{c}"' for c in columns)
            query = f'COPY (SELECT {int(target_pk)}, {listed} FROM "{table}" WHERE run_id = {int(source_pk)}) TO STDOUT'
            with conn.cursor().copy(query) as copy:  # noqa: S608 - our own names and integers
                chunks = [bytes(c) for c in copy]
            data[table] = (["run_id", *columns], b"".join(chunks))
            rows += data[table][1].count(b"\n")
        conn.rollback()
        for _ in range(reps):
            with conn.transaction(force_rollback=True):
                t0 = time.perf_counter()
                for table, (columns, payload) in data.items():
                    listed = ", ".join(f'"{c}"' for c in columns)
                    with conn.cursor().copy(f'COPY "{table}" ({listed}) FROM STDIN') as copy:
                        for i in range(0, len(payload), 1 << 20):
                            copy.write(payload[i : i + (1 << 20)])
                times.append(time.perf_counter() - t0)
    return median(times), rows


# --- the report ---------------------------------------------------------------------------------------


@dataclass
class Report:
    started: str
    options: dict[str, Any]
    machine: str
    load_before: tuple[float, float, float]
    latency: dict[str, Any] = field(default_factory=dict)
    warmup_s: list[float] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    floors: dict[str, dict[str, Any]] = field(default_factory=dict)
    copy: dict[str, dict[str, float]] = field(default_factory=dict)
    makespan: dict[str, Any] = field(default_factory=dict)

    def kinds(self) -> list[dict[str, Any]]:
        rows = []
        for kind in KINDS:
            runs = [r for r in self.runs if r["kind"] == kind]
            floor, copy_s = self.floors[kind]["floor_s"], self.copy[kind]["copy_s"]
            e2e = median([r["e2e_s"] for r in runs])
            estimate, actual = median([r["estimate_cpu_s"] for r in runs]), median([r["actual_cpu_s"] for r in runs])
            bound = GOAL_E2E * floor + copy_s
            rows.append({
                "kind": kind, "runs": len(runs), "floor_s": floor, "copy_s": round(copy_s, 3),
                "series_rows": runs[0]["series_rows"], "e2e_s": round(e2e, 3),
                "queued_s": round(median([r["queued_s"] for r in runs]), 3),
                "run_wall_s": round(median([r["run_wall_s"] for r in runs]), 3),
                "after_compute_s": round(median([r["after_compute_s"] for r in runs]), 3),
                "e2e_over_floor": round(e2e / floor, 2), "e2e_over_floor_plus_copy": round(e2e / (floor + copy_s), 2),
                "goal_s": round(bound, 3), "e2e_ok": e2e <= bound,
                "estimate_cpu_s": estimate, "actual_cpu_s": actual, "actual_over_estimate": round(actual / estimate, 2),
                "estimate_ok": abs(actual / estimate - 1) <= GOAL_ESTIMATE,
                "suggested_scale": round(actual / estimate, 3),
            })  # fmt: skip
        return rows

    def as_json(self) -> dict[str, Any]:
        kinds = self.kinds()
        burst = next(k for k in kinds if k["kind"] == "burst")
        ideal = self.makespan["runs"] * burst["e2e_s"] / 2
        self.makespan.update({"one_run_e2e_s": burst["e2e_s"], "ideal_s": round(ideal, 2),
                              "over_ideal": round(self.makespan["makespan_s"] / ideal, 2),
                              "ok": self.makespan["makespan_s"] <= GOAL_MAKESPAN * ideal})  # fmt: skip
        self.latency["ok"] = self.latency["p50_ms"] <= GOAL_P50_MS
        return {
            "measured_at": self.started, "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": self.machine, "load_average_before": self.load_before, "load_average_after": os.getloadavg(),
            "options": self.options, "network": "Net6 (3356 nodes, 3892 links)",
            "engine_floor": "EPANET 2.2 via wntr.epanet.toolkit.ENepanet, model opened once, solves only",
            "goals": {"e2e": "≤ 1.5 × floor + COPY of the series", "run_p50_ms": GOAL_P50_MS,
                      "estimate": "actual CPU within ±30 % of the estimate", "makespan": "≤ 1.15 × ideal"},
            "kinds": kinds, "latency": self.latency, "makespan": self.makespan, "floors": self.floors,
            "worker_warmup_s": self.warmup_s, "runs": self.runs,
        }  # fmt: skip


def table(result: dict[str, Any]) -> str:
    ok = {True: "met", False: "**missed**"}
    lines = [
        "| analysis (Net6, {h:g} h) | engine floor s | series rows | COPY s | end to end s | ÷ floor | "
        "÷ (floor + COPY) | goal ≤ 1.5×floor+COPY | estimate CPU s | actual CPU s | actual ÷ estimate |".format(
            h=result["options"]["hours"]),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for k in result["kinds"]:
        lines.append(
            f"| {k['kind']} ({k['runs']} runs) | {k['floor_s']:.3f} | {k['series_rows']:,} | {k['copy_s']:.2f} | "
            f"{k['e2e_s']:.2f} | {k['e2e_over_floor']:.1f}× | {k['e2e_over_floor_plus_copy']:.2f}× | "
            f"{ok[k['e2e_ok']]} ({k['goal_s']:.2f} s) | {k['estimate_cpu_s']:.2f} | {k['actual_cpu_s']:.2f} | "
            f"{k['actual_over_estimate']:.2f} ({ok[k['estimate_ok']]}) |"
        )
    lat, mk, ref = result["latency"], result["makespan"], result["floors"]["_reference"]
    lines += [
        "",
        f"`tools/call run_*` (queues only), {lat['calls']} calls over the five kinds: p50 **{lat['p50_ms']} ms**, "
        f"p95 {lat['p95_ms']} ms, max {lat['max_ms']} ms — goal p50 ≤ 50 ms {ok[lat['ok']]}; per kind p50 "
        + ", ".join(f"{k} {v} ms" for k, v in lat["per_kind_p50_ms"].items())
        + "; a server's first call of a kind (model parse, engine stack) "
        + ", ".join(f"{k} {v} ms" for k, v in lat["first_call_ms"].items())
        + ".",
        f"{mk['runs']} bursts from 5 principals (≤ 2 each in flight) on 2 worker processes: makespan "
        f"**{mk['makespan_s']} s** against the ideal {mk['runs']} × {mk['one_run_e2e_s']} s ÷ 2 = {mk['ideal_s']} s: "
        f"{mk['over_ideal']}× — goal ≤ 1.15× {ok[mk['ok']]} (run wall median {mk['run_wall_median_s']} s, max "
        f"{mk['run_wall_max_s']} s; {mk['runs_over_twice_the_median_wall']} runs over twice the median).",
        f"Beside EPANET, on the same {ref['hours']:g} h window: WNTR's EpanetSimulator "
        f"{ref['wntr_epanet_simulator_s']:.3f} s per run (an .inp written, EPANET, the binary output read back "
        f"into frames); the model version parsed "
        f"{ref['model_parse_s']:.3f} s (once per worker process), a deep copy of it {ref['model_deepcopy_s']:.3f} s; "
        f"get_analysis_run p50 {lat.get('get_analysis_run_p50_ms')} ms (the client's polls).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0, help="every run's window (default 24 h)")
    parser.add_argument("--reps", type=int, default=3, help="end-to-end runs per kind")
    parser.add_argument("--calls", type=int, default=40, help="measured run_* calls (after one per kind)")
    parser.add_argument("--makespan-runs", type=int, default=20)
    parser.add_argument("--floor-reps", type=int, default=5)
    parser.add_argument("--copy-reps", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    options = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **bench_env()}
    os.environ.update(env)
    report = Report(started=datetime.now(UTC).isoformat(timespec="seconds"), options=vars(options),
                    machine=f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
                    load_before=os.getloadavg())  # fmt: skip
    log(f"database {DB}, Redis {REDIS_URL}")
    fresh_database()
    import django

    django.setup()
    import redis
    from django.core.management import call_command

    from tests.support.servers import launch

    redis.Redis.from_url(REDIS_URL).flushdb()
    call_command("migrate", "--noinput", verbosity=0)
    server = worker = None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp_dir:
            tmp = Path(tmp_dir)
            t0 = time.monotonic()
            world = build_world(tmp)
            log(f"Net6 imported, {world.valves} valves, 5 principals ({time.monotonic() - t0:.0f} s)")
            server = launch(env, OUT, log_name="analysis-server.log")
            mcp = Mcp(server.url, world)
            log(f"server on {server.url}; run_* latency, no worker running …")
            report.latency = measure_latency(mcp, world, options.calls, options.hours)
            redis.Redis.from_url(REDIS_URL).delete("analysis")  # the cancelled runs' messages
            log(f"run_* p50 {report.latency['p50_ms']} ms, p95 {report.latency['p95_ms']} ms")
            worker = start_worker(env, OUT / "analysis-worker.log", concurrency=2)
            report.warmup_s = warm_workers(mcp, world)
            log(f"worker ready, warm-up runs {report.warmup_s} s; end to end, {options.reps} runs per kind …")
            for kind in KINDS:
                for n in range(options.reps):
                    row = one_run(mcp, world, kind, n, PRINCIPALS[n % len(PRINCIPALS)], options.hours)
                    report.runs.append(row)
                    log(f"{kind}: {row['e2e_s']} s end to end (queued {row['queued_s']}, run {row['run_wall_s']}, "
                        f"after {row['after_compute_s']}), {row['series_rows']:,} series rows")  # fmt: skip
            report.latency["get_analysis_run_p50_ms"] = round(median(mcp.poll_ms), 1)
            log(f"{options.makespan_runs} bursts from 5 principals on 2 worker processes …")
            report.makespan = makespan(mcp, world, options.makespan_runs, options.hours)
            log(f"makespan {report.makespan['makespan_s']} s")
            stop_group(worker)
            worker = None
            log("the engine's floor (toolkit, model opened once) …")
            report.floors = floors(world, tmp, options.hours, options.floor_reps)
            log(json.dumps(report.floors))
            target = run_row(report.latency["cancelled_runs"][0])["pk"]
            for kind in KINDS:
                source = next(r for r in report.runs if r["kind"] == kind)
                seconds, rows = copy_seconds(source["pk"], target, options.copy_reps)
                report.copy[kind] = {"copy_s": seconds, "rows": rows}
                log(f"COPY {kind}: {rows:,} rows in {seconds:.2f} s")
    finally:
        if worker is not None:
            stop_group(worker)
        if server is not None:
            server.stop()
    result = report.as_json()
    (OUT / "analysis.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(f"\nwritten to {(OUT / 'analysis.json').relative_to(ROOT)}")
    if not options.keep:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
