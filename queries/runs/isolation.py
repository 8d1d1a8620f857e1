"""The valve isolation analysis's computation (issue 42 item 2, ``run_valve_isolation_analysis``): which
valves to close to isolate pipes, what is inside, and what else loses its supply.

A valve sits on a link next to a node (the valve layer, ``import_gis --as-valves``). The segments are
``wntr.metrics.valve_segments`` of the model cut by the valves that close (a failed valve does not, so
its neighbours' segments merge). Isolating a pipe closes its whole segment: the valves to close are
those with exactly one side (its link's segment or its node's segment) inside. With those closed, the
nodes outside the segment that no longer reach a reservoir or a tank are the outage; the demand lost is
the base demand of the junctions inside and cut off (m³/s, SI; the presentation step converts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import pandas as pd
import wntr
from wntr.network import WaterNetworkModel

#: ``(fid, link, node)``: a valve of the layer, as ``IsolationValve`` stores it.
ValveRow = tuple[str, str, str]


class IsolationError(ValueError):
    """The isolation cannot be computed as asked (the message names the parameter)."""


@dataclass(frozen=True)
class IsolationResult:
    valves_to_close: list[ValveRow]
    pipes: list[str]  # links inside the isolated segments
    junctions: list[str]  # nodes inside
    outage_nodes: list[str]  # nodes outside that lose every source once the valves are closed
    outage_links: list[str]
    demand_lost: float  # m³/s: base demand of the junctions inside and cut off
    segments: list[int] = field(default_factory=list)


def _base_demand(wn: WaterNetworkModel, node: str) -> float:
    junction = wn.get_node(node)
    return float(sum(d.base_value for d in junction.demand_timeseries_list))


def isolate(
    wn: WaterNetworkModel, valves: list[ValveRow], pipe_ids: list[str], failed_valves: frozenset[str] = frozenset()
) -> IsolationResult:
    """Isolate ``pipe_ids`` (1–20 links) with the valves that close (``failed_valves``: fids that do not)."""
    if not 1 <= len(pipe_ids) <= 20:
        raise IsolationError("pipe_ids must name 1 to 20 pipes")
    links, nodes = set(wn.link_name_list), set(wn.node_name_list)  # WNTR builds these lists on each access
    unknown = [p for p in pipe_ids if p not in links]
    if unknown:
        raise IsolationError(f"pipe_ids {', '.join(map(repr, unknown))} are not links of the model")
    missing = sorted(failed_valves - {fid for fid, _, _ in valves})
    if missing:
        raise IsolationError(f"failed_valves {', '.join(map(repr, missing))} are not valves of the layer")
    closing = [v for v in valves if v[0] not in failed_valves and v[1] in links and v[2] in nodes]
    layer = pd.DataFrame([(link, node) for _, link, node in closing], columns=["link", "node"])
    graph = wn.to_graph()
    node_seg, link_seg, _ = wntr.metrics.valve_segments(graph, layer)
    inside = {int(link_seg[p]) for p in pipe_ids}
    to_close = [v for v in closing if (int(link_seg[v[1]]) in inside) != (int(node_seg[v[2]]) in inside)]
    pipes = sorted(str(k) for k, s in link_seg.items() if int(s) in inside)
    junctions = sorted(str(k) for k, s in node_seg.items() if int(s) in inside)
    # What is left once the segment is out: nodes with no path to a reservoir or a tank lose their supply.
    left = graph.to_undirected()
    left.remove_nodes_from(junctions)
    left.remove_edges_from([(u, v, k) for u, v, k in list(left.edges(keys=True)) if k in set(pipes)])
    sources = {n for n in [*wn.reservoir_name_list, *wn.tank_name_list] if n in left}
    supplied: set[str] = set()
    for part in nx.connected_components(left):
        if part & sources:
            supplied |= part
    outage_nodes = sorted(str(n) for n in left.nodes if n not in supplied)
    cut = set(outage_nodes)
    outage_links = sorted(str(k) for u, v, k in left.edges(keys=True) if u in cut or v in cut)
    lost = sum(_base_demand(wn, n) for n in [*junctions, *outage_nodes] if n in wn.junction_name_list)
    return IsolationResult(
        valves_to_close=to_close,
        pipes=pipes,
        junctions=junctions,
        outage_nodes=outage_nodes,
        outage_links=outage_links,
        demand_lost=float(lost),
        segments=sorted(inside),
    )
