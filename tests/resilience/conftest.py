"""Fixtures of the resilience suite (issue 9): PRIVATE PostgreSQL and Redis instances the tests may stop,
restart and kill (tests/support/postgres.py), uvicorn servers and Celery workers against them, and the
figures file (tests/support/resilience.py).

The shared PostgreSQL (5432) and Redis (6379) are never touched: ``private_postgres`` is a throwaway
PostgreSQL cluster under /tmp (``initdb`` as user ``postgres``, trust auth on loopback, its own port,
PostGIS, migrated), ``private_redis`` a ``redis-server --save ""`` on its own port. Both are
session-scoped and reusable by any test under tests/resilience (``private_postgres.restart()``,
``.stop()``, ``.start()``; ``private_redis.stop()`` / ``.start()`` on the same port).

The harness's names stay importable from here too (re-exported from tests/support).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import PrivatePostgres, PrivateRedis
from tests.support.resilience import (
    DEV_ISSUER,
    HOST_CLIENT,
    LOAD_PRINCIPALS,
    PRIVATE_DB,
    RESULTS,
    SCOPES,
    TENANT_ELEVATION,
    Figures,
    Processes,
    World,
    bind,
    dev_token,
    launch_server,
    private_env,
    run_seed,
)
from tests.support.servers import ROOT, ServerProcess, free_port, stop_process

__all__ = [
    "DEV_ISSUER",
    "HOST_CLIENT",
    "LOAD_PRINCIPALS",
    "PRIVATE_DB",
    "RESULTS",
    "ROOT",
    "SCOPES",
    "TENANT_ELEVATION",
    "Figures",
    "PrivatePostgres",
    "PrivateRedis",
    "Processes",
    "ServerProcess",
    "World",
    "bind",
    "dev_token",
    "free_port",
    "launch_server",
    "private_env",
    "run_seed",
    "stop_process",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/resilience is part of the resilience suite (``-m resilience``)."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).is_relative_to(here):
            item.add_marker(pytest.mark.resilience)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private, migrated PostGIS database on its own PostgreSQL cluster (session-wide; tests may stop
    and restart it but must leave it running)."""
    cluster = PrivatePostgres.create(dbname=PRIVATE_DB, prefix="tjwater-resil-pg-")
    try:
        cluster.start()
        cluster.create_database()
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
        cluster.remove()


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    """A private Redis (session-wide; tests may stop and restart it but must leave it running)."""
    server = PrivateRedis.create(prefix="tjwater-resil-redis-")
    server.start()
    yield server
    server.remove()


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


@pytest.fixture(scope="session")
def world(private_postgres: PrivatePostgres, private_redis: PrivateRedis) -> World:
    alice_members = ["resil-alice", "resil-slow", *LOAD_PRINCIPALS]
    spec = {
        "projects": [{"slug": slug, "junction_elevation": elev} for slug, elev in TENANT_ELEVATION.items()],
        "members": [{"issuer": DEV_ISSUER, "subject": s, "project": "resil-alice"} for s in alice_members]
        + [{"issuer": DEV_ISSUER, "subject": "resil-bob", "project": "resil-bob"}],
    }
    created = run_seed(private_postgres, private_redis, spec)
    return World(projects=created["projects"], principals=created["principals"])


@pytest.fixture(scope="session")
def figures() -> Figures:
    return Figures(RESULTS)
