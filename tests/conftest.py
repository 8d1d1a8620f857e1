"""Shared fixtures: real PostGIS, real Redis, and real uvicorn processes for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any, django_db_keepdb: bool) -> Iterator[None]:
    """Always create the test database, even when no collected test is marked ``django_db``.

    pytest-django sets up only the aliases that some collected test marks; end-to-end tests reach the
    database through uvicorn processes and committed rows instead, so a run of only those files would
    otherwise point the servers at the developer's own database."""
    from django.test.utils import setup_databases, teardown_databases

    if str(settings.DATABASES["default"]["NAME"]).startswith("test_"):
        yield
        return
    with django_db_blocker.unblock():
        # serialized_aliases=set(): nothing here uses serialized rollback; serializing the demo's tables
        # would take minutes.
        config = setup_databases(
            verbosity=0, interactive=False, aliases={"default"}, keepdb=django_db_keepdb, serialized_aliases=set()
        )
    yield
    if not django_db_keepdb:
        with django_db_blocker.unblock():
            teardown_databases(config, verbosity=0)


@pytest.fixture(scope="session")
def demo_loaded(django_db_setup: None, django_db_blocker: Any) -> None:
    """The demo utility (``tianjin-demo``, ``demo-b``, alice/bob/carol/svc-worker) committed in the test
    database once per session, so uvicorn processes see it too. Tests using it must not flush tables
    (no ``transaction=True``)."""
    from queries.demo.seed import ensure_demo_loaded

    with django_db_blocker.unblock():
        ensure_demo_loaded()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@dataclass
class ServerProcess:
    """A real uvicorn process serving ``tjwater.asgi:application`` against the test database."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)


def subprocess_database_url() -> str:
    """The URL of the test database, for processes started by the tests."""
    db = settings.DATABASES["default"]
    host = db.get("HOST") or "127.0.0.1"
    return f"postgis://{db.get('USER') or 'postgres'}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture(scope="session")
def start_server(
    django_db_setup: None, django_db_blocker: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., ServerProcess]]:
    """Start uvicorn processes on free ports against the (committed) test database.

    ``start_server(**env)`` returns a running server; extra keyword arguments become environment
    variables of that process. All servers are stopped at the end of the session.
    """
    started: list[ServerProcess] = []
    logs = tmp_path_factory.mktemp("uvicorn")

    def _start(**extra_env: str) -> ServerProcess:
        port = free_port()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": subprocess_database_url(),
            "TJWATER_MCP_RESOURCE_URI": f"http://127.0.0.1:{port}/mcp",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        log_path = logs / f"uvicorn-{port}.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tjwater.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--lifespan",
                "on",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        server = ServerProcess(url=f"http://127.0.0.1:{port}", port=port, process=process, log_path=log_path)
        started.append(server)
        # 60 s: a loaded 2-core machine (CI next to other jobs) can take half a minute to import and start.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"uvicorn exited early:\n{server.log()}")
            try:
                httpx2.get(f"{server.url}/healthz", timeout=2)
                return server
            except httpx2.TransportError:
                time.sleep(0.1)
        server.stop()
        raise RuntimeError(f"uvicorn did not answer within 60 s:\n{server.log()}")

    yield _start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def live_server_url(start_server: Callable[..., ServerProcess]) -> str:
    """One shared server with the default test settings."""
    return start_server().url


@pytest.fixture
def test_redis() -> Iterator[redis.Redis]:
    """The reserved test Redis database, emptied before and after the test."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()
