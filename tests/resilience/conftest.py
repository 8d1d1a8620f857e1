"""Fixtures of the resilience suite (issue 9): PRIVATE PostgreSQL and Redis instances the tests may stop,
restart and kill, uvicorn servers and Celery workers against them, and the figures file.

The shared PostgreSQL (5432) and Redis (6379) are never touched: ``private_postgres`` is a throwaway
PostgreSQL 15 cluster under /tmp (``initdb`` as user ``postgres``, trust auth on loopback, its own port,
PostGIS, migrated), ``private_redis`` a ``redis-server --save ""`` on its own port. Both are
session-scoped and reusable by any test under tests/resilience (``private_postgres.restart()``,
``.stop()``, ``.start()``; ``private_redis.stop()`` / ``.start()`` on the same port).

Figures (errors by code, time to recover, counts) are printed and collected by ``figures`` into
``var/resilience/results.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
import redis

from tests.conftest import ROOT, ServerProcess, free_port, stop_process

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PRIVATE_DB = "tjwater_resilience"
RESULTS = ROOT / "var" / "resilience" / "results.json"
DEV_ISSUER = "http://127.0.0.1:8000/dev-issuer"  # settings.TJWATER_DEV_ISSUER_ID
HOST_CLIENT = "tjwater-agent-mcp"
SCOPES = ["mcp.query", "mcp.catalog.read", "mcp.context.bind"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/resilience is part of the resilience suite (``-m resilience``)."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).is_relative_to(here):
            item.add_marker(pytest.mark.resilience)


def _as_postgres(*args: str, prefix: Sequence[str] = (), timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL server binary as the ``postgres`` user (the server refuses to run as root), after
    ``prefix`` (``ip netns exec NAME``: inside a network namespace)."""
    return subprocess.run(
        [*prefix, "runuser", "-u", "postgres", "--", *args], check=True, capture_output=True, text=True, timeout=timeout
    )


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL 15 cluster on ``host``:``port``, data under ``root`` (deleted at the end);
    ``exec_prefix`` runs it elsewhere (a network namespace of tests/support/netns.py)."""

    root: Path
    port: int
    dbname: str = PRIVATE_DB
    host: str = "127.0.0.1"
    exec_prefix: tuple[str, ...] = ()

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        """``DATABASE_URL`` for servers, workers and scripts using this cluster."""
        return f"postgis://postgres@{self.host}:{self.port}/{self.dbname}"

    def init(self) -> None:
        _as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        if self.host != "127.0.0.1":  # clients on the host's own subnet (the namespaces' private bridge)
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses={self.host} -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        _as_postgres(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
            prefix=self.exec_prefix,
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast`` disconnects every client (their transactions abort), as an operator's restart does."""
        _as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", prefix=self.exec_prefix
        )

    def restart(self) -> None:
        self.stop()
        self.start()

    def connect(self, dbname: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, user="postgres", dbname=dbname or self.dbname, connect_timeout=3, **kwargs
        )

    def ready(self) -> bool:
        try:
            with self.connect(autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url}


@dataclass
class PrivateRedis:
    """A ``redis-server`` of our own on ``host``:``port`` (no persistence), stoppable and restartable;
    ``exec_prefix`` runs it elsewhere (a network namespace of tests/support/netns.py)."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"
    exec_prefix: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                *self.exec_prefix,
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                self.host,
                # No password on a throwaway instance: reached over a namespace's private network too.
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--logfile",
                str(self.root / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"private redis-server on {self.host}:{self.port} did not start")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=2)

    def ready(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


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


@contextlib.contextmanager
def postgres_cluster(
    host: str = "127.0.0.1", port: int = 0, exec_prefix: tuple[str, ...] = ()
) -> Iterator[PrivatePostgres]:
    """A private, migrated PostGIS database on its own PostgreSQL 15 cluster on ``host``:``port`` (default: a
    free loopback port), stopped and deleted afterwards."""
    root = Path(tempfile.mkdtemp(prefix="tjwater-resil-pg-", dir="/tmp"))
    shutil.chown(root, "postgres", "postgres")
    cluster = PrivatePostgres(root=root, port=port or free_port(), host=host, exec_prefix=exec_prefix)
    cluster.init()
    cluster.start()
    try:
        with cluster.connect(dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{cluster.dbname}"')
        with cluster.connect(autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": cluster.url},
            check=True,
            timeout=300,
        )
        yield cluster
    finally:
        try:
            cluster.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped by a failed test
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private, migrated PostGIS database on its own PostgreSQL 15 cluster (session-wide; tests may
    stop and restart it but must leave it running)."""
    with postgres_cluster() as cluster:
        yield cluster


@contextlib.contextmanager
def redis_server(host: str = "127.0.0.1", port: int = 0, exec_prefix: tuple[str, ...] = ()) -> Iterator[PrivateRedis]:
    """A private Redis on ``host``:``port`` (default: a free loopback port), stopped afterwards."""
    root = Path(tempfile.mkdtemp(prefix="tjwater-resil-redis-", dir="/tmp"))
    server = PrivateRedis(root=root, port=port or free_port(), host=host, exec_prefix=exec_prefix)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    """A private Redis (session-wide; tests may stop and restart it but must leave it running)."""
    with redis_server() as server:
        yield server


def launch_server(
    env: dict[str, str], logs: Path, port: int | None = None, host: str = "127.0.0.1", exec_prefix: Sequence[str] = ()
) -> ServerProcess:
    """Start ``uvicorn tjwater.asgi:application`` with ``env`` on ``host``:``port`` (default: a free
    loopback port), after ``exec_prefix`` (``ip netns exec NAME``: inside a network namespace), and wait
    until it answers ``/healthz``. Generous: on a loaded 2-core machine importing Django and the SDK
    alone can take half a minute: 90 s here (tests/conftest.py's ``start_server`` waits 60 s)."""
    port = port or free_port()
    env = {"TJWATER_MCP_RESOURCE_URI": f"http://{host}:{port}/mcp", "PYTHONFAULTHANDLER": "1", **env}
    log_path = logs / f"uvicorn-{host}-{port}.log"
    process = subprocess.Popen(
        [*exec_prefix, sys.executable, "-m", "uvicorn", "tjwater.asgi:application", "--host", host, "--port", str(port)]
        + ["--lifespan", "on", "--no-access-log"],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = ServerProcess(url=f"http://{host}:{port}", port=port, process=process, log_path=log_path)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"uvicorn exited early:\n{server.log()}")
        try:
            httpx2.get(f"{server.url}/healthz", timeout=5)
            return server
        except httpx2.TransportError:
            time.sleep(0.2)
    process.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the log
    time.sleep(1)
    raise RuntimeError(f"uvicorn did not answer within 90 s:\n{server.log()}")


@dataclass
class Processes:
    """Servers and workers started by one test against the private stack; all stopped afterwards."""

    postgres: PrivatePostgres
    redis: PrivateRedis
    logs: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def server(
        self, port: int | None = None, host: str = "127.0.0.1", exec_prefix: Sequence[str] = (), **extra_env: str
    ) -> ServerProcess:
        """A real uvicorn process on ``host``:``port`` (default: a free loopback port) using the private
        PostgreSQL and Redis (``exec_prefix``: see ``launch_server``)."""
        env = private_env(self.postgres, self.redis, **extra_env)
        server = launch_server(env, self.logs, port, host, exec_prefix)
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


@pytest.fixture
def processes(private_postgres: PrivatePostgres, private_redis: PrivateRedis, tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(postgres=private_postgres, redis=private_redis, logs=tmp_path)
    yield procs
    procs.stop_all()
    # Whatever a test did to the dependencies, the next one starts with both up.
    if not private_redis.ready():
        private_redis.start()
    if not private_postgres.ready():
        private_postgres.start()


# The world of the fault and tenant tests: two tenants whose projects both hold EPANET Net1, every
# junction carrying a tenant-identifying elevation, and the principals the load loops call as.
TENANT_ELEVATION = {"resil-alice": 1111.25, "resil-bob": 2222.75}
LOAD_PRINCIPALS = ["resil-load0", "resil-load1", "resil-load2", "resil-load3"]


@dataclass(frozen=True)
class World:
    projects: dict[str, int]
    principals: dict[str, int]


def seed_world(postgres: PrivatePostgres, redis_server: PrivateRedis) -> World:
    """The two tenants' projects and principals in ``postgres`` (``run_seed``)."""
    alice_members = ["resil-alice", "resil-slow", *LOAD_PRINCIPALS]
    spec = {
        "projects": [{"slug": slug, "junction_elevation": elev} for slug, elev in TENANT_ELEVATION.items()],
        "members": [{"issuer": DEV_ISSUER, "subject": s, "project": "resil-alice"} for s in alice_members]
        + [{"issuer": DEV_ISSUER, "subject": "resil-bob", "project": "resil-bob"}],
    }
    created = run_seed(postgres, redis_server, spec)
    return World(projects=created["projects"], principals=created["principals"])


@pytest.fixture(scope="session")
def world(private_postgres: PrivatePostgres, private_redis: PrivateRedis) -> World:
    return seed_world(private_postgres, private_redis)


def dev_token(subject: str) -> str:
    """A dev-issuer token (the servers trust the same key file, tests/settings.py's data dir)."""
    from contexts import dev_issuer

    return dev_issuer.mint_token(subject=subject, client_id=HOST_CLIENT, scopes=SCOPES, ttl_s=1800)


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


@pytest.fixture(scope="session")
def figures() -> Figures:
    return Figures(RESULTS)
