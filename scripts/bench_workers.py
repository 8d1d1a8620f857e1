"""``make bench-workers``: how ``/mcp`` scales with uvicorn worker processes (issue 25), never part of
``make test``.

The set-up of ``make bench`` (its database ``tjwater_bench`` with the demo, the Keycloak-shaped provider as
the one issuer, production settings, real exchanged tokens, a context bound through the REST API); then
for 1, 2 and 4 workers (``uvicorn --workers N``, not pinned) the load generator — pinned to CPU 1, so the
client's CPU is the same for every N — drives ``get_element_properties`` at concurrency 8 and 16. Per run:
req/s, p50/p95, server CPU per call (all worker processes), and what a call costs the shared services,
counted on them while the run lasts: PostgreSQL statements per call (``pg_stat_database.xact_commit`` of
the benchmark database: every MCP statement is its own read-only transaction), the limiter's Redis round
trips per call (``EVALSHA`` in ``commandstats``) and every command the Redis server ran (shared with
whatever else runs, and counting the commands inside scripts: an upper bound), and the query connections
the workers hold (``pg_stat_activity`` by application name). Results: ``var/bench/workers.json`` and a
Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench import (  # noqa: E402
    DB,
    DEMO,
    DSN,
    OUT,
    REDIS_URL,
    USERS,
    drive,
    ensure_database,
    free_port,
    grant,
    percentile,
    start_provider,
    start_server,
)

#: PostgreSQL 15 backends flush their statistics when idle, and defer a flush that comes less than a second
#: after the last one by up to 10 s (``PGSTAT_IDLE_INTERVAL``): read the counters after that.
STATS_SETTLE_S = 11
TOOL, ARGS = "get_element_properties", {"element_type": "pipe", "element_id": "LINK-0"}


def worker_pids(parent: int) -> list[int]:
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as f:
            return [int(pid) for pid in f.read().split()] or [parent]
    except FileNotFoundError:
        return [parent]


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def statements(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [DB]).fetchone()[0])


def redis_counts(client: redis.Redis) -> tuple[int, int]:
    """(the limiter's scripts run — its round trips, ``EVALSHA``; every command the server ran, those
    inside scripts and other clients' included)."""
    stats = client.info("commandstats")
    scripts = sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))
    return scripts, int(client.info("stats")["total_commands_processed"])


def query_connections(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = 'tjwater-mcp-query'", [DB]
    ).fetchone()
    return int(row[0])


def measure(url: str, token: str, handle: str, concurrency: int, requests: int, pids: list[int]) -> dict[str, Any]:
    args = {"context_handle": handle, **ARGS}
    asyncio.run(drive(url, token, TOOL, args, concurrency=concurrency, requests=max(100, requests // 10)))
    stats = redis.Redis.from_url(REDIS_URL)
    with psycopg.connect(DSN, autocommit=True) as conn:
        time.sleep(STATS_SETTLE_S)
        pg0, redis0, cpu0 = statements(conn), redis_counts(stats), cpu_seconds(pids)
        run = asyncio.run(drive(url, token, TOOL, args, concurrency=concurrency, requests=requests))
        cpu1, redis1 = cpu_seconds(pids), redis_counts(stats)
        time.sleep(STATS_SETTLE_S)
        pg1 = statements(conn)
        held = query_connections(conn)
    calls = len(run.latencies_ms)
    return {
        "concurrency": concurrency,
        "calls": calls,
        "errors": run.errors,
        "rps": round(calls / run.wall_s, 1),
        "p50_ms": round(percentile(run.latencies_ms, 0.5), 2),
        "p95_ms": round(percentile(run.latencies_ms, 0.95), 2),
        "cpu_us_per_call": round((cpu1 - cpu0) / max(1, calls) * 1e6),
        "pg_statements_per_call": round((pg1 - pg0) / max(1, calls), 2),
        "redis_round_trips_per_call": round((redis1[0] - redis0[0]) / max(1, calls), 2),
        "redis_commands_per_call_at_most": round((redis1[1] - redis0[1]) / max(1, calls), 2),
        "query_connections": held,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--requests", type=int, default=3000, help="measured calls per run")
    options = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {1})  # the load generator's CPU is fixed; the workers may use both
    provider = start_provider(OUT / "provider-workers.log", IDP_ACCESS_TOKEN_TTL="7200")
    rows: list[dict[str, Any]] = []
    try:
        ensure_database(0, provider.issuer, scale=False)
        grant(provider.issuer, USERS["alice"][0], (DEMO,))
        for workers in [int(n) for n in options.workers.split(",")]:
            port = free_port()
            resource = f"http://127.0.0.1:{port}/mcp"
            token = provider.exchange(
                provider.user_token("alice", resource=resource), resource=resource, scope="mcp.query mcp.context.bind"
            )
            server = start_server(provider.issuer, port, OUT / f"server-workers-{workers}.log", workers=workers)
            try:
                created = httpx2.post(
                    f"http://127.0.0.1:{port}/api/v1/mcp-query-contexts",
                    json={"project": DEMO, "session_id": f"bench-workers-{secrets.token_hex(4)}",
                          "purpose": "ordinary_chat"},
                    headers={"authorization": f"Bearer {token}"}, timeout=30,
                )  # fmt: skip
                created.raise_for_status()
                handle = created.json()["context_handle"]
                pids = worker_pids(server.pid)
                for concurrency in (8, 16):
                    row = {"workers": workers, **measure(resource, token, handle, concurrency, options.requests, pids)}
                    row["peak_rss_mb_per_worker"] = round(max(rss_mb(pid) for pid in pids), 1)
                    rows.append(row)
                    print(f"[bench-workers] {json.dumps(row)}", flush=True)
            finally:
                os.killpg(server.pid, 15)
                server.wait(timeout=30)
    finally:
        provider.stop()
    load = os.getloadavg()
    summary = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, load {load[0]:.1f}",
        "tool": TOOL,
        "runs": rows,
    }
    (OUT / "workers.json").write_text(json.dumps(summary, indent=2))
    print("| workers | c | req/s | p50 ms | p95 ms | CPU µs/call | PG stmts/call | Redis scripts/call | query conns |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workers']} | {r['concurrency']} | {r['rps']} | {r['p50_ms']} | {r['p95_ms']} | "
            f"{r['cpu_us_per_call']} | {r['pg_statements_per_call']} | {r['redis_round_trips_per_call']} | "
            f"{r['query_connections']} |"
        )
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
