"""Per-call CPU of the operations hooks (issue 24), in-process: the ``Observe`` middleware around a
``tools/call`` that does nothing, and the tracing decorators while tracing is off, against the bare
call. Run in-memory and with ``PROMETHEUS_MULTIPROC_DIR`` (the values then live in mmap'ed files):

    PYTHONPATH=. DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python tests/mcp_app/bench_metrics.py
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) PYTHONPATH=. DJANGO_SETTINGS_MODULE=tests.settings \
        .venv/bin/python tests/mcp_app/bench_metrics.py

Numbers go to mcp_app/README.md "Measuring"."""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import django

django.setup()

from mcp_app.metrics import Observe  # noqa: E402
from tjwater import telemetry  # noqa: E402

N = 200_000
RESULT = {"content": [], "structuredContent": {"data": {}}, "isError": False}


async def call_next(ctx: object) -> dict[str, object]:
    return RESULT


@telemetry.traced("x")
async def traced_call_next(ctx: object) -> dict[str, object]:
    return RESULT


async def main() -> None:
    observe = Observe(methods=["tools/call"], tools=["get_element_properties"])
    ctx = SimpleNamespace(method="tools/call", params={"name": "get_element_properties", "arguments": {}})

    async def bare() -> None:
        for _ in range(N):
            await call_next(ctx)

    async def observed() -> None:
        for _ in range(N):
            await observe(ctx, call_next)  # type: ignore[arg-type]

    async def decorated() -> None:
        for _ in range(N):
            await traced_call_next(ctx)

    results = {}
    for name, fn in (("bare", bare), ("observe", observed), ("traced-off", decorated)):
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            await fn()
            best = min(best, time.process_time() - started)
        results[name] = best / N * 1e6
    mode = "multiprocess" if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else "in-memory"
    print(
        f"{mode}: bare {results['bare']:.2f} µs, Observe +{results['observe'] - results['bare']:.2f} µs per call, "
        f"one traced decorator (tracing off) +{results['traced-off'] - results['bare']:.2f} µs"
    )


asyncio.run(main())
