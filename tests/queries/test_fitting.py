"""``queries.fitting`` (issue 25, "fetch only what fits"): under the MCP edge's inline budget a page builds
only up to one item past what can be returned, and the reply the inline cut makes of it (in place) is the
reply it makes of the whole page — in SI and in US units (presentation scales numbers after the items are
built)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
import wntr
from django.db import connection
from django.test.utils import CaptureQueriesContext

from contexts.models import Project
from contexts.scope import QueryScope
from mcp_app.inline import fit_inline
from queries.fitting import InlineBudget, fitting, least_json_bytes, model_skeleton, read_all_fetched, rows_to_fetch
from queries.importer.epanet import import_network
from queries.plan import run_sync
from queries.registry import tool_spec
from queries.schemas.scada import ScadaReadingPoint
from tests.queries.factories import dense_scada_project, service_scope

NET3 = Path(wntr.__file__).parent / "library" / "networks" / "Net3.inp"
MAX_BYTES = 12_000
DAY0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_without_a_budget_every_item_is_built() -> None:
    built: list[int] = []
    assert fitting(range(50), lambda n: built.append(n) or {"n": n}) == [{"n": n} for n in range(50)]
    assert built == list(range(50))


def test_under_a_budget_the_items_stop_one_past_it() -> None:
    rows = [{"name": "x" * 90} for _ in range(100)]  # ≈ 100 bytes of JSON each
    with InlineBudget(1000) as budget:
        items = fitting(rows, dict)
    assert len(items) == 10  # 9 × 101 bytes fit in 1000, the 10th goes past: it is built, the rest is not
    assert budget.stopped
    with InlineBudget(1_000_000) as roomy:
        assert len(fitting(rows, dict)) == 100
    assert not roomy.stopped
    with InlineBudget(1000) as exact:
        assert len(fitting(rows[:10], dict)) == 10  # past the budget with the last row: nothing left unbuilt
    assert not exact.stopped
    with InlineBudget(None) as unlimited:  # a tool whose items are read on with ``part``
        assert len(fitting(rows, dict)) == 100
    assert not unlimited.stopped
    assert len(fitting(rows, dict)) == 100  # the budget ends with its block


def _without_time(reply: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k != "queried_at"}


@pytest.mark.django_db
@pytest.mark.parametrize("unit_system", ["SI", "US"])
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_elements", {"element_type": "junction", "limit": 500}),
        ("list_elements", {"element_type": "pipe", "limit": 500}),
        (
            "query_nearby_elements",
            {"element_type": "junction", "radius_m": 5000, "limit": 100},  # around the first junction (below)
        ),
    ],
)
def test_a_page_built_under_the_budget_is_cut_exactly_like_the_whole_page(
    unit_system: str, tool: str, args: dict[str, Any]
) -> None:
    project = Project.objects.create(slug=f"net3-{unit_system.lower()}", name="Net3")
    import_network(project=project, inp_path=NET3, baseline_hours=0)
    Project.objects.filter(pk=project.pk).update(unit_system=unit_system)
    scope = dataclasses.replace(service_scope(project, {"webgis.view"}), unit_system=unit_system)
    spec = tool_spec(tool)
    if tool == "query_nearby_elements":
        first = run_sync(tool_spec("list_elements").invoke(scope, {"element_type": "junction", "limit": 1}))
        props = first.data.items[0].properties
        args = {**args, "center": [props["longitude"], props["latitude"]]}

    whole = run_sync(spec.invoke(scope, dict(args))).model_dump(mode="json")
    with InlineBudget(MAX_BYTES) as budget:
        built = run_sync(spec.invoke(scope, dict(args))).model_dump(mode="json")

    assert budget.stopped
    assert len(whole["data"]["items"]) > 90  # Net3's junctions (92) and pipes (117): far over 12 KB inline
    built_items, whole_items = len(built["data"]["items"]), len(whole["data"]["items"])
    cut_whole = fit_inline(whole, args, MAX_BYTES, page_holder=spec.page_holder)
    cut_built = fit_inline(built, args, MAX_BYTES, page_holder=spec.page_holder)
    # Fewer items built than the page holds, and more than the reply keeps (at least the one past it).
    assert len(cut_whole["data"]["items"]) < built_items < whole_items
    assert cut_whole["truncated"] is True and cut_whole["continue_with"]["offset"] > 0
    assert _without_time(cut_built) == _without_time(cut_whole)


def test_rows_to_fetch_reads_one_more_than_can_fit() -> None:
    assert rows_to_fetch(500, 100) == 500  # no budget: the whole page
    with InlineBudget(1000) as budget:
        assert rows_to_fetch(500, 100) == 11  # at most 10 items of ≥ 100 bytes fit in 1000
        assert rows_to_fetch(5, 100) == 5  # a page smaller than that: all of it
        assert read_all_fetched(7, 11, 500)  # the collection ended inside what was read
        assert not budget.stopped
        assert not read_all_fetched(11, 11, 500)  # it goes on: the page cannot fit whole
        assert budget.stopped
    with InlineBudget(None):
        assert rows_to_fetch(500, 100) == 500


def test_the_least_bytes_of_an_item_bound_every_item() -> None:
    assert least_json_bytes({"a": "long text", "b": {"c": [1, 2, 3]}}) == len('{"a":0,"b":{"c":0}}')
    assert least_json_bytes(model_skeleton(ScadaReadingPoint)) == len('{"device_id":0,"time":0,"value":0,"quality":0}')
    short = ScadaReadingPoint(device_id="", time=datetime(2026, 1, 1, tzinfo=UTC), value=None, quality="good")
    assert len(pydantic_core.to_json(short)) >= least_json_bytes(model_skeleton(ScadaReadingPoint))


def _dense_scada(points_per_device: int) -> QueryScope:
    return dense_scada_project("fitting-scada", 2, points_per_device, gap_every=97)


def _limits(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"].rsplit("LIMIT", 1)[1].split()[0] for q in captured.captured_queries if "LIMIT" in q["sql"]]


@pytest.mark.django_db
def test_a_series_reads_only_the_points_that_can_fit() -> None:
    """A window of 1200 points reads ≈ 260 of them under the budget, and the reply the edge makes of them
    is the reply it makes of all 1200 — the continuation included; the exact total stays."""
    scope = _dense_scada(600)
    spec = tool_spec("query_scada_readings")
    args = {
        "device_ids": ["D-00", "D-01"],
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-11-01T12:00:00Z",
        "field": "monitored_value",
    }
    whole = run_sync(spec.invoke(scope, dict(args))).model_dump(mode="json")
    with CaptureQueriesContext(connection) as captured, InlineBudget(MAX_BYTES) as budget:
        built = run_sync(spec.invoke(scope, dict(args))).model_dump(mode="json")
    cap = MAX_BYTES // least_json_bytes(model_skeleton(ScadaReadingPoint)) + 1
    assert budget.stopped and len(whole["data"]["items"]) == 1200 and len(built["data"]["items"]) == cap
    assert built["data"]["total"] == 1200 and built["data"]["has_more"] is True
    assert str(cap) in _limits(captured)  # the points statement asked SQL for no more
    cut_whole = fit_inline(whole, args, MAX_BYTES, page_holder=spec.page_holder)
    cut_built = fit_inline(built, args, MAX_BYTES, page_holder=spec.page_holder)
    assert cut_whole["truncated"] is True and cut_whole["continue_with"]["offset"] > 0
    assert _without_time(cut_built) == _without_time(cut_whole)


@pytest.mark.django_db
def test_a_series_that_ends_inside_the_rows_read_is_whole() -> None:
    scope = _dense_scada(60)  # 120 points: fewer than the rows that could fit
    args = {"device_ids": ["D-00", "D-01"], "start": "2026-11-01T00:00:00Z", "end": "2026-11-01T12:00:00Z"}
    with InlineBudget(MAX_BYTES) as budget:
        built = run_sync(tool_spec("query_scada_readings").invoke(scope, {**args, "field": "monitored_value"}))
    assert not budget.stopped
    assert (len(built.data.items), built.data.total, built.data.has_more) == (120, 120, False)


def test_a_stopped_page_is_built_whole_only_when_it_fits_after_all() -> None:
    budget = InlineBudget(100)
    assert not budget.build_whole(50)  # not stopped: the page was whole already
    budget.stopped = True
    assert budget.build_whole(100) and not budget.build_whole(101)
    assert not InlineBudget(None).build_whole(0)  # no budget: nothing was left unbuilt
