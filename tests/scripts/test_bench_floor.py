"""The bench's floor machinery (``scripts/bench_floor.py``) captures the statements a tool really runs and
times exactly those — so a scenario's floor cannot silently measure nothing. No speed is asserted."""

from __future__ import annotations

import pytest

from queries.models import Junction
from scripts import bench_floor

pytestmark = pytest.mark.django_db

DEMO = "tianjin-demo"


def test_list_elements_floor_replays_its_count_and_page(demo_loaded: None) -> None:
    scope = bench_floor.scope_for(DEMO, "alice")
    captured = bench_floor.capture("list_elements", scope, {"element_type": "junction", "limit": 7, "offset": 3})

    assert len(captured.statements) == 2  # the total and the page, as the service's pinned query count
    assert captured.round_trips == [2]  # yielded together: one pipeline, as the MCP driver sends them
    (count_sql, count_params), (page_sql, page_params) = captured.statements
    assert "COUNT(" in count_sql.upper() and '"queries_junction"' in count_sql
    assert scope.project_id in count_params
    assert '"queries_junction"' in page_sql and "ORDER BY" in page_sql.upper()
    # 7 rows and one more to tell has_more (read with the count: neither waits for the other), from offset 3
    assert scope.project_id in page_params and 8 in page_params and 3 in page_params
    data = captured.structured["data"]
    first = (
        Junction.objects.filter(project_id=scope.project_id)
        .order_by("element_id")
        .values_list("element_id", flat=True)[3]
    )
    assert [item["element_id"] for item in data["items"]][0] == first
    assert len(data["items"]) == 7

    with bench_floor.connect() as conn:
        floor = bench_floor.measure(captured, conn, runs=3, warmup=1)
    assert floor.statements == 2
    assert floor.p50_ms > 0 and floor.sql_ms > 0 and floor.json_ms > 0
    assert floor.serialiser in bench_floor.SERIALISERS


def test_a_refused_call_is_not_a_floor(demo_loaded: None) -> None:
    from contexts.errors import NotFound

    scope = bench_floor.scope_for(DEMO, "alice")
    with pytest.raises(NotFound):
        bench_floor.capture("get_element_properties", scope, {"element_type": "pipe", "element_id": "no-such-pipe"})


def test_a_maximal_page_floor_reads_what_the_call_reads(demo_loaded: None) -> None:
    """Under the inline budget the call reads only the rows that can fit (``queries.fitting``): the floor
    replays that statement, not a 500-row read the call never makes."""
    from queries.fitting import InlineBudget, rows_to_fetch
    from queries.services.network import _least_item_bytes

    scope = bench_floor.scope_for(DEMO, "alice")
    captured = bench_floor.capture("list_elements", scope, {"element_type": "junction", "limit": 500})
    with InlineBudget(12_000):
        cap = rows_to_fetch(500, _least_item_bytes("junction"))
    assert cap < 500
    (_, _), (_, page_params) = captured.statements
    assert cap in page_params and 500 not in page_params
    assert captured.structured["truncated"] is True


def test_the_beyond_a_call_ratio_takes_off_the_fixed_cost_pair_by_pair() -> None:
    from scripts import bench

    rows = [
        {"scenario": bench.CALL_COST_SCENARIO, "floor_ms": 0.2, "call_probe_p50_ms": 2.5, "paired_excess_ms": 0.0},
        {"scenario": "a page", "floor_ms": 4.0, "call_probe_p50_ms": 2.5, "paired_excess_ms": 7.8},
        {"scenario": "slower phase", "floor_ms": 4.0, "call_probe_p50_ms": 4.2, "paired_excess_ms": 7.8},
        {"scenario": "faster than the probe", "floor_ms": 0.1, "call_probe_p50_ms": 2.5, "paired_excess_ms": -0.4},
        {"scenario": "refused", "status": "not in the catalog"},
    ]
    bench.add_beyond_call_cost(rows)
    assert rows[0]["x_floor_beyond_call"] == 1.0  # the probe paired with itself: its floor and nothing else
    assert rows[1]["x_floor_beyond_call"] == 2.0  # (7.8 + 0.2) / 4.0
    assert rows[1]["call_cost_ms"] == 2.3 and rows[2]["call_cost_ms"] == 4.0
    assert rows[2]["x_floor_beyond_call"] == 2.0  # a slower machine during the pairs changes the call, not the ratio
    assert rows[3]["x_floor_beyond_call"] == 0.0 and "x_floor_beyond_call" not in rows[4]
    alone = [{"scenario": "a page", "floor_ms": 4.0, "call_probe_p50_ms": 2.5, "paired_excess_ms": 7.8}]
    bench.add_beyond_call_cost(alone)  # the call's floor not measured: nothing is made up
    assert "x_floor_beyond_call" not in alone[0]


def test_pairs_alternate_their_order_and_drop_a_pair_that_failed() -> None:
    """``drive_paired`` against a real HTTP server (aiohttp's) that answers like ``/mcp`` and records what it
    was asked: the probe and the scenario come back to back, in alternating order, and a pair whose scenario
    call failed is left out of both lists and counted."""
    import asyncio
    import json

    from aiohttp import web

    from scripts import bench

    asked: list[str] = []

    async def mcp(request: web.Request) -> web.Response:
        body = await request.json()
        name = body["params"]["name"]
        asked.append(name)
        if len(asked) == 3:  # pair 1 (scenario first): its scenario call fails
            result = {"isError": True, "structuredContent": {"code": "QUERY_TIMEOUT"}}
        else:
            result = {"structuredContent": {"name": name}}
        reply = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        frame = f"event: message\r\ndata: {json.dumps(reply)}\r\n\r\n"
        return web.Response(body=frame, content_type="text/event-stream")

    async def run() -> bench.Paired:
        app = web.Application()
        app.router.add_post("/mcp", mcp)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            probe = bench.Call("t", "probe", {})
            scenario = bench.Call("t", "scenario", {})
            return await bench.drive_paired(f"http://127.0.0.1:{port}/mcp", probe, scenario, 4)
        finally:
            await runner.cleanup()

    paired = asyncio.run(run())

    assert asked == ["probe", "scenario", "scenario", "probe", "probe", "scenario", "scenario", "probe"]
    assert len(paired.probe_ms) == len(paired.scenario_ms) == 3
    assert paired.errors == {"scenario:QUERY_TIMEOUT": 1}
    assert all(ms > 0 for ms in paired.probe_ms + paired.scenario_ms)
    expected = sorted(s - p for p, s in zip(paired.probe_ms, paired.scenario_ms, strict=True))[1]
    assert paired.excess_ms() == expected
