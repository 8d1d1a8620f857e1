"""Several app hosts behind a load balancer on one PostgreSQL and one Redis (issue 25 "Several hosts").

Simulated for real on this machine (tests/support/netns.py): network namespaces ``db``, ``host1`` and
``host2`` on a private bridge, each with an address of its own. ``db`` runs a private PostgreSQL 15
(PostGIS, migrated, seeded with the resilience suite's two tenants) and a private Redis, both listening on
the db address only; ``host1`` and ``host2`` each run the app (uvicorn, the resilience suite's server
settings) on their own address, ``DATABASE_URL``/``REDIS_URL`` naming the db address. Debian's nginx, in
the root namespace, balances one port over both hosts, and has one port pinned to each host for the
targeted steps; the test client talks to nginx only. Tokens come from the dev issuer, whose key file
every host reads (no issuer to reach over the network, as in the rest of the resilience suite).

Under load from concurrent clients:

(a) the balanced calls land on both hosts (counted in nginx's own access log, ``$upstream_addr``) and
    every answer carries the caller's own tenant;
(b) one principal's 4 in-flight calls hold exactly across hosts: 12 slow calls at once through the
    balancer, 4 served and 8 refused ``RATE_LIMITED``, never more than 4 ``pg_sleep`` in PostgreSQL nor
    4 leases in Redis, and a host refused calls while it held fewer than 4 itself;
(c) a context revoked through host1 is refused by host2 on its next call, and never served again;
(d) host1 SIGKILLed with four slow calls in flight under balanced load: those calls get nginx's 502
    within ``KILL_ANSWER_BOUND_S`` (never a success, never a hang), host1's Redis slots free within the
    lease, host2 serves every balanced call from just after the kill on (nginx passes a call it could not
    even send to host1 on to host2; a POST host1 had received is never retried), no tenant crossing.

Only in ``make resilience`` (``resilience_slow``): about two minutes. Figures: var/resilience/results.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_app.limits import slot_key
from tests.resilience.load import VIOLATION, LoadRun, Probe, call_once
from tests.resilience.test_faults import SERVER_ENV, live_leases, slow_probe
from tests.resilience.test_tenants import CROSSING, tenant_check
from tests.support.netns import Topology, unavailable
from tests.support.postgres import PrivatePostgres
from tests.support.resilience import (
    LOAD_PRINCIPALS,
    Figures,
    Processes,
    World,
    bind,
    dev_token,
    postgres_cluster,
    redis_server,
    seed_world,
)
from tests.support.servers import ServerProcess, free_port, stop_process

pytestmark = [pytest.mark.e2e, pytest.mark.resilience_slow]

HOSTS = ("host1", "host2")
APP_PORT = 8000  # every host listens on its own address, so they all use the same port
LEASE_S = float(SERVER_ENV["TJWATER_MCP_SLOT_LEASE_S"])
LIMIT = int(SERVER_ENV["TJWATER_MCP_MAX_CONCURRENT"])
# Stated bound: a call in flight on a host that dies is answered (nginx's 502) within this many seconds.
KILL_ANSWER_BOUND_S = 5.0
# Polling the leases in Redis adds at most this to the measured time for the slots to free.
POLL_SLACK_S = 0.5
ELEMENT = "10"
SLOW_SUBJECT = "resil-slow"
TENANT_SUBJECTS = {**{subject: "resil-alice" for subject in LOAD_PRINCIPALS}, "resil-bob": "resil-bob"}

# The load balancer (nginx 1.22, Debian's package), foreground, everything under its own directory.
# README "Deploying on several hosts" explains each rule.
NGINX_CONF = """
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 512; }}
http {{
  server_tokens off;
  log_format calls escape=json '{{"port":$server_port,"status":$status,"upstream":"$upstream_addr",'
                               '"upstream_status":"$upstream_status","call":"$http_x_test_call"}}';
  access_log {root}/access.log calls;
  client_body_temp_path {root}/tmp/body;
  proxy_temp_path {root}/tmp/proxy;
  fastcgi_temp_path {root}/tmp/fastcgi;
  uwsgi_temp_path {root}/tmp/uwsgi;
  scgi_temp_path {root}/tmp/scgi;

  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $http_host;
  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
  proxy_set_header X-Forwarded-Proto $scheme;
  proxy_buffering off;
  proxy_connect_timeout 2s;
  proxy_read_timeout 60s;
  proxy_send_timeout 60s;
  proxy_next_upstream error timeout;
  proxy_next_upstream_tries 2;
  proxy_next_upstream_timeout 5s;

  upstream app {{
{servers}
    keepalive 16;
    keepalive_timeout 4s;
  }}
{pinned_upstreams}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://app; }}
  }}
{pinned_servers}
}}
"""


@dataclass
class Balancer:
    root: Path
    url: str
    port: int
    pinned: dict[str, str]  # host → URL of an nginx port that reaches only that host
    upstreams: dict[str, str]  # "address:port" → host
    process: subprocess.Popen[bytes]

    def log_offset(self) -> int:
        return (self.root / "access.log").stat().st_size

    def entries(self, since: int = 0) -> list[dict[str, Any]]:
        with (self.root / "access.log").open("rb") as log:
            log.seek(since)
            return [json.loads(line) for line in log.read().decode().splitlines() if line.strip()]

    def host_of(self, entry: dict[str, Any]) -> str:
        """The host that answered (the last upstream tried), or ``none``."""
        return self.upstreams.get(entry["upstream"].split(",")[-1].strip(), "none")


@contextlib.contextmanager
def nginx(upstreams: dict[str, str], port: int) -> Iterator[Balancer]:
    """nginx on 127.0.0.1:``port`` balancing over ``upstreams`` (address:port → host), plus a port pinned to
    each host; stopped and its directory deleted afterwards."""
    root = Path(tempfile.mkdtemp(prefix="tjwater-nginx-", dir="/tmp"))
    root.chmod(0o755)  # the worker process (user nobody) reaches its temp paths
    (root / "tmp").mkdir()
    hosts = {host: address for address, host in upstreams.items()}
    ports = {host: free_port() for host in hosts}
    conf = NGINX_CONF.format(
        root=root,
        port=port,
        servers="\n".join(f"    server {address} max_fails=1 fail_timeout=10s;" for address in upstreams),
        pinned_upstreams="\n".join(f"  upstream {h} {{ server {a}; }}" for h, a in hosts.items()),
        pinned_servers="\n".join(
            f"  server {{ listen 127.0.0.1:{ports[h]}; location / {{ proxy_pass http://{h}; }} }}" for h in hosts
        ),
    )
    (root / "nginx.conf").write_text(conf)
    process = subprocess.Popen(
        ["nginx", "-p", str(root), "-e", str(root / "error.log"), "-c", str(root / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=(root / "stderr.log").open("wb"),
    )
    balancer = Balancer(
        root=root,
        url=f"http://127.0.0.1:{port}",
        port=port,
        pinned={h: f"http://127.0.0.1:{p}" for h, p in ports.items()},
        upstreams=upstreams,
        process=process,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx2.get(f"{balancer.url}/healthz", timeout=5)
                break
            except httpx2.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, (root / "error.log").read_text()
                time.sleep(0.1)
        yield balancer
    finally:
        stop_process(process)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Site:
    postgres: PrivatePostgres
    processes: Processes
    hosts: dict[str, ServerProcess]
    balancer: Balancer
    world: World


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    # scripts/setup.sh (run by `make resilience`) installs Debian's nginx: its absence is a broken set-up.
    assert shutil.which("nginx") is not None, "nginx is not installed: run scripts/setup.sh"
    with contextlib.ExitStack() as stack:
        topology = stack.enter_context(Topology(["db", *HOSTS]))
        db, db_ns = topology.addresses["db"], topology.exec_prefix("db")
        postgres = stack.enter_context(postgres_cluster(db, 5432, db_ns))
        redis = stack.enter_context(redis_server(db, 6379, db_ns))
        world = seed_world(postgres, redis)
        processes = Processes(postgres=postgres, redis=redis, logs=tmp_path_factory.mktemp("several-hosts"))
        stack.callback(processes.stop_all)
        balancer_port = free_port()

        def start(host: str) -> ServerProcess:
            address = topology.addresses[host]
            return processes.server(
                APP_PORT,
                address,
                topology.exec_prefix(host),
                **SERVER_ENV,
                # What callers see (the balancer); this host's own name for nginx's health requests.
                TJWATER_MCP_RESOURCE_URI=f"http://127.0.0.1:{balancer_port}/mcp",
                ALLOWED_HOSTS=f"127.0.0.1,{address}",
                FORWARDED_ALLOW_IPS=topology.gateway,  # uvicorn trusts X-Forwarded-For from nginx only
            )

        with ThreadPoolExecutor(len(HOSTS)) as pool:
            hosts = dict(zip(HOSTS, pool.map(start, HOSTS), strict=True))
        upstreams = {f"{topology.addresses[h]}:{APP_PORT}": h for h in HOSTS}
        balancer = stack.enter_context(nginx(upstreams, balancer_port))
        yield Site(postgres=postgres, processes=processes, hosts=hosts, balancer=balancer, world=world)


def tenant_probes(url: str) -> list[Probe]:
    """One element probe per principal of both tenants, each bound through ``url``."""
    probes = []
    for subject, project in TENANT_SUBJECTS.items():
        bearer = dev_token(subject)
        probes.append(
            Probe(
                label=subject,
                url=url,
                bearer=bearer,
                tool="get_element_properties",
                arguments={
                    "context_handle": bind(url, bearer, project),
                    "element_type": "junction",
                    "element_id": ELEMENT,
                },
                expect=tenant_check(project, ELEMENT),
            )
        )
    return probes


async def tagged_calls(probe: Probe, first_id: int, count: int) -> list[str]:
    """``count`` calls of ``probe`` at once, each on its own connection and tagged ``x-test-call: <id>`` for
    nginx's access log (which host served it)."""

    async def one(call_id: int) -> str:
        async with httpx2.AsyncClient(timeout=70, headers={"x-test-call": str(call_id)}) as client:
            return await call_once(client, probe, call_id, 60)

    return list(await asyncio.gather(*(one(first_id + n) for n in range(count))))


def sleeping(postgres: PrivatePostgres) -> int:
    """Backends of the private database running the test-only ``pg_sleep`` query now."""
    with postgres.connect(autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%%' "
            "AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def lease_left_ms(site: Site, key: str) -> int:
    """How long the longest live lease of ``key`` still has to run, on Redis's clock."""
    client = site.processes.redis.client()
    try:
        seconds, micros = client.time()
        top = client.zrange(key, -1, -1, withscores=True)
        return int(top[0][1]) - (seconds * 1000 + micros // 1000) if top else 0
    finally:
        client.close()


def connections_by_host(site: Site) -> dict[str, dict[str, int]]:
    """The connections each host holds now on the shared PostgreSQL (by application name) and Redis: the
    connection budget of README "Deploying on several hosts", measured."""
    hosts = {address.split(":")[0]: host for address, host in site.balancer.upstreams.items()}
    held: dict[str, Counter[str]] = {host: Counter() for host in HOSTS}
    with site.postgres.connect(autocommit=True) as conn:
        rows = conn.execute(
            "SELECT host(client_addr), application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND client_addr IS NOT NULL GROUP BY 1, 2"
        ).fetchall()
    for address, application, count in rows:
        if address in hosts:
            held[hosts[address]][f"postgresql:{application or 'django'}"] += count
    client = site.processes.redis.client()
    try:
        for entry in client.client_list():
            address = entry["addr"].rsplit(":", 1)[0]
            if address in hosts:
                held[hosts[address]]["redis"] += 1
    finally:
        client.close()
    return {host: dict(counts) for host, counts in held.items()}


def test_calls_spread_over_both_hosts_and_no_tenant_crosses(site: Site, figures: Figures) -> None:
    """(a) Balanced load from 10 concurrent callers of both tenants for 8 s."""
    balancer = site.balancer
    run = LoadRun(tenant_probes(balancer.url), callers=10, call_timeout_s=15, pause_s=0.02)
    since = balancer.log_offset()
    asyncio.run(run.run(8))
    served = Counter(balancer.host_of(e) for e in balancer.entries(since) if e["port"] == balancer.port)
    calls = sum(served.values())
    held = connections_by_host(site)
    figures.record(
        "several_hosts.spread",
        {**run.report(), "served_by_host": dict(served), "tenant_crossings": 0, "connections_by_host": held},
    )
    assert [s for s in run.samples if CROSSING in s.outcome] == []
    assert run.violations() == [], run.report()
    assert set(run.outcomes()) == {"ok"}, run.report()
    assert calls >= len(run.samples) >= 50
    for host in HOSTS:
        assert served[host] >= 0.3 * calls, served  # round robin: about half each


def test_four_in_flight_hold_exactly_across_hosts(site: Site, figures: Figures) -> None:
    """(b) 12 slow calls (4 s) of one principal at once through the balancer, about 6 per host."""
    balancer, calls, seconds = site.balancer, 12, 4.0
    bearer = dev_token(SLOW_SUBJECT)
    probe = slow_probe(balancer.url, bearer, bind(balancer.url, bearer), seconds)
    key = slot_key(site.world.principals[SLOW_SUBJECT], site.world.projects["resil-alice"])
    peaks = {"pg_sleep": 0, "leases": 0}

    async def burst() -> tuple[list[str], float]:
        task = asyncio.create_task(tagged_calls(probe, 1000, calls))
        started = time.monotonic()
        while not task.done():
            peaks["pg_sleep"] = max(peaks["pg_sleep"], await asyncio.to_thread(sleeping, site.postgres))
            peaks["leases"] = max(peaks["leases"], await asyncio.to_thread(live_leases, site.processes, key))
            await asyncio.sleep(0.02)
        return await task, time.monotonic() - started

    since = balancer.log_offset()
    outcomes, elapsed = asyncio.run(burst())
    entries = {int(e["call"]): e for e in balancer.entries(since) if e["call"]}
    per_host: dict[str, Counter[str]] = {host: Counter() for host in HOSTS}
    for n, outcome in enumerate(outcomes):
        per_host[balancer.host_of(entries[1000 + n])][outcome] += 1
    figures.record(
        "several_hosts.limiter",
        {
            "calls": calls,
            "outcomes": dict(Counter(outcomes)),
            "by_host": {h: dict(c) for h, c in per_host.items()},
            "peak_pg_sleep": peaks["pg_sleep"],
            "peak_redis_leases": peaks["leases"],
            "elapsed_s": round(elapsed, 2),
        },
    )
    assert Counter(outcomes) == {"ok": LIMIT, "retryable:RATE_LIMITED": calls - LIMIT}, outcomes
    assert peaks == {"pg_sleep": LIMIT, "leases": LIMIT}  # reached, never exceeded
    assert all(sum(per_host[h].values()) >= 2 for h in HOSTS), per_host  # both hosts took part
    # A host refused calls while it held fewer than the limit itself: it counted the other host's slots.
    assert any(c["retryable:RATE_LIMITED"] and c["ok"] < LIMIT for c in per_host.values()), per_host


def test_a_context_revoked_through_host1_is_refused_by_host2(site: Site, figures: Figures) -> None:
    """(c) Load on one context through both hosts' pinned ports; the context is revoked through host1's
    binding API; the very next call on host2, and every call on either host started after the revocation
    answered, is refused ``CONTEXT_REVOKED``."""
    pinned = site.balancer.pinned
    bearer = dev_token("resil-alice")
    own = bind(pinned["host1"], bearer)
    arguments = {"context_handle": own, "element_type": "junction", "element_id": ELEMENT}
    probes = [
        Probe(
            label=h,
            url=pinned[h],
            bearer=bearer,
            tool="get_element_properties",
            arguments=arguments,
            expect=tenant_check("resil-alice", ELEMENT),
        )
        for h in HOSTS
    ]
    facts: dict[str, Any] = {}

    async def revoke(run: LoadRun) -> None:
        await asyncio.sleep(3)
        run.mark("fault")
        async with httpx2.AsyncClient(timeout=15) as client:
            answer = await client.delete(
                f"{pinned['host1']}/api/v1/mcp-query-contexts/{own}", headers={"Authorization": f"Bearer {bearer}"}
            )
            facts["revoke_status"] = answer.status_code
            run.mark("restored")
            facts["host2_next_call"] = await call_once(client, probes[1], 1, 15)
        await asyncio.sleep(3)

    run = LoadRun(probes, callers=4, call_timeout_s=15, pause_s=0.01)
    asyncio.run(run.run(8, revoke, tail_s=3))
    revoked = f"{VIOLATION}error:CONTEXT_REVOKED"
    figures.record("several_hosts.revocation", {**run.report(), **facts})
    assert facts["revoke_status"] == 204
    assert facts["host2_next_call"].startswith(revoked), facts
    for host in HOSTS:
        samples = run.select(host)
        before = {s.outcome for s in samples if s.start + s.elapsed < run.marks["fault"]}
        after = {s.outcome for s in samples if s.start >= run.marks["restored"]}
        assert before == {"ok"}, (host, before)  # both hosts served the context first
        assert after and all(o.startswith(revoked) for o in after), (host, after)
        first_refused = next(i for i, s in enumerate(samples) if s.outcome != "ok")
        assert all(s.outcome.startswith(revoked) for s in samples[first_refused:]), host  # never served again


def test_host1_killed_under_load(site: Site, figures: Figures) -> None:
    """(d) Balanced load of both tenants; four slow calls hold all of one principal's slots on host1
    (its pinned port) when host1 is SIGKILLed. Runs last: host1 stays dead."""
    balancer = site.balancer
    slow_bearer = dev_token(SLOW_SUBJECT)
    slow_handle = bind(balancer.url, slow_bearer)
    key = slot_key(site.world.principals[SLOW_SUBJECT], site.world.projects["resil-alice"])
    on_host1 = slow_probe(balancer.pinned["host1"], slow_bearer, slow_handle, 8)
    facts: dict[str, Any] = {}
    run = LoadRun(tenant_probes(balancer.url), callers=10, call_timeout_s=15, pause_s=0.02)

    async def kill_host1(run: LoadRun) -> None:
        await asyncio.sleep(3)
        in_flight = asyncio.create_task(tagged_calls(on_host1, 2000, LIMIT))
        deadline = time.monotonic() + 15
        while live_leases(site.processes, key) < LIMIT and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        facts["leases_before_kill"] = live_leases(site.processes, key)
        facts["lease_left_at_kill_ms"] = lease_left_ms(site, key)
        run.mark("fault")
        site.hosts["host1"].process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        facts["killed_calls"] = await in_flight
        facts["killed_calls_answered_after_s"] = round(time.monotonic() - killed_at, 3)
        async with httpx2.AsyncClient(timeout=20) as client:
            facts["host1_pinned_after_kill"] = await call_once(client, on_host1, 1, 15)
            facts["host2_right_after_kill"] = await call_once(
                client, slow_probe(balancer.pinned["host2"], slow_bearer, slow_handle, 0), 2, 15
            )
        while live_leases(site.processes, key) and time.monotonic() - killed_at < 4 * LEASE_S:
            await asyncio.sleep(0.05)
        facts["slots_freed_after_s"] = round(time.monotonic() - killed_at, 3)
        facts["leases_after"] = live_leases(site.processes, key)
        facts["host2_four_at_once"] = await tagged_calls(
            slow_probe(balancer.pinned["host2"], slow_bearer, slow_handle, 1), 3000, LIMIT
        )
        run.mark("restored")

    asyncio.run(run.run(20, kill_host1))
    killed = run.marks["fault"]
    after = run.select(start=killed)
    settled = [s for s in after if s.start >= killed + 0.5]  # nginx has seen host1's connections close
    in_flight_at_kill = [s for s in run.samples if s.start < killed < s.start + s.elapsed]
    facts.update(
        {
            "lease_s": LEASE_S,
            "balanced_success_rate_after_kill": round(sum(s.ok for s in after) / max(1, len(after)), 4),
            "balanced_calls_after_kill": len(after),
            "balanced_in_flight_at_kill": dict(Counter(s.outcome for s in in_flight_at_kill)),
            # Calls nginx had already sent on a kept-alive connection to host1: a 502, never retried.
            "balanced_502_started_within_s_of_kill": max(
                (round(s.start - killed, 3) for s in after if s.outcome == "bad_gateway"), default=None
            ),
        }
    )
    figures.record("several_hosts.host_killed", {**run.report(), **facts})
    assert [s for s in run.samples if CROSSING in s.outcome] == []
    assert run.violations() == [], run.report()
    assert {s.outcome for s in run.samples if s.start + s.elapsed < killed} == {"ok"}
    # host1's calls failed cleanly: nginx's 502 (the connection died with the process), quickly.
    assert facts["leases_before_kill"] == LIMIT
    assert facts["killed_calls"] == ["bad_gateway"] * LIMIT, facts
    assert facts["killed_calls_answered_after_s"] <= KILL_ANSWER_BOUND_S
    assert facts["host1_pinned_after_kill"] == "bad_gateway"
    # Its slots outlived it for at most the lease, then freed themselves, and host2 uses them.
    assert facts["host2_right_after_kill"] == "retryable:RATE_LIMITED"
    assert 0 < facts["lease_left_at_kill_ms"] <= LEASE_S * 1000
    assert facts["leases_after"] == 0
    assert facts["slots_freed_after_s"] <= LEASE_S + POLL_SLACK_S, facts
    assert facts["host2_four_at_once"] == ["ok"] * LIMIT
    # host2 kept serving: every balanced call from just after the kill on succeeded.
    assert len(settled) >= 50 and {s.outcome for s in settled} == {"ok"}, run.report()
    assert {s.outcome for s in after} <= {"ok", "bad_gateway"}, run.report()
