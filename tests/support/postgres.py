"""Private PostgreSQL and Redis servers that a test may stop, restart and kill: the shared PostgreSQL
(5432) and Redis (6379) are never touched.

``PrivatePostgres.create()`` is a throwaway cluster under /tmp (``initdb`` as the ``postgres`` OS user,
trust auth on loopback, its own port, fsync off); ``PrivateRedis.create()`` a ``redis-server --save ""``
on its own port. Both are removed with ``remove()``. Used by tests/e2e/test_hardening.py (a copy of
the test database) and the resilience suite (a migrated database of its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from tests.support.servers import free_port, stop_process


def pg_bin(name: str) -> str:
    """A PostgreSQL program: on the PATH, else the newest under /usr/lib/postgresql (Debian)."""
    found = shutil.which(name)
    if found:
        return found
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    raise RuntimeError(f"{name} not found")


def as_postgres(*args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL program as the ``postgres`` OS user when we are root (the server refuses root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *args], check=True, capture_output=True, text=True, timeout=timeout, **kwargs)


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1:``port``, data under ``root`` (deleted by ``remove``)."""

    root: Path
    port: int
    dbname: str = "postgres"

    @classmethod
    def create(cls, dbname: str = "postgres", prefix: str = "tjwater-pg-") -> PrivatePostgres:
        """A new, initialised (not started) cluster on a free port."""
        root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        cluster = cls(root=root, port=free_port(), dbname=dbname)
        as_postgres(pg_bin("initdb"), "-D", str(cluster.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        return cluster

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        """``DATABASE_URL`` for servers, workers and scripts using this cluster's ``dbname``."""
        return f"postgis://postgres@127.0.0.1:{self.port}/{self.dbname}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        as_postgres(
            pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60", "-o", options, "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast`` disconnects every client (their transactions abort), as an operator's restart does."""
        as_postgres(pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def connect(self, dbname: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname or self.dbname, connect_timeout=3, **kwargs
        )

    def create_database(self) -> None:
        """Create ``dbname`` (empty) in the running cluster."""
        with self.connect(dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')

    def ready(self) -> bool:
        try:
            with self.connect(autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url}

    def remove(self) -> None:
        """Stop the cluster at once (if it still runs) and delete its files."""
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped (by the test, or a failed one)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PrivateRedis:
    """A ``redis-server`` of our own on 127.0.0.1:``port`` (no persistence), stoppable and restartable."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def create(cls, prefix: str = "tjwater-redis-") -> PrivateRedis:
        """A new (not started) server on a free port."""
        return cls(root=Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")), port=free_port())

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", str(self.root), "--logfile", str(self.root / "redis.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"private redis-server on port {self.port} did not start")

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

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _test_database(dbname: str | None = None) -> psycopg.Connection[Any]:
    """An autocommit connection of its own to the shared test PostgreSQL (``dbname``: the test database)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or "postgres",
        dbname=dbname or db["NAME"],
        autocommit=True,
    )


def active_sleeps(dsn_dbname: str) -> int:
    """Backends currently running the test-only pg_sleep query."""
    with _test_database(dsn_dbname) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%%' "
            "AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def backend_activity(pid: int) -> tuple[str, str] | None:
    """``(state, query)`` of backend ``pid`` in ``pg_stat_activity`` (None: no such backend), read through a
    connection of its own, like the readiness check reads it."""
    with _test_database() as conn:
        row = conn.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return (str(row[0]), str(row[1])) if row else None


def terminate_query_connections(dbname: str) -> int:
    """What a PostgreSQL restart does to the MCP query pool: every one of its backends is gone."""
    with _test_database(dbname) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'tjwater-mcp-query' AND datname = %s",
            [dbname],
        ).fetchone()
    return int(row[0]) if row else 0
