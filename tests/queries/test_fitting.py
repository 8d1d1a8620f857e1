"""``queries.fitting`` (issue 25, "fetch only what fits"): under the MCP edge's inline budget a page builds
only up to one item past what can be returned, and the reply the inline cut makes of it (in place) is the
reply it makes of the whole page — in SI and in US units (presentation scales numbers after the items are
built)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import wntr

from contexts.models import Project
from mcp_app.inline import fit_inline
from queries.fitting import InlineBudget, fitting
from queries.importer.epanet import import_network
from queries.plan import run_sync
from queries.registry import tool_spec
from tests.queries.factories import service_scope

NET3 = Path(wntr.__file__).parent / "library" / "networks" / "Net3.inp"
MAX_BYTES = 12_000


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
