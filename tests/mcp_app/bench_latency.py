"""Latency measurement (not collected by pytest): N sequential ``tools/call get_element_properties`` with
the SDK client against a running server, printing the median and p90/p99 in milliseconds. Every call
carries a real context handle (create one with ``POST /api/v1/mcp-query-contexts``; see
mcp_app/README.md "Measuring").

    .venv/bin/python tests/mcp_app/bench_latency.py http://127.0.0.1:8765/mcp "$TOKEN" "$HANDLE" 200 junction 10
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, bearer: str, context_handle: str, n: int, element_type: str, element_id: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30)
    async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
        args = {"context_handle": context_handle, "element_type": element_type, "element_id": element_id}
        for _ in range(10):  # warm-up (also lists tools once for output validation)
            await client.call_tool("get_element_properties", args)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            result = await client.call_tool("get_element_properties", args)
            samples.append((time.perf_counter() - t0) * 1000)
            assert not result.is_error, result.structured_content
    samples.sort()
    print(
        f"n={n} median={statistics.median(samples):.2f} ms p90={samples[int(n * 0.9) - 1]:.2f} ms "
        f"p99={samples[int(n * 0.99) - 1]:.2f} ms min={samples[0]:.2f} ms"
    )


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
