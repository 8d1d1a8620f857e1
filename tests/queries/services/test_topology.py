"""The topology family (issue 22) on the seeded demo: ``get_connected_elements`` against WNTR's own graph of
the demo's .inp (Net6), ``trace_flow_path`` against a breadth-first walk and a greedy dominant path
computed here from WNTR's link ends and the baseline table's flows; the stop reasons, the budget, the
refusals, and the permissions (in ``tools/list`` and callable for a caller with them, unknown to others)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from wntr.network import WaterNetworkModel

from contexts.errors import InvalidParameter, NotFound
from contexts.models import Project
from contexts.scope import QueryScope
from queries.importer.epanet import read_inp, wntr_network_path
from queries.models import LinkBaseline
from queries.registry import tools_by_name
from queries.services import topology
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, structured

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

AT = datetime(2026, 11, 1, 9, tzinfo=UTC)
NEW_TOOLS = ("get_connected_elements", "trace_flow_path", "rank_model_baseline", "rank_scada_deviation")


@cache
def net6() -> WaterNetworkModel:
    return read_inp(wntr_network_path("Net6.inp"))


def scope() -> QueryScope:
    return service_scope(Project.objects.get(slug=DEMO), {"webgis.view", "simulation.view"})


def link_ends(name: str) -> tuple[str, str]:
    link = net6().get_link(name)
    return link.start_node_name, link.end_node_name


def link_type(name: str) -> str:
    return {"Pipe": "pipe", "Pump": "pump"}.get(net6().get_link(name).link_type, "valve")


def node_type(name: str) -> str:
    return net6().get_node(name).node_type.lower()


def neighbourhood(start_links: list[str], start_nodes: list[str], node_hops: int, link_hops: int) -> dict[str, int]:
    """Element id → hop, breadth first over WNTR's undirected graph of the .inp."""
    graph = net6().to_graph().to_undirected()
    hops = {n: 0 for n in start_nodes}
    queue = deque(start_nodes)
    while queue:
        node = queue.popleft()
        if hops[node] >= node_hops:
            continue
        for other in graph.neighbors(node):
            if other not in hops:
                hops[other] = hops[node] + 1
                queue.append(other)
    found = dict(hops)
    for name, link in net6().links():
        near = [hops[n] for n in (link.start_node_name, link.end_node_name) if n in hops and hops[n] < link_hops]
        if near:
            found[name] = min(near) + 1
    for name in start_links:
        found.pop(name, None)
    return found


def test_connected_elements_match_wntr_graph(demo_loaded: None) -> None:
    # Question 4 of the demo: the pipes that meet LINK-1523's end nodes (depth 1 from the link).
    result = topology.get_connected_elements(scope=scope(), element_type="pipe", element_id="LINK-1523", depth=1)
    got = {i.element_id: i.hop for i in result.data.items}
    assert got == neighbourhood(["LINK-1523"], list(link_ends("LINK-1523")), 0, 1)
    assert {i.element_id for i in result.data.items if i.hop == 0} == set(link_ends("LINK-1523"))
    for item in result.data.items:
        if item.element_type in ("pipe", "pump", "valve"):
            assert (item.start_node_id, item.end_node_id) == link_ends(item.element_id)
            assert item.element_type == link_type(item.element_id)
        else:
            assert item.element_type == node_type(item.element_id)
    assert result.data.total == len(got) and result.origin == "model_network"
    # From a node, depth 1–3, and the pages of a walk are its slices in (hop, type, id) order.
    for depth in (1, 2, 3):
        whole = topology.get_connected_elements(
            scope=scope(), element_type="junction", element_id="JUNCTION-1304", depth=depth
        )
        expected = neighbourhood([], ["JUNCTION-1304"], depth, depth)
        expected.pop("JUNCTION-1304")
        assert {i.element_id: i.hop for i in whole.data.items} == expected
        keys = [(i.hop, i.element_type, i.element_id) for i in whole.data.items]
        assert keys == sorted(keys)
    paged: list[str] = []
    for offset in range(0, whole.data.total + 7, 7):
        page = topology.get_connected_elements(
            scope=scope(),
            element_type="junction",
            element_id="JUNCTION-1304",
            depth=3,
            page=topology.connected_page(limit=7, offset=offset),
        )
        assert page.data.total == whole.data.total
        paged += [i.element_id for i in page.data.items]
    assert paged == [i.element_id for i in whole.data.items]


def baseline_flows(at: datetime) -> dict[str, float]:
    return dict(LinkBaseline.objects.filter(project__slug=DEMO, time=at).values_list("element_id", "flow")[:10000])


def reference_trace(start: str, direction: str, at: datetime) -> tuple[dict[str, int], list[str]]:
    """(element → breadth-first hop, the dominant path's element ids) computed here: WNTR's link ends,
    the baseline table's flows, reservoirs and tanks not walked through."""
    flows = baseline_flows(at)
    into: dict[str, list[tuple[str, str, float]]] = {}
    for name, link in net6().links():
        flow = flows.get(name, 0.0)
        if abs(flow) <= topology.FLOW_EPSILON:
            continue
        fr, tn = (link.start_node_name, link.end_node_name) if flow > 0 else (link.end_node_name, link.start_node_name)
        near, far = (tn, fr) if direction == "upstream" else (fr, tn)
        into.setdefault(near, []).append((name, far, abs(flow)))
    hops = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node != start and node_type(node) in ("reservoir", "tank"):
            continue
        for name, far, _ in into.get(node, []):
            hops.setdefault(name, hops[node] + 1)
            if far not in hops:
                hops[far] = hops[node] + 1
                queue.append(far)
    path, node, seen = [start], start, {start}
    while node == start or node_type(node) not in ("reservoir", "tank"):
        options = [(-f, name, far) for name, far, f in into.get(node, []) if far not in seen]
        if not options:
            break
        _, name, node = min(options)
        path += [name, node]
        seen.add(node)
    return hops, path


@pytest.mark.parametrize("direction", ["upstream", "downstream"])
def test_trace_matches_a_walk_over_wntr_and_the_baseline(demo_loaded: None, direction: str) -> None:
    # Question 3 of the demo: the path that feeds JUNCTION-1304 at 09:00Z.
    hops, path = reference_trace("JUNCTION-1304", direction, AT)
    result = topology.trace_flow_path(
        scope=scope(), element_type="junction", element_id="JUNCTION-1304", direction=direction, time=AT,
        max_elements=500,
    )  # fmt: skip
    data = result.data
    got = [i.element_id for i in data.items]
    dominant = [i.element_id for i in data.items if i.dominant]
    assert dominant == path and got[: len(path)] == path
    assert result.origin == "model_baseline" and data.time == AT and result.units == {"flow": "m3/s"}
    if len(hops) <= 500:
        assert set(got) == set(hops) and data.complete and not result.truncated
        assert data.stop_reason == data.dominant_path_end.reason
        others = [i for i in data.items if not i.dominant]
        assert {i.element_id: i.hop for i in others} == {k: v for k, v in hops.items() if k not in set(path)}
    else:
        assert set(got) < set(hops) and data.stop_reason == "max_elements" and result.truncated
    flows = baseline_flows(AT)
    for item in data.items:
        if item.flow is None:  # a node: typed as the network file types it (a tank is never a reservoir)
            assert item.element_type == node_type(item.element_id)
        else:
            assert item.flow == pytest.approx(abs(flows[item.element_id]))
            assert {item.from_node, item.to_node} == set(link_ends(item.element_id))
            water_from = link_ends(item.element_id)[0 if flows[item.element_id] > 0 else 1]
            assert item.from_node == water_from
    if direction == "upstream":
        assert data.dominant_path_end.element_type == "reservoir"
        assert data.dominant_path_end.reason == "source_reached" == data.stop_reason
        assert [e.reason for e in data.ends] == ["source_reached"] and data.ends_total == 1


def test_trace_budget_keeps_the_dominant_path_first(demo_loaded: None, demo_call: Any) -> None:
    full = topology.trace_flow_path(
        scope=scope(), element_type="junction", element_id="JUNCTION-1304", direction="upstream", time=AT,
        max_elements=500,
    )  # fmt: skip
    path = [i.element_id for i in full.data.items if i.dominant]
    small = topology.trace_flow_path(
        scope=scope(), element_type="junction", element_id="JUNCTION-1304", direction="upstream", time=AT,
        max_elements=len(path) + 4,
    )  # fmt: skip
    assert [i.element_id for i in small.data.items][: len(path)] == path
    assert len(small.data.items) == len(path) + 4 and not small.data.complete
    assert small.data.stop_reason == "max_elements" and small.truncated
    assert any(e.reason == "max_elements" for e in small.data.ends)
    assert small.continue_with is not None and small.continue_with["max_elements"] == 500
    validator = Draft202012Validator(tools_by_name()["trace_flow_path"].input_schema)
    assert validator.is_valid({"context_handle": "x" * 16, **small.continue_with})
    # The dominant path itself cut by the budget: it says so.
    tiny = topology.trace_flow_path(
        scope=scope(), element_type="junction", element_id="JUNCTION-1304", direction="upstream", time=AT,
        max_elements=5,
    )  # fmt: skip
    assert [i.element_id for i in tiny.data.items] == path[:5]
    assert tiny.data.dominant_path_end.reason == "max_elements" == tiny.data.stop_reason
    # Over MCP the same call, a time between instants answered at the instant before it.
    reply = structured(
        demo_call(
            "trace_flow_path",
            {
                "element_type": "junction",
                "element_id": "JUNCTION-1304",
                "direction": "upstream",
                "time": "2026-11-01T09:07:00Z",
                "max_elements": len(path) + 4,
            },
        )  # fmt: skip
    )
    assert reply["data"]["time"] == "2026-11-01T09:00:00Z"
    assert [i["element_id"] for i in reply["data"]["items"]] == [i.element_id for i in small.data.items]
    # A whole subgraph over 12000 bytes is cut to fit inline (R-PAGE-5): still valid output, the dominant
    # path intact at its head, marked truncated.
    whole = structured(
        demo_call(
            "trace_flow_path",
            {
                "element_type": "junction",
                "element_id": "JUNCTION-1304",
                "direction": "upstream",
                "time": AT.isoformat(),
                "max_elements": 500,
            },
        )  # fmt: skip
    )
    assert whole["truncated"] is True and len(whole["data"]["items"]) < len(full.data.items)
    assert [i["element_id"] for i in whole["data"]["items"]][: len(path)] == path


def test_trace_from_a_link_and_without_flow(demo_loaded: None) -> None:
    flows = baseline_flows(AT)
    # From a link: the link first (hop 0, its direction), then the walk from its upstream end.
    result = topology.trace_flow_path(
        scope=scope(), element_type="pipe", element_id="LINK-1523", direction="upstream", time=AT, max_elements=500
    )
    first = result.data.items[0]
    assert (first.element_id, first.hop, first.dominant) == ("LINK-1523", 0, True)
    start_end = link_ends("LINK-1523")
    upstream_end = start_end[0] if flows["LINK-1523"] > 0 else start_end[1]
    assert result.data.items[1].element_id == upstream_end
    hops, path = reference_trace(upstream_end, "upstream", AT)
    assert [i.element_id for i in result.data.items if i.dominant] == ["LINK-1523", *path]
    # A closed link carries no flow: nothing to follow, and it says so.
    closed = (
        LinkBaseline.objects.filter(project__slug=DEMO, time=AT, flow=0, element_type="pipe")
        .order_by("element_id")
        .values_list("element_id", flat=True)[0]
    )
    stopped = topology.trace_flow_path(
        scope=scope(), element_type="pipe", element_id=closed, direction="downstream", time=AT
    )
    assert [i.element_id for i in stopped.data.items] == [closed]
    assert stopped.data.stop_reason == "no_flow" and stopped.data.complete


def test_trace_and_connected_refusals(demo_loaded: None) -> None:
    with pytest.raises(NotFound):
        topology.trace_flow_path(
            scope=scope(), element_type="junction", element_id="NOPE", direction="upstream", time=AT
        )
    with pytest.raises(NotFound, match="baseline"):
        topology.trace_flow_path(
            scope=scope(), element_type="junction", element_id="JUNCTION-1304", direction="upstream",
            time=datetime(2030, 1, 1, tzinfo=UTC),
        )  # fmt: skip
    with pytest.raises(InvalidParameter, match="direction"):
        topology.trace_flow_path(scope=scope(), element_type="junction", element_id="J", direction="sideways", time=AT)
    with pytest.raises(InvalidParameter, match="max_elements"):
        topology.trace_flow_path(
            scope=scope(), element_type="junction", element_id="J", direction="upstream", time=AT, max_elements=501
        )
    with pytest.raises(InvalidParameter, match="depth"):
        topology.get_connected_elements(scope=scope(), element_type="pipe", element_id="LINK-1523", depth=4)
    with pytest.raises(NotFound):
        topology.get_connected_elements(scope=scope(), element_type="pipe", element_id="JUNCTION-1304")


def bound_tools(handles: dict[tuple[str, str], str], who: str) -> set[str]:
    """The tools of ``who``'s context on the demo (what the binding answered and its tools/call allows)."""
    from contexts.models import QueryContext
    from contexts.selectors import hash_handle

    context = QueryContext.objects.get(handle_hash=hash_handle(handles[(who, DEMO)]))
    return set(context.allowed_tools)


def test_new_tools_follow_their_permissions(
    demo_handles: dict[tuple[str, str], str], demo_call: Callable[..., dict[str, Any]]
) -> None:
    """alice (every permission) has the four tools in her binding; bob (webgis.view only) has
    get_connected_elements and gets "Unknown tool" for the three that also need simulation.view or
    scada.view. (``tools/list`` is the same for every caller by design, mcp_app/catalog.py.)"""
    specs = tools_by_name()
    assert specs["get_connected_elements"].permissions == ("webgis.view",)
    assert specs["trace_flow_path"].permissions == ("webgis.view", "simulation.view")
    assert specs["rank_model_baseline"].permissions == ("simulation.view",)
    assert specs["rank_scada_deviation"].permissions == ("scada.view", "simulation.view")
    assert set(NEW_TOOLS) <= bound_tools(demo_handles, "alice")
    assert set(NEW_TOOLS) & bound_tools(demo_handles, "bob") == {"get_connected_elements"}
    args = {
        "get_connected_elements": {"element_type": "pipe", "element_id": "LINK-1523"},
        "trace_flow_path": {"element_type": "pipe", "element_id": "LINK-1523", "direction": "upstream",
                            "time": "2026-11-01T09:00:00Z", "max_elements": 5},
        "rank_model_baseline": {"element_type": "junction", "field": "pressure", "time": "2026-11-01T09:00:00Z"},
        "rank_scada_deviation": {"start": "2026-11-01T08:00:00Z", "end": "2026-11-01T09:00:00Z",
                                 "quantity": "pressure"},
    }  # fmt: skip
    for tool in NEW_TOOLS:
        structured(demo_call(tool, args[tool]))
    structured(demo_call("get_connected_elements", args["get_connected_elements"], who="bob"))
    for tool in NEW_TOOLS[1:]:
        reply = demo_call(tool, args[tool], who="bob")
        assert reply["error"]["code"] == -32602 and reply["error"]["message"] == f"Unknown tool: {tool}"
