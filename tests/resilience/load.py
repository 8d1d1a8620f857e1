"""A bounded load loop over real HTTP (loopback only) and the judgement of every answer it gets.

``LoadRun(probes, callers)`` runs ``callers`` concurrent asyncio callers for a fixed duration, each
sending real ``tools/call`` POSTs (or context-API binds) through its own ``httpx2.AsyncClient``, while a
fault script runs beside them and marks when the fault started and when the dependency came back.
Every answer is classified:

- ``ok``: HTTP 200, a JSON-RPC result without ``isError`` whose structured content the probe's
  ``expect`` accepts (right element id, the tenant's own values — no empty stand-in);
- ``retryable:<CODE>``: an ``isError`` result carrying a documented retryable code with
  ``retryable: true`` (or the context API's JSON 503 with such a code);
- ``http_503``: the MCP endpoint's 503 (authentication temporarily unavailable);
- ``transport``: no HTTP answer because the server process is gone (honest, never a success);
- ``VIOLATION:…``: anything else — a success with wrong or empty data, a non-retryable error code
  (``INTERNAL_ERROR``), another HTTP status, a JSON-RPC error, a stack trace or SQL in the body, or no
  answer within the call timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from tests.support.mcp_http import rpc_body, rpc_headers

RETRYABLE_CODES = frozenset({"DATA_SOURCE_UNAVAILABLE", "RATE_LIMITED", "QUERY_TIMEOUT"})
LEAK_MARKERS = ("Traceback", "psycopg", "SELECT ", 'File "')
VIOLATION = "VIOLATION:"
# httpx2 logs every request at INFO: thousands of lines per run, and pytest replays them on a failure.
logging.getLogger("httpx2").setLevel(logging.WARNING)

Expect = Callable[[dict[str, Any]], str | None]


@dataclass(frozen=True)
class Probe:
    """One kind of call and the answer it must get when it succeeds.

    ``tool`` None means a context bind (``POST /api/v1/mcp-query-contexts`` for ``project``)."""

    label: str
    url: str
    bearer: str
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    expect: Expect = lambda _structured: None
    project: str = ""


@dataclass(frozen=True)
class Sample:
    probe: str
    start: float  # seconds since the run started
    elapsed: float
    outcome: str

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def _leak(text: str) -> str | None:
    return next((marker for marker in LEAK_MARKERS if marker in text), None)


def _rpc_message(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(events[-1]))
    return dict(response.json())


def classify_tool(response: httpx2.Response, expect: Expect) -> str:
    leak = _leak(response.text)
    if leak:
        return f"{VIOLATION}leak:{leak.strip()}"
    if response.status_code == 503:
        return "http_503"
    if response.status_code != 200:
        return f"{VIOLATION}http_{response.status_code}"
    try:
        message = _rpc_message(response)
    except (ValueError, IndexError):
        return f"{VIOLATION}unparseable_body"
    if "error" in message:
        return f"{VIOLATION}rpc_error:{message['error'].get('code')}"
    result = message.get("result") or {}
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        return f"{VIOLATION}no_structured_content"
    if result.get("isError"):
        code = structured.get("code")
        if code in RETRYABLE_CODES and structured.get("retryable") is True:
            return f"retryable:{code}"
        return f"{VIOLATION}error:{code}:retryable={structured.get('retryable')}"
    problem = expect(structured)
    return "ok" if problem is None else f"{VIOLATION}wrong_success:{problem}"


def classify_bind(response: httpx2.Response, project: str) -> str:
    leak = _leak(response.text)
    if leak:
        return f"{VIOLATION}leak:{leak.strip()}"
    try:
        body = response.json()
    except ValueError:
        return f"{VIOLATION}http_{response.status_code}_not_json"
    if response.status_code == 201:
        handle = body.get("context_handle")
        if body.get("project") == project and isinstance(handle, str) and len(handle) >= 16:
            return "ok"
        return f"{VIOLATION}wrong_success:bind"
    code = body.get("code") if isinstance(body, dict) else None
    if response.status_code == 503 and code in RETRYABLE_CODES and body.get("retryable") is True:
        return f"retryable:{code}"
    return f"{VIOLATION}http_{response.status_code}:{code}"


async def send(client: httpx2.AsyncClient, probe: Probe, request_id: int, url: str = "") -> httpx2.Response:
    url = url or probe.url
    if probe.tool is None:
        return await client.post(
            f"{url}/api/v1/mcp-query-contexts",
            json={"project": probe.project, "session_id": f"load-{request_id}", "purpose": "ordinary_chat"},
            headers={"Authorization": f"Bearer {probe.bearer}"},
        )
    return await client.post(
        f"{url}/mcp",
        json=rpc_body("tools/call", {"name": probe.tool, "arguments": probe.arguments}, request_id=request_id),
        headers=rpc_headers("tools/call", probe.bearer, name=probe.tool),
    )


async def call_once(client: httpx2.AsyncClient, probe: Probe, request_id: int, timeout_s: float, url: str = "") -> str:
    try:
        response = await asyncio.wait_for(send(client, probe, request_id, url), timeout_s)
    except TimeoutError:
        return f"{VIOLATION}no_answer_within_{timeout_s:g}s"
    except (httpx2.ConnectError, httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError):
        return "transport"
    except httpx2.TimeoutException:
        return f"{VIOLATION}no_answer_within_{timeout_s:g}s"
    if probe.tool is None:
        return classify_bind(response, probe.project)
    return classify_tool(response, probe.expect)


async def once_each(probes: list[Probe], timeout_s: float = 60.0) -> list[str]:
    """One call per probe, all at once (a warm-up, or a spot check); the outcomes in probe order."""
    async with httpx2.AsyncClient(timeout=timeout_s + 5) as client:
        return list(await asyncio.gather(*(call_once(client, p, n, timeout_s) for n, p in enumerate(probes))))


class LoadRun:
    """``callers`` concurrent callers for ``duration_s``, caller ``i`` sending ``probes[i % len(probes)]``
    again and again; a fault ``script`` runs beside them and calls ``mark(name)`` at its milestones."""

    def __init__(
        self, probes: list[Probe], *, callers: int, call_timeout_s: float = 15.0, pause_s: float = 0.05
    ) -> None:
        self.probes = probes
        self.callers = callers
        self.call_timeout_s = call_timeout_s
        self.pause_s = pause_s  # between one caller's calls: bounded load on a shared machine
        self.samples: list[Sample] = []
        self.marks: dict[str, float] = {}
        self.routes: dict[str, str] = {}  # a probe's server URL → where its calls go now (a restarted server)
        self._t0 = 0.0
        self._ids = 0

    def now(self) -> float:
        return time.monotonic() - self._t0

    def mark(self, name: str) -> None:
        self.marks[name] = round(self.now(), 3)

    async def _caller(self, index: int, stop: asyncio.Event) -> None:
        probe = self.probes[index % len(self.probes)]  # one probe per caller: predictable concurrency
        async with httpx2.AsyncClient(timeout=self.call_timeout_s + 5) as client:
            while not stop.is_set():
                self._ids += 1
                started = self.now()
                url = self.routes.get(probe.url, probe.url)
                outcome = await call_once(client, probe, self._ids, self.call_timeout_s, url)
                self.samples.append(Sample(probe.label, round(started, 3), round(self.now() - started, 3), outcome))
                await asyncio.sleep(self.pause_s)

    async def run(
        self, duration_s: float, script: Callable[[LoadRun], Awaitable[None]] | None = None, *, tail_s: float = 8.0
    ) -> None:
        """Run for ``duration_s``, and at least ``tail_s`` after the script finished (the recovery is
        observed even when the fault took longer than planned on a busy machine)."""
        self._t0 = time.monotonic()
        stop = asyncio.Event()
        callers = [asyncio.create_task(self._caller(i, stop)) for i in range(self.callers)]
        try:
            if script is not None:
                await script(self)
            remaining = max(duration_s - self.now(), tail_s if script is not None else 0.0)
            if remaining > 0:
                await asyncio.sleep(remaining)
        finally:
            stop.set()
            await asyncio.gather(*callers)

    # --- figures ---------------------------------------------------------------------------------

    def select(self, probe_prefix: str = "", start: float = 0.0, end: float = float("inf")) -> list[Sample]:
        return sorted(
            (s for s in self.samples if s.probe.startswith(probe_prefix) and start <= s.start < end),
            key=lambda s: s.start,
        )

    def violations(self, probe_prefix: str = "") -> list[Sample]:
        return [s for s in self.select(probe_prefix) if s.outcome.startswith(VIOLATION)]

    def outcomes(self, probe_prefix: str = "", start: float = 0.0, end: float = float("inf")) -> dict[str, int]:
        return dict(Counter(s.outcome for s in self.select(probe_prefix, start, end)))

    def recovery_s(self, after_mark: str, probe_prefix: str = "") -> float | None:
        """Seconds from ``after_mark`` until the first call from which every later call succeeded;
        None when the last call after the mark still failed (or there was none)."""
        origin = self.marks[after_mark]
        after = self.select(probe_prefix, start=origin)
        if not after or not after[-1].ok:
            return None
        failures = [s for s in after if not s.ok]
        if not failures:
            return 0.0
        first_good = next(s for s in after if s.start > failures[-1].start)
        return round(max(0.0, first_good.start - origin), 3)

    def sustained_ok_s(self, probe_prefix: str = "") -> float:
        """How long the tail of the run stayed all-ok (the recovery is real, not one lucky call)."""
        selected = self.select(probe_prefix)
        failures = [s for s in selected if not s.ok]
        last_end = max((s.start + s.elapsed for s in selected), default=0.0)
        if not failures:
            return round(last_end, 3)
        good = [s for s in selected if s.start > failures[-1].start]
        return round(last_end - good[0].start, 3) if good else 0.0

    def max_latency_s(self, probe_prefix: str = "", start: float = 0.0, end: float = float("inf")) -> float:
        return max((s.elapsed for s in self.select(probe_prefix, start, end)), default=0.0)

    def report(self, probe_prefix: str = "") -> dict[str, Any]:
        phases: dict[str, Any] = {}
        names = sorted(self.marks, key=self.marks.__getitem__)
        bounds = [0.0, *(self.marks[n] for n in names), float("inf")]
        labels = ["before_" + names[0], *names] if names else ["run"]
        for label, start, end in zip(labels, bounds, bounds[1:], strict=False):
            phases[label] = {
                "outcomes": self.outcomes(probe_prefix, start, end),
                "max_latency_s": self.max_latency_s(probe_prefix, start, end),
            }
        return {
            "calls": len(self.select(probe_prefix)),
            "outcomes": self.outcomes(probe_prefix),
            "marks_s": dict(self.marks),
            "phases": phases,
            "violations": len(self.violations(probe_prefix)),
            "violation_examples": sorted({s.outcome for s in self.violations(probe_prefix)})[:10],
        }
