"""The harness of the resilience suite (issue 9; its fixtures are in tests/resilience/conftest.py):
processes against the private PostgreSQL and Redis of tests/support/postgres.py — uvicorn servers, Celery
workers, the seed script — the two-tenant world, tokens and bindings, and the figures file.

Figures (errors by code, time to recover, counts) are printed and collected by ``Figures`` into
``var/resilience/results.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from tests.support import tokens
from tests.support.postgres import PrivatePostgres, PrivateRedis
from tests.support.servers import ROOT, ServerProcess, launch, stop_process

PRIVATE_DB = "tjwater_resilience"
RESULTS = ROOT / "var" / "resilience" / "results.json"
DEV_ISSUER = "http://127.0.0.1:8000/dev-issuer"  # settings.TJWATER_DEV_ISSUER_ID
HOST_CLIENT = "tjwater-agent-mcp"
SCOPES = ["mcp.query", "mcp.catalog.read", "mcp.context.bind"]


def private_env(postgres: PrivatePostgres, redis_server: PrivateRedis, **extra: str) -> dict[str, str]:
    """Environment of a process (server, worker, script) using the private PostgreSQL and Redis."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": postgres.url,
        "REDIS_URL": redis_server.url,
        "PYTHONUNBUFFERED": "1",
        # The load generator binds far more contexts per principal than a host would (every probe binds
        # its own, and the seed binds hundreds): the binding limits of issue 17 item 11 are tested on
        # their own (tests/e2e/test_investigation_access.py), not by the fault runs.
        "TJWATER_CONTEXT_MAX_LIVE": "100000",
        "TJWATER_BIND_RATE_PER_S": "0",
        **extra,
    }


def run_seed(postgres: PrivatePostgres, redis_server: PrivateRedis, spec: dict[str, Any]) -> dict[str, Any]:
    """Build a world (``tests/resilience/seed.py``) in the private database; returns the created ids."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.resilience.seed"],
        cwd=ROOT,
        env=private_env(postgres, redis_server),
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"seeding the private database failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def launch_server(env: dict[str, str], logs: Path, port: int | None = None) -> ServerProcess:
    """A uvicorn server with ``env`` on ``port`` (default: a free one), started and waited for by the one
    launcher (tests/support/servers.py)."""
    return launch(env, logs, port=port)


@dataclass
class Processes:
    """Servers and workers started by one test against the private stack; all stopped afterwards."""

    postgres: PrivatePostgres
    redis: PrivateRedis
    logs: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def server(self, port: int | None = None, **extra_env: str) -> ServerProcess:
        """A real uvicorn process on ``port`` (default: a free one) using the private PostgreSQL and Redis."""
        server = launch_server(private_env(self.postgres, self.redis, **extra_env), self.logs, port)
        self.started.append(server.process)
        return server

    def worker(self, name: str, **extra_env: str) -> subprocess.Popen[bytes]:
        """A real Celery worker process (prefork, one child) on the private broker and database."""
        log_path = self.logs / f"celery-{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tjwater", "worker", "--pool=prefork", "--concurrency=1"]
            + ["--loglevel=INFO", "-n", f"{name}@resilience", "--without-mingle", "--without-gossip"],
            cwd=ROOT,
            env=private_env(self.postgres, self.redis, **extra_env),
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            stop_process(process)


# The world of the fault and tenant tests: two tenants whose projects both hold EPANET Net1, every
# junction carrying a tenant-identifying elevation, and the principals the load loops call as.
TENANT_ELEVATION = {"resil-alice": 1111.25, "resil-bob": 2222.75}
LOAD_PRINCIPALS = ["resil-load0", "resil-load1", "resil-load2", "resil-load3"]


@dataclass(frozen=True)
class World:
    projects: dict[str, int]
    principals: dict[str, int]


def dev_token(subject: str) -> str:
    """A dev-issuer token (the servers trust the same key file, tests/settings.py's data dir)."""
    return tokens.dev_token(subject, client=HOST_CLIENT, scopes=SCOPES, ttl_s=1800)


def bind(server: ServerProcess | str, bearer: str, project: str = "resil-alice") -> str:
    """A context handle bound through the real REST API (``ordinary_chat``)."""
    url = server if isinstance(server, str) else server.url
    response = httpx2.post(
        f"{url}/api/v1/mcp-query-contexts",
        json={"project": project, "session_id": "resilience", "purpose": "ordinary_chat"},
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=15,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["context_handle"])


class Figures:
    """Collects each test's figures and writes them to ``var/resilience/results.json`` as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if path.exists():
            try:
                self.data = json.loads(path.read_text())
            except ValueError:
                self.data = {}

    def record(self, name: str, figures: dict[str, Any]) -> None:
        self.data[name] = {**figures, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2, sort_keys=True, default=str) + "\n")
        print(f"\n[resilience] {name}: {json.dumps(figures, sort_keys=True, default=str)}")
