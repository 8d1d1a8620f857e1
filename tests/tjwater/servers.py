"""Server processes started with their request logging as configured by the command line — the
shared ``start_server`` fixture always passes ``--no-access-log`` — and with a start-up deadline
that tolerates a loaded machine (60 s). Readiness is a request that needs no database (a URL 404),
so a server whose database hangs is still seen to be up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2

from tests.conftest import ROOT, free_port, stop_process

START_DEADLINE_S = 60


@dataclass
class LoggingServer:
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
    """The environment of a server on the test settings (``extra`` wins)."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1", **extra}


def launch(kind: str, env: dict[str, str], log_dir: Path) -> LoggingServer:
    """Start ``uvicorn`` (its access log ON, its default) or ``manage.py runserver`` on a free port."""
    port = free_port()
    env = {**env, "TJWATER_MCP_RESOURCE_URI": f"http://127.0.0.1:{port}/mcp"}
    if kind == "uvicorn":
        command = [sys.executable, "-m", "uvicorn", "tjwater.asgi:application", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--lifespan", "on"]
    else:
        command = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    log_path = log_dir / f"{kind}-{port}.log"
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    server = LoggingServer(url=f"http://127.0.0.1:{port}", port=port, process=process, log_path=log_path)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited early:\n{server.log()}")
        try:
            httpx2.get(f"{server.url}/server-ready-probe", timeout=5)
            return server
        except httpx2.TransportError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{kind} did not answer within {START_DEADLINE_S} s:\n{server.log()}")
