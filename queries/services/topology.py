"""The topology family: what is connected to an element, and where its water comes from or goes.

``get_connected_elements`` walks the network model (origin ``model_network``): ``depth`` node-to-node
steps around a node or a link. ``trace_flow_path`` follows the *model baseline's* flow directions at one
instant (origin ``model_baseline``) upstream to the sources or downstream to the demand ends, with the
dominant path (at each step the link with the largest flow) marked.

Engine: recursive CTEs over the link tables, probing the ``(project, start_node_id)`` and
``(project, end_node_id)`` btrees per node and the baseline's ``(project, type, element, time)`` btree per
link — only the part of the network the walk reaches is read, whatever the network's size. pgRouting was
the alternative; its functions take the whole edge set as an SQL query and build the graph per call, so
a trace over the 389 k-link scale network reads and sorts every link and its baseline row first
(measurement: ``queries/models/README.md`` "Topology walks").

The breadth-first trace keeps one row per level (a breadth-first front, the nodes and links seen so far as
arrays): a plain recursive CTE sees only the previous level and would revisit every node once per path
leading to it (exponential on a looped network). It stops once ``max_elements`` elements were found, so
it reads at most one level beyond that; the dominant path is its own walk (one link per step, ``ORDER BY
flow DESC LIMIT 1``), so a path to the source is found even when the subgraph is larger than the budget.
Every statement is bounded: the walks by ``max_elements`` and depth ≤ 3, the output by ``LIMIT``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from contexts.errors import InvalidParameter, NotFound
from contexts.scope import QueryScope
from queries.models import (
    ELEMENT_MODELS,
    LINK_TYPES,
    Junction,
    LinkBaseline,
    Pipe,
    Pump,
    Reservoir,
    Tank,
    Valve,
)
from queries.plan import Plan, Raw, Together, service, statement_factory
from queries.schemas.common import PageRequest, TimeWindow
from queries.schemas.topology import (
    ConnectedElement,
    ConnectedElementsResult,
    ConnectedPage,
    FlowTrace,
    FlowTraceResult,
    TraceElement,
    TraceEnd,
)
from queries.services.baseline import _aware, _instant, element_instants
from queries.units import Q_FLOW

MAX_DEPTH = 3
DEFAULT_CONNECTED_LIMIT = 100
MAX_CONNECTED_LIMIT = 500
MAX_TRACE_ELEMENTS = 500
DEFAULT_TRACE_ELEMENTS = 60
#: |flow| at or below this (m³/s, 1 mL/s) is no flow: a closed link, or numerical noise with no direction.
FLOW_EPSILON = 1e-6
#: Places where a trace stopped, listed in one result (``ends_total`` counts them all).
MAX_ENDS = 20
DIRECTIONS = ("upstream", "downstream")

_PIPE, _PUMP, _VALVE = (m._meta.db_table for m in (Pipe, Pump, Valve))
_JUNCTION, _RESERVOIR, _TANK = (m._meta.db_table for m in (Junction, Reservoir, Tank))
_LINK_BASELINE = LinkBaseline._meta.db_table


class _Named:
    """An SQL text written with ``%(name)s`` placeholders, run as a ``Raw`` with positional ``%s``
    parameters (what both plan drivers bind)."""

    def __init__(self, sql: str, columns: Sequence[str]) -> None:
        self.names = re.findall(r"%\((\w+)\)s", sql)
        self.sql = re.sub(r"%\((\w+)\)s", "%s", sql)
        self.columns = tuple(columns)

    def __call__(self, **values: Any) -> Raw:
        return Raw(self.sql, [values[name] for name in self.names], self.columns)


def _incident(node: str) -> str:
    """Every link (type, id, start node, end node) meeting node expression ``node``: six btree probes.
    The project id is the first parameter of the statement (``%(p)s``)."""
    parts = []
    for kind, table in (("pipe", _PIPE), ("pump", _PUMP), ("valve", _VALVE)):
        for column in ("start_node_id", "end_node_id"):
            parts.append(
                f"SELECT '{kind}'::text AS t, element_id AS id, start_node_id AS s, end_node_id AS e "
                f"FROM {table} WHERE project_id = %(p)s AND {column} = {node}"
            )
    return "\n        UNION ALL ".join(parts)


def _is_source(node: str) -> str:
    return (
        f"(EXISTS (SELECT 1 FROM {_RESERVOIR} r WHERE r.project_id = %(p)s AND r.element_id = {node}) "
        f"OR EXISTS (SELECT 1 FROM {_TANK} k WHERE k.project_id = %(p)s AND k.element_id = {node}))"
    )


# --- get_connected_elements ----------------------------------------------------------------------

_CONNECTED_SQL = f"""
WITH RECURSIVE walk(node, hop) AS (
    SELECT unnest(%(seeds)s::text[]), 0
  UNION
    SELECT CASE WHEN k.s = w.node THEN k.e ELSE k.s END, w.hop + 1
    FROM walk w CROSS JOIN LATERAL (
        {_incident("w.node")}
    ) k
    WHERE w.hop < %(node_hops)s
), nodes AS (
    SELECT node, min(hop) AS hop FROM walk GROUP BY node
), links AS (
    SELECT DISTINCT ON (k.t, k.id) k.t, k.id, k.s, k.e, n.hop + 1 AS hop
    FROM nodes n CROSS JOIN LATERAL (
        {_incident("n.node")}
    ) k
    WHERE n.hop < %(link_hops)s
    ORDER BY k.t, k.id, n.hop
), elements AS (
    SELECT CASE
               WHEN EXISTS (SELECT 1 FROM {_RESERVOIR} r WHERE r.project_id = %(p)s AND r.element_id = n.node)
                   THEN 'reservoir'
               WHEN EXISTS (SELECT 1 FROM {_TANK} k WHERE k.project_id = %(p)s AND k.element_id = n.node) THEN 'tank'
               ELSE 'junction'
           END AS t, n.node AS id, n.hop, NULL::text AS s, NULL::text AS e
    FROM nodes n
    UNION ALL
    SELECT t, id, hop, s, e FROM links
)
SELECT t, id, hop, s, e, count(*) OVER () AS total
FROM elements
WHERE NOT (t = %(type)s AND id = %(id)s)
ORDER BY hop, t, id
LIMIT %(limit)s OFFSET %(offset)s
"""  # noqa: S608 - table names are constants of this module; every value is a parameter

_CONNECTED = _Named(_CONNECTED_SQL, ("element_type", "element_id", "hop", "start_node_id", "end_node_id", "total"))


def connected_page(*, limit: int = DEFAULT_CONNECTED_LIMIT, offset: int = 0) -> PageRequest:
    return PageRequest(limit=limit, offset=offset, max_limit=MAX_CONNECTED_LIMIT)


def _check_element(element_type: str, element_id: str) -> None:
    if element_type not in ELEMENT_MODELS:
        raise InvalidParameter(
            f"element_type must be one of {', '.join(ELEMENT_MODELS)}.", details={"field": "element_type"}
        )
    if not isinstance(element_id, str) or not element_id:
        raise InvalidParameter("element_id must be a non-empty element id.", details={"field": "element_id"})


@statement_factory(static=1)
def _start(element_type: str, project_id: int, element_id: str) -> Any:
    """The start element (links: with their end nodes), at most one row (a statement factory: bound, not
    built, per call)."""
    fields = ("element_id", "start_node_id", "end_node_id") if element_type in LINK_TYPES else ("element_id",)
    return ELEMENT_MODELS[element_type].objects.filter(project_id=project_id, element_id=element_id).values(*fields)[:1]


@service
def get_connected_elements(
    *, scope: QueryScope, element_type: str, element_id: str, depth: int = 1, page: PageRequest | None = None
) -> Plan[ConnectedElementsResult]:
    """The links and nodes within ``depth`` (1–3) node-to-node steps of an element, one page ordered by
    hop, type and id, with the total. From a node: depth 1 is its links and their other end nodes. From
    a link: depth 1 is its two end nodes and every link that meets them (the start is not listed).

    Two queries: the start element (unknown → ``NotFound``), the walk with the page (one more, the
    count, for a page past the end)."""
    _check_element(element_type, element_id)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise InvalidParameter(f"depth must be an integer from 1 to {MAX_DEPTH}.", details={"field": "depth"})
    page = page or connected_page()
    if page.limit > MAX_CONNECTED_LIMIT:
        raise InvalidParameter(f"limit must be between 1 and {MAX_CONNECTED_LIMIT}.", details={"field": "limit"})
    rows = yield _start(element_type, scope.project_id, element_id)
    if not rows:
        raise NotFound(f"No {element_type} with that id in this project.", details={"field": "element_id"})
    start = rows[0]
    if element_type in LINK_TYPES:
        seeds = sorted({start["start_node_id"], start["end_node_id"]})
        node_hops, link_hops = depth - 1, depth
    else:
        seeds = [element_id]
        node_hops, link_hops = depth, depth
    params = {
        "p": scope.project_id,
        "seeds": seeds,
        "node_hops": node_hops,
        "link_hops": link_hops,
        "type": element_type,
        "id": element_id,
    }
    found = yield _CONNECTED(**params, limit=page.limit, offset=page.offset)
    if found:
        total = int(found[0]["total"])
    elif page.offset == 0:
        total = 0
    else:  # past the end: the window count has no row to ride on
        first = yield _CONNECTED(**params, limit=1, offset=0)
        total = int(first[0]["total"]) if first else 0
    items = [
        ConnectedElement(
            element_type=r["element_type"],
            element_id=r["element_id"],
            hop=r["hop"],
            start_node_id=r["start_node_id"],
            end_node_id=r["end_node_id"],
        )
        for r in found
    ]
    data = ConnectedPage(
        items=items,
        total=total,
        limit=page.limit,
        offset=page.offset,
        has_more=page.offset + len(items) < total,
        element_type=element_type,  # type: ignore[arg-type]  # checked above
        element_id=element_id,
        depth=depth,
    )
    return ConnectedElementsResult(
        source="model_network",
        source_ref=f"project:{scope.project_slug}/{element_type}/{element_id}/connected?depth={depth}",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=data,
        page=data.info(),
    )


# --- trace_flow_path -----------------------------------------------------------------------------


def _flowing(direction: str) -> tuple[str, str]:
    """(the node water reaches ``f.node`` from / leaves it to, the side that must be ``f.node``)."""
    return ("d.fr", "d.tn") if direction == "upstream" else ("d.tn", "d.fr")


def _steps(direction: str, frontier: str) -> str:
    """Links with flow at ``%(t)s`` into (upstream) or out of (downstream) each node of ``frontier``
    (a ``f(node)`` relation): type, id, the water's from/to nodes, |flow|, the far node."""
    far, near = _flowing(direction)
    return f"""
        SELECT f.node AS near, k.t, k.id, d.fr, d.tn, abs(b.flow) AS flow, {far} AS far
        FROM {frontier}
        CROSS JOIN LATERAL (
            {_incident("f.node")}
        ) k
        JOIN {_LINK_BASELINE} b
          ON b.project_id = %(p)s AND b.element_type = k.t AND b.element_id = k.id AND b.time = %(t)s
        CROSS JOIN LATERAL (
            SELECT CASE WHEN b.flow > 0 THEN k.s ELSE k.e END AS fr, CASE WHEN b.flow > 0 THEN k.e ELSE k.s END AS tn
        ) d
        WHERE abs(b.flow) > %(eps)s AND {near} = f.node"""


def _path_sql(direction: str) -> str:
    """The dominant path: from the start node, at each step the link with the largest flow (ties by
    id, then type) to a node not yet on the path, until a reservoir or tank, a node without flow on, or
    ``%(steps)s`` steps."""
    return f"""
WITH RECURSIVE path(step, node, t, id, fr, tn, flow, seen, done) AS (
    SELECT 0, %(start)s::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8,
           ARRAY[%(start)s::text], %(start_is_source)s
  UNION ALL
    SELECT p.step + 1, x.far, x.t, x.id, x.fr, x.tn, x.flow, p.seen || x.far, {_is_source("x.far")}
    FROM path p CROSS JOIN LATERAL (
        SELECT s.* FROM ({_steps(direction, "(SELECT p.node) AS f(node)")}) s
        WHERE NOT s.far = ANY (p.seen)
        ORDER BY s.flow DESC, s.id, s.t
        LIMIT 1
    ) x
    WHERE NOT p.done AND p.step < %(steps)s
)
SELECT step, node, t, id, fr, tn, flow, done FROM path ORDER BY step LIMIT %(steps)s + 1
"""  # noqa: S608 - table names are constants of this module; every value is a parameter


def _bfs_sql(direction: str) -> str:
    """The subgraph breadth first, one row per level: the level's new nodes (``nodes``) and the ones
    expanded next (``frontier``: not a reservoir or tank), its links as parallel arrays; it stops when
    no node is left to expand or ``%(max)s`` elements were found (the last level may pass it)."""
    return f"""
WITH RECURSIVE lvl(depth, nodes, frontier, seen_nodes, seen_links, lt, lid, lfr, ltn, lflow, lnear, n) AS (
    SELECT 0, %(seen)s::text[], %(frontier)s::text[], %(seen)s::text[], %(seen_links)s::text[],
           '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::float8[], '{{}}'::text[],
           cardinality(%(seen)s::text[]) + cardinality(%(seen_links)s::text[])
  UNION ALL
    SELECT l.depth + 1, nx.nodes, nx.frontier, l.seen_nodes || nx.nodes, l.seen_links || nx.lkeys,
           nx.lt, nx.lid, nx.lfr, nx.ltn, nx.lflow, nx.lnear,
           l.n + cardinality(nx.lkeys) + cardinality(nx.nodes)
    FROM lvl l CROSS JOIN LATERAL (
        SELECT COALESCE(array_agg(e.t ORDER BY e.t, e.id), '{{}}') AS lt,
               COALESCE(array_agg(e.id ORDER BY e.t, e.id), '{{}}') AS lid,
               COALESCE(array_agg(e.fr ORDER BY e.t, e.id), '{{}}') AS lfr,
               COALESCE(array_agg(e.tn ORDER BY e.t, e.id), '{{}}') AS ltn,
               COALESCE(array_agg(e.flow ORDER BY e.t, e.id), '{{}}') AS lflow,
               COALESCE(array_agg(e.near ORDER BY e.t, e.id), '{{}}') AS lnear,
               COALESCE(array_agg(e.t || ':' || e.id), '{{}}') AS lkeys,
               ARRAY(SELECT DISTINCT x FROM unnest(array_agg(e.far)) x
                     WHERE NOT x = ANY (l.seen_nodes) ORDER BY x) AS nodes,
               ARRAY(SELECT DISTINCT x FROM unnest(array_agg(e.far)) x
                     WHERE NOT x = ANY (l.seen_nodes) AND NOT {_is_source("x")} ORDER BY x) AS frontier
        FROM (
            SELECT DISTINCT ON (s.t, s.id) s.* FROM ({_steps(direction, "unnest(l.frontier) AS f(node)")}) s
            WHERE NOT (s.t || ':' || s.id) = ANY (l.seen_links)
            ORDER BY s.t, s.id
        ) e
    ) nx
    WHERE cardinality(l.frontier) > 0 AND l.n < %(max)s
)
SELECT depth, nodes, frontier, lt, lid, lfr, ltn, lflow, lnear FROM lvl ORDER BY depth LIMIT %(max)s + 2
"""  # noqa: S608 - table names are constants of this module; every value is a parameter


_PATH = {d: _Named(_path_sql(d), ("step", "node", "t", "id", "fr", "tn", "flow", "done")) for d in DIRECTIONS}
#: Which of some nodes are tanks (the others reached as sources are reservoirs).
_TANKS_AMONG = _Named(
    f"SELECT element_id FROM {_TANK} WHERE project_id = %(p)s AND element_id = ANY(%(ids)s::text[])",  # noqa: S608
    ("element_id",),
)
_BFS = {
    d: _Named(_bfs_sql(d), ("depth", "nodes", "frontier", "lt", "lid", "lfr", "ltn", "lflow", "lnear"))
    for d in DIRECTIONS
}


def _dead_end(direction: str) -> Literal["no_flow", "demand_end"]:
    return "no_flow" if direction == "upstream" else "demand_end"


@service
def trace_flow_path(
    *,
    scope: QueryScope,
    element_type: str,
    element_id: str,
    direction: str,
    time: datetime,
    max_elements: int = DEFAULT_TRACE_ELEMENTS,
) -> Plan[FlowTraceResult]:
    """The elements water passes through at the baseline instant at or nearest before ``time``,
    following the model baseline's flow directions upstream (to the sources: reservoirs, tanks) or
    downstream (to the demand ends), at most ``max_elements`` (≤ 500): the dominant path first, then the
    rest of the subgraph breadth first; where and why it stopped.

    Five queries: the start element together with the instant (from the start's own baseline; outside
    the baseline → ``NotFound``; one round trip on the MCP driver), the start link's flow (links only),
    the dominant path, the subgraph; one more for the type of the reservoirs and tanks reached."""
    _check_element(element_type, element_id)
    if direction not in DIRECTIONS:
        raise InvalidParameter("direction must be upstream or downstream.", details={"field": "direction"})
    if (
        isinstance(max_elements, bool)
        or not isinstance(max_elements, int)
        or not 1 <= max_elements <= MAX_TRACE_ELEMENTS
    ):
        raise InvalidParameter(
            f"max_elements must be an integer from 1 to {MAX_TRACE_ELEMENTS}.", details={"field": "max_elements"}
        )
    asked = _aware(time)
    is_link = element_type in LINK_TYPES
    # The element and its instants need nothing from each other: one round trip on the MCP driver.
    rows, instants = yield Together(
        _start(element_type, scope.project_id, element_id),
        element_instants(element_type, ("flow",) if is_link else (), scope.project_id, element_id, asked),
    )
    if not rows:
        raise NotFound(f"No {element_type} with that id in this project.", details={"field": "element_id"})
    start = rows[0]
    at = _instant(instants, asked, f"{element_type} {element_id}")
    instant = at["time"]
    if is_link:
        flow = float(at["flow"])
        if abs(flow) <= FLOW_EPSILON:
            link = TraceElement(element_type=element_type, element_id=element_id, hop=0, dominant=True, flow=0.0)  # type: ignore[arg-type]
            end = TraceEnd(element_type=element_type, element_id=element_id, reason="no_flow")  # type: ignore[arg-type]
            return _trace_result(scope, element_type, element_id, direction, asked, instant, max_elements,
                                 [link], True, "no_flow", end, [end])  # fmt: skip
        fr, tn = (
            (start["start_node_id"], start["end_node_id"])
            if flow > 0
            else (start["end_node_id"], start["start_node_id"])
        )
        first_node = fr if direction == "upstream" else tn
        start_link = TraceElement(
            element_type=element_type,  # type: ignore[arg-type]
            element_id=element_id,
            hop=0,
            dominant=True,
            flow=abs(flow),
            from_node=fr,
            to_node=tn,
        )
        budget = max_elements - 1
        seen_links = [f"{element_type}:{element_id}"]
        kinds = yield Raw(
            f"SELECT 'reservoir' FROM {_RESERVOIR} WHERE project_id = %s AND element_id = %s "  # noqa: S608
            f"UNION ALL SELECT 'tank' FROM {_TANK} WHERE project_id = %s AND element_id = %s LIMIT 1",
            [scope.project_id, first_node, scope.project_id, first_node],
            ("kind",),
        )
        first_type = kinds[0]["kind"] if kinds else "junction"
    else:
        start_link = None
        first_node = element_id
        first_type = element_type
        budget = max_elements
        seen_links = []
    # The start node of a link trace is never expanded when it is a reservoir or tank; a node start is
    # (a tank's own inflow or outflow is what the caller asks about).
    first_is_source = is_link and first_type in ("reservoir", "tank")
    if budget == 0:
        assert start_link is not None
        end = TraceEnd(element_type=element_type, element_id=element_id, reason="max_elements")  # type: ignore[arg-type]
        return _trace_result(scope, element_type, element_id, direction, asked, instant, max_elements,
                             [start_link], False, "max_elements", end, [end])  # fmt: skip
    params = {"p": scope.project_id, "t": instant, "eps": FLOW_EPSILON}
    steps = (budget - 1) // 2  # a path of k steps is 2k + 1 elements
    # One step more than fits: tells "the budget ended it" from "it ended there".
    path = yield _PATH[direction](**params, start=first_node, start_is_source=first_is_source, steps=steps + 1)
    path_cut = len(path) > steps + 1
    path = path[: steps + 1]
    levels = yield _BFS[direction](
        **params,
        seen=[first_node],
        frontier=[] if first_is_source else [first_node],
        seen_links=seen_links,
        max=budget,
    )
    # Node types: expanded nodes (a level's frontier) are junctions (or the start); the others reached
    # breadth first, and a path that ended ``done``, end at a reservoir or tank.
    expanded = {n for lv in levels for n in lv["frontier"]}
    reached = {n: lv["depth"] for lv in levels for n in lv["nodes"]}
    sources = {n for n in reached if n not in expanded and n != first_node}
    if path[-1]["done"] and path[-1]["node"] != first_node:
        sources.add(path[-1]["node"])
    if first_is_source:
        sources.add(first_node)
    tanks: set[str] = set()
    if sources:
        ordered = sorted(sources)
        # One statement of any number of sources (an array parameter), its SQL compiled once: a queryset
        # with ``element_id__in`` was built and compiled per call (its placeholders vary with the count).
        found = yield _TANKS_AMONG(p=scope.project_id, ids=ordered)
        tanks = {row["element_id"] for row in found}

    def node_type(node: str) -> Any:
        if node == first_node:
            return first_type
        if node in sources:
            return "tank" if node in tanks else "reservoir"
        return "junction"

    # The dominant path, in order from the start.
    items: list[TraceElement] = [start_link] if start_link is not None else []
    on_path: set[tuple[str, str]] = set()
    for p in path:
        if p["t"] is not None:
            items.append(
                TraceElement(element_type=p["t"], element_id=p["id"], hop=p["step"], dominant=True,
                             flow=float(p["flow"]), from_node=p["fr"], to_node=p["tn"])
            )  # fmt: skip
            on_path.add((p["t"], p["id"]))
        items.append(
            TraceElement(element_type=node_type(p["node"]), element_id=p["node"], hop=p["step"], dominant=True)
        )
        on_path.add(("node", p["node"]))
    last = path[-1]
    path_reason: Literal["source_reached", "demand_end", "no_flow", "max_elements"]
    if path_cut:
        path_reason = "max_elements"
    elif last["done"] or node_type(last["node"]) in ("reservoir", "tank"):
        path_reason = "source_reached"
    else:
        path_reason = _dead_end(direction)
    path_end = TraceEnd(element_type=node_type(last["node"]), element_id=last["node"], reason=path_reason)

    # The rest of the subgraph, breadth first (hop, then type, then id), as far as the budget goes.
    others: list[TraceElement] = []
    for lv in levels:
        for node in lv["nodes"]:
            if ("node", node) not in on_path:
                others.append(
                    TraceElement(element_type=node_type(node), element_id=node, hop=lv["depth"], dominant=False)
                )
        for t, i, fr, tn, fl in zip(lv["lt"], lv["lid"], lv["lfr"], lv["ltn"], lv["lflow"], strict=True):
            if (t, i) not in on_path:
                others.append(
                    TraceElement(element_type=t, element_id=i, hop=lv["depth"], dominant=False,
                                 flow=float(fl), from_node=fr, to_node=tn)
                )  # fmt: skip
    others.sort(key=lambda e: (e.hop, e.element_type, e.element_id))
    room = max_elements - len(items)
    cut = len(others) > room
    items.extend(others[:room])

    # Where the subgraph stopped: reservoirs/tanks reached, expanded nodes with no flow on, and the front
    # left unexpanded when the budget ran out.
    capped = bool(levels[-1]["frontier"])
    continued = {near for lv in levels for near in lv["lnear"]}
    unexpanded = set(levels[-1]["frontier"]) if capped else set()
    ends: list[TraceEnd] = []
    for node in sorted(reached, key=lambda n: (reached[n], n)):
        if node in sources:
            reason = "source_reached"
        elif node in unexpanded:
            reason = "max_elements"
        elif node not in continued:
            reason = "source_reached" if node_type(node) in ("reservoir", "tank") else _dead_end(direction)
        else:
            continue
        ends.append(TraceEnd(element_type=node_type(node), element_id=node, reason=reason))  # type: ignore[arg-type]
    complete = not capped and not cut and not path_cut
    return _trace_result(
        scope, element_type, element_id, direction, asked, instant, max_elements,
        items, complete, path_reason if complete else "max_elements", path_end, ends,
    )  # fmt: skip


def _trace_result(
    scope: QueryScope,
    element_type: str,
    element_id: str,
    direction: str,
    asked: datetime,
    instant: datetime,
    max_elements: int,
    items: Sequence[TraceElement],
    complete: bool,
    stop_reason: str,
    path_end: TraceEnd,
    ends: Sequence[TraceEnd],
) -> FlowTraceResult:
    data = FlowTrace(
        element_type=element_type,  # type: ignore[arg-type]  # checked by _check_element
        element_id=element_id,
        direction=direction,  # type: ignore[arg-type]  # checked against DIRECTIONS
        requested_time=asked,
        time=instant,
        max_elements=max_elements,
        items=list(items),
        complete=complete,
        stop_reason=stop_reason,  # type: ignore[arg-type]  # one of StopReason
        dominant_path_end=path_end,
        ends=list(ends[:MAX_ENDS]),
        ends_total=len(ends),
    )
    return FlowTraceResult(
        source="model_baseline",
        source_ref=(
            f"project:{scope.project_slug}/model-baseline/{element_type}/{element_id}/trace"
            f"?direction={direction}@{instant.isoformat()}"
        ),
        queried_at=datetime.now(UTC),
        origin="model_baseline",
        data=data,
        window=TimeWindow(start=instant, end=instant),
        units={"flow": Q_FLOW},
        truncated=not complete,
        continue_with=(
            {
                "element_type": element_type,
                "element_id": element_id,
                "direction": direction,
                "time": asked.isoformat().replace("+00:00", "Z"),
                "max_elements": MAX_TRACE_ELEMENTS,
            }
            if not complete and max_elements < MAX_TRACE_ELEMENTS
            else None
        ),
    )
