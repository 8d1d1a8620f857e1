"""The one launcher of server processes for the tests, the resilience suite and the benchmarks.

``launch`` starts ``uvicorn tjwater.asgi:application`` (or ``manage.py runserver``) on a port, its output
in a log file, and waits for it with one readiness probe and one deadline policy:

* ready: every uvicorn worker has logged its start-up (only counted for ``--workers N``, where one worker
  answering says nothing of the others), and ``GET /server-ready-probe`` gets an HTTP answer. That path is
  a 404 that needs no database, so a server whose database is down or hangs is still seen to be up;
* deadline: 90 s, plus 30 s per extra worker — a loaded 2-core machine (CI next to other jobs) can take
  half a minute to import Django and the SDK in one process; past it every thread's stack is dumped to
  the log (``PYTHONFAULTHANDLER`` and SIGABRT), the process is stopped and the log is in the error.

No pytest here: ``scripts/bench.py`` starts its server through this module.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx2

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_S = 90.0
EXTRA_WORKER_DEADLINE_S = 30.0
READY_PATH = "/server-ready-probe"
STARTED_LINE = "Application startup complete"


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
    """A running server process (uvicorn or runserver) on 127.0.0.1:``port``, its output in ``log_path``."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)

    def wait_for_line(self, text: str, timeout_s: float = 10.0) -> None:
        """A server writes its request line after the response has gone out: wait for it."""
        deadline = time.monotonic() + timeout_s
        while text not in self.log() and time.monotonic() < deadline:
            time.sleep(0.1)


def server_env(**extra: str) -> dict[str, str]:
    """This process's environment on the test settings (``extra`` wins)."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1", **extra}


def subprocess_database_url() -> str:
    """The URL of the test database, for processes started by the tests."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    host = db.get("HOST") or "127.0.0.1"
    return f"postgis://{db.get('USER') or 'postgres'}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


def launch(
    env: Mapping[str, str],
    log_dir: Path,
    *,
    port: int | None = None,
    kind: Literal["uvicorn", "runserver"] = "uvicorn",
    workers: int = 1,
    access_log: bool = False,
    prefix: Sequence[str] = (),
    log_name: str | None = None,
    new_session: bool = False,
) -> ServerProcess:
    """Start a server with environment ``env`` (complete: nothing of this process's is added) on ``port``
    (default: a free one) and return it once ready (see the module docstring).

    ``TJWATER_MCP_RESOURCE_URI`` defaults to this port's /mcp; ``prefix`` goes before the command (e.g.
    ``taskset -c 0``); ``new_session`` puts the server and its workers in a process group of their own."""
    port = port or free_port()
    env = {
        "TJWATER_MCP_RESOURCE_URI": f"http://127.0.0.1:{port}/mcp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        **env,
    }
    if kind == "uvicorn":
        command = [sys.executable, "-m", "uvicorn", "tjwater.asgi:application", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--lifespan", "on"]
        command += [] if access_log else ["--no-access-log"]
        command += ["--workers", str(workers)] if workers > 1 else []
    else:
        command = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    log_path = log_dir / (log_name or f"{kind}-{port}.log")
    process = subprocess.Popen(
        [*prefix, *command],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=new_session,
    )
    server = ServerProcess(url=f"http://127.0.0.1:{port}", port=port, process=process, log_path=log_path)
    wait_ready(server, workers=workers if kind == "uvicorn" else 1)
    return server


def wait_ready(server: ServerProcess, *, workers: int = 1) -> None:
    """The one readiness probe and deadline (see the module docstring); raises with the log if not met."""
    limit = START_DEADLINE_S + EXTRA_WORKER_DEADLINE_S * max(0, workers - 1)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited early:\n{server.log()[-8000:]}")
        if workers <= 1 or server.log().count(STARTED_LINE) >= workers:
            try:
                httpx2.get(f"{server.url}{READY_PATH}", timeout=5)
                return
            except httpx2.TransportError:
                pass
        time.sleep(0.2)
    server.process.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the log
    time.sleep(1)
    server.stop()
    raise RuntimeError(f"the server did not answer within {limit:.0f} s:\n{server.log()[-8000:]}")
