"""The valve isolation analysis's computation (issue 42 item 2), checked on its own terms: with the valves
it names closed, the piece of network that holds the pipes is exactly the segment it reports, no valve it
names could stay open, a valve that fails to close widens the segment, and the outage is what reaches no
reservoir or tank. Valves and links are joined in a graph of their own here (a node and a link vertex per
element, a valve the edge between its link and its node), not through WNTR's segments."""

from __future__ import annotations

import networkx as nx
import pytest
import wntr

from queries.importer.epanet import wntr_network_path
from queries.runs.isolation import IsolationError, ValveRow, isolate


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net3.inp")))


def _valves(wn: wntr.network.WaterNetworkModel, n: int = 2, seed: int = 7) -> list[ValveRow]:
    layer = wntr.network.layer.generate_valve_layer(wn, "strategic", n, seed=seed)
    return [
        (str(i), str(link), str(node)) for i, (link, node) in enumerate(zip(layer["link"], layer["node"], strict=True))
    ]


def _pieces(wn: wntr.network.WaterNetworkModel, closed: list[ValveRow]) -> nx.Graph:
    """Nodes and links as vertices; each link joined to its two ends, except where a closed valve cuts it."""
    g = nx.Graph()
    shut = {(link, node) for _, link, node in closed}
    for name, link in wn.links():
        for end in (link.start_node_name, link.end_node_name):
            if (name, end) not in shut:
                g.add_edge(("L", name), ("N", end))
    return g


def _piece_of(g: nx.Graph, pipe: str) -> set[tuple[str, str]]:
    return set(nx.node_connected_component(g, ("L", pipe)))


@pytest.mark.parametrize("pipes", [["105"], ["105", "123"], ["20"]])
def test_closing_the_named_valves_isolates_exactly_the_segment(pipes: list[str]) -> None:
    wn = _net3()
    valves = _valves(wn)
    got = isolate(wn, valves, pipes)
    g = _pieces(wn, got.valves_to_close)
    piece = set().union(*(_piece_of(g, p) for p in pipes))
    assert {n for kind, n in piece if kind == "L"} == set(got.pipes) and set(pipes) <= set(got.pipes)
    assert {n for kind, n in piece if kind == "N"} == set(got.junctions)
    assert got.valves_to_close
    for kept in got.valves_to_close:  # every named valve is needed: left open, the water gets in
        others = [v for v in got.valves_to_close if v != kept]
        assert set().union(*(_piece_of(_pieces(wn, others), p) for p in pipes)) > piece, kept
    # The outage: outside the segment, with the valves closed, no path to a reservoir or a tank.
    sources = {("N", n) for n in [*wn.reservoir_name_list, *wn.tank_name_list]}
    cut = {v for part in nx.connected_components(g) if not part & sources and not part & piece for v in part}
    assert {n for kind, n in cut if kind == "N"} == set(got.outage_nodes)
    assert got.demand_lost >= 0


def test_a_valve_that_fails_widens_the_segment() -> None:
    wn = _net3()
    valves = _valves(wn)
    first = isolate(wn, valves, ["105"])
    failed = first.valves_to_close[0][0]
    wider = isolate(wn, valves, ["105"], frozenset({failed}))
    assert set(wider.pipes) > set(first.pipes)
    assert failed not in {fid for fid, _, _ in wider.valves_to_close}


def test_isolating_a_pipe_before_a_branch_cuts_its_customers_off() -> None:
    """Pipe 238 feeds a branch (215, 217, 219, 225, 231 …) that has no other way to a source: closing its
    segment cuts the branch off, and the demand lost is the segment's and the branch's."""
    wn = _net3()
    got = isolate(wn, _valves(wn), ["238"])
    assert {"215", "217", "219", "225", "231"} <= set(got.outage_nodes)
    demand = {n: sum(d.base_value for d in wn.get_node(n).demand_timeseries_list) for n in wn.junction_name_list}
    expected = sum(demand.get(n, 0.0) for n in [*got.junctions, *got.outage_nodes])
    assert got.demand_lost == pytest.approx(expected) and got.demand_lost > sum(
        demand.get(n, 0.0) for n in got.junctions
    )
    assert got.outage_links and not set(got.outage_links) & set(got.pipes)


@pytest.mark.parametrize(
    ("pipes", "failed", "message"),
    [([], frozenset(), r"1 to 20 pipes"), (["NOPE"], frozenset(), r"'NOPE' are not links"),
     (["105"], frozenset({"no-such"}), r"failed_valves 'no-such' are not valves")],
)  # fmt: skip
def test_an_isolation_that_cannot_be_computed_says_which_parameter(
    pipes: list[str], failed: frozenset[str], message: str
) -> None:
    wn = _net3()
    with pytest.raises(IsolationError, match=message):
        isolate(wn, _valves(wn), pipes, failed)
