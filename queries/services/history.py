"""query_element_history (R-PAGE-3): what was measured at some elements, beside what a model says.

Modes:

- ``observed`` — the measured (``monitored_value``) and cleaned (``cleaned_value``) series of every SCADA
  device installed on the given elements, quality flags kept;
- ``realtime_comparison`` — the same, plus the model baseline of those elements (``simulation.view``);
- ``analysis_comparison`` — the same, plus the series of the analysis run ``run_id`` for those elements
  (``simulation.view``).

The model field is the one a device measures there: pressure at nodes (at a tank EPANET's pressure is
the water level above the tank bottom, what a level transmitter reads), flow in links.

All series are paged together by ONE ``UNION ALL`` statement with one global, stable order — SCADA
series by device id (C collation), measured before cleaned, then the model series by element type and
element id (C collation), every series in time order — and a global LIMIT/OFFSET that reads one row
more than the page to tell ``has_more`` (``total`` is null: the union is not counted). Reading the
pages in turn yields exactly the concatenation of the series in that order.

Missing model data is never silently absent: in ``realtime_comparison`` the parts of the window the
model baseline does not cover are data gaps naming the range it does cover (one extra query: the
instants in the window and the baseline's first and last instant); in ``analysis_comparison`` the parts
outside the run's series likewise.

Input: ``elements`` = 1–20 ``{element_type, element_id}`` of the bound project (a missing one is "not
found"), a window of at most 24 h with timezones, ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.scope import QueryScope
from queries.fitting import least_json_bytes, model_skeleton
from queries.models import (
    ELEMENT_MODELS,
    NODE_TYPES,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    LinkBaseline,
    NodeBaseline,
    ScadaDevice,
    ScadaReading,
)
from queries.paging import budgeted_rows
from queries.plan import Plan, Raw, Statement, Together, service
from queries.scada_units import STORAGE_UNITS
from queries.schemas.common import MAX_OFFSET, DataGap, PageInfo, PageRequest, check_series_bytes
from queries.schemas.history import ElementHistoryPage, ElementHistoryResult, ElementKey, HistoryDevice, HistoryPoint
from queries.services.analysis import require_series, run_with_span
from queries.services.windows import MAX_LOCAL_WINDOW, local_window
from queries.units import SCADA_QUANTITY

SOURCE = "element_history"
MAX_ELEMENTS = 20  # R-PAGE-2: at most 20 targets
MAX_WINDOW = MAX_LOCAL_WINDOW  # R-PAGE-2: 24 *local* hours of the project's zone (queries.services.windows)
MAX_DEVICES = 100  # devices on the requested elements (a handful each at most, in practice)
_LEAST_POINT_BYTES = least_json_bytes(model_skeleton(HistoryPoint))  # one point's fewest bytes (queries.fitting)
DEFAULT_POINTS = 50
MAX_POINTS = 500
MODES = ("observed", "realtime_comparison", "analysis_comparison")
MAX_COVERAGE_ROWS = 1443  # instants of 24 h at the smallest baseline step (60 s) + first + last
BASELINE_STEP = timedelta(minutes=15)  # the step assumed when a window holds fewer than two instants
#: Each field's quantity (``queries.units``: shown in the project's unit system by ``present``); the
#: states (pump status and speed, valve position) keep their storage labels. The model fields pressure and
#: flow are among the names.
UNITS = {q: SCADA_QUANTITY[q][0] if q in SCADA_QUANTITY else unit for q, unit in STORAGE_UNITS.items()}
C = "C"  # byte-order collation: the same order on every database, whatever its default collation

# The union's columns, identical in every branch (names and order): the first six are the sort key.
COLUMNS = ("h_part", "h_key", "h_rank", "h_type", "h_id", "h_time", "h_value", "h_quality")
ORDER = COLUMNS[:6]
RAW, CLEANED, MODEL = 0, 1, 2


def _model_field(element_type: str) -> str:
    return "pressure" if element_type in NODE_TYPES else "flow"


NODE_KINDS = tuple(t for t in ELEMENT_MODELS if t in NODE_TYPES)  # junction, reservoir, tank
LINK_KINDS = tuple(t for t in ELEMENT_MODELS if t not in NODE_TYPES)  # pipe, pump, valve
ALL_KINDS = NODE_KINDS + LINK_KINDS


def _pairs_sql(kinds: Sequence[str], alias: str = "") -> str:
    """``(type = kind AND id = ANY(ids)) OR …``, one test per element type of ``kinds``, each type's ids a
    parameter (``_ids``; a type not asked for gets an empty array): every call shares one statement."""
    return " OR ".join(f"({alias}element_type = '{kind}' AND {alias}element_id = ANY(%s::text[]))" for kind in kinds)


def _ids(elements: Sequence[ElementKey], kinds: Sequence[str]) -> list[list[str]]:
    """The parameters of ``_pairs_sql(kinds)``: the requested ids of each element type, in ``kinds`` order."""
    return [[k.element_id for k in elements if k.element_type == kind] for kind in kinds]


def _page_sql(node_table: str, link_table: str, owner: str) -> str:
    """The page of the union as one statement written out (``Raw``): the SCADA branches (measured, cleaned)
    and the model branches (nodes' pressure, links' flow) with the columns of ``COLUMNS`` and the global
    order of the module docstring. Built and compiled as an ORM UNION ALL queryset (uncacheable: typed
    literals, collations), that statement was ≈ 35 % of a call's CPU (``py-spy``, ``mcp_app/README.md``
    "Measuring"). Every branch is always there; one with nothing to read gets
    empty arrays (the devices, or the ids of each element type). The model rows are those of ``owner``
    (``project_id`` for the baseline, ``run_id`` for a run's series); table names are the models' own."""
    reading = ScadaReading._meta.db_table
    device = ScadaDevice._meta.db_table
    scada = """
    SELECT 0 AS h_part, d.device_id COLLATE "C" AS h_key, {rank} AS h_rank, d.element_type COLLATE "C" AS h_type,
           d.element_id COLLATE "C" AS h_id, x.time AS h_time, x.{value} AS h_value, x.quality::varchar(16) AS h_quality
    FROM {reading} x JOIN {device} d ON d.id = x.device_id
    WHERE x.device_id = ANY(%s::bigint[]) AND d.project_id = %s AND x.time >= %s AND x.time < %s"""
    model = """
    SELECT 1, ''::varchar COLLATE "C", 2, b.element_type COLLATE "C", b.element_id COLLATE "C", b.time,
           b.{field}::double precision, NULL::varchar(16)
    FROM {table} b
    WHERE b.{owner} = %s AND b.time >= %s AND b.time < %s AND ({pairs})"""
    branches = [
        scada.format(rank=RAW, value="monitored_value", reading=reading, device=device),
        scada.format(rank=CLEANED, value="cleaned_value", reading=reading, device=device),
        model.format(field="pressure", table=node_table, owner=owner, pairs=_pairs_sql(NODE_KINDS, "b.")),
        model.format(field="flow", table=link_table, owner=owner, pairs=_pairs_sql(LINK_KINDS, "b.")),
    ]
    return (
        "SELECT * FROM (" + "\n    UNION ALL".join(branches) + "\n) h\n"
        "ORDER BY h_part, h_key, h_rank, h_type, h_id, h_time LIMIT %s OFFSET %s"
    )


_PAGE_SQL = {
    "baseline": _page_sql(NodeBaseline._meta.db_table, LinkBaseline._meta.db_table, "project_id"),
    "run": _page_sql(AnalysisNodeSeries._meta.db_table, AnalysisLinkSeries._meta.db_table, "run_id"),
}


def _page(
    scope: QueryScope,
    device_pks: Sequence[int],
    elements: Sequence[ElementKey],
    start: datetime,
    end: datetime,
    run_pk: int | None,
    limit: int,
    offset: int,
) -> Raw:
    """``limit`` rows of the union from ``offset``: the devices' measured and cleaned series, and the model
    series of ``elements`` — the baseline of the project, or (``run_pk``) the run's (none: ``[]``)."""
    window = [start, end]
    owner = run_pk if run_pk is not None else scope.project_id
    params: list[Any] = [list(device_pks), scope.project_id, *window] * 2
    params += [owner, *window, *_ids(elements, NODE_KINDS)]
    params += [owner, *window, *_ids(elements, LINK_KINDS)]
    return Raw(_PAGE_SQL["run" if run_pk is not None else "baseline"], [*params, limit, offset], COLUMNS)


def _validate(
    scope: QueryScope, elements: Sequence[ElementKey], start: datetime, end: datetime, mode: str, run_id: str | None
) -> None:
    if mode not in MODES:
        raise InvalidParameter(f"mode must be one of {', '.join(MODES)}.")
    if mode == "analysis_comparison" and not run_id:
        raise InvalidParameter("mode analysis_comparison needs run_id (list_analysis_runs lists them).")
    if mode != "analysis_comparison" and run_id:
        raise InvalidParameter("run_id applies only to mode analysis_comparison.")
    if not 1 <= len(elements) <= MAX_ELEMENTS:
        raise LimitExceeded(f"elements must name 1 to {MAX_ELEMENTS} elements; split the request.")
    if len({(k.element_type, k.element_id) for k in elements}) != len(elements):
        raise InvalidParameter("elements must not repeat an element.")
    for k in elements:
        if k.element_type not in ELEMENT_MODELS:
            raise InvalidParameter(f"element_type must be one of {', '.join(ELEMENT_MODELS)}.")
    local_window(start, end, timezone=scope.timezone)  # ≤ 24 local hours of the project's zone (R-PAGE-2)


def _existing_sql() -> str:
    """The requested elements that exist in the project, ``(e_type, e_id)``: one branch per element type,
    each an index probe of its table (a type not asked for gets an empty array)."""
    branches = [
        f"SELECT '{kind}'::varchar AS e_type, element_id AS e_id FROM {ELEMENT_MODELS[kind]._meta.db_table} "
        "WHERE project_id = %s AND element_id = ANY(%s::text[])"
        for kind in ALL_KINDS
    ]
    return "\nUNION ALL ".join(branches) + "\nLIMIT %s"


_EXISTING_SQL = _existing_sql()


def _existing(scope: QueryScope, elements: Sequence[ElementKey]) -> Raw:
    """The requested elements that exist in the project: one statement (``_existing_sql``; written out as
    the page is, for the same reason)."""
    params = [p for ids in _ids(elements, ALL_KINDS) for p in (scope.project_id, ids)]
    return Raw(_EXISTING_SQL, [*params, MAX_ELEMENTS + 1], ("e_type", "e_id"))


def _devices_sql() -> str:
    """The SCADA devices on the requested elements, in ``device_id`` order (``_pairs_sql``: an ORM ``OR`` of
    the requested types was built and compiled per call, ≈ 9 % of a maximal page's CPU, ``mcp_app/README.md``
    "Measuring")."""
    return (
        "SELECT id, device_id, quantity, unit, element_type, element_id, sample_interval_s "
        f"FROM {ScadaDevice._meta.db_table} WHERE project_id = %s AND ({_pairs_sql(ALL_KINDS)}) "
        "ORDER BY device_id LIMIT %s"
    )


_DEVICES_SQL = _devices_sql()
_DEVICE_COLUMNS = ("pk", "device_id", "quantity", "unit", "element_type", "element_id", "sample_interval_s")


def _devices(scope: QueryScope, elements: Sequence[ElementKey]) -> Raw:
    """Up to ``MAX_DEVICES + 1`` devices on ``elements`` (one more tells that there are too many)."""
    return Raw(_DEVICES_SQL, [scope.project_id, *_ids(elements, ALL_KINDS), MAX_DEVICES + 1], _DEVICE_COLUMNS)


def _coverage_sql(table: str, kinds: Sequence[str]) -> str:
    """See ``_baseline_coverage``. ``kinds``: the element types of the table (their ids are parameters)."""
    where = f"FROM {table} WHERE project_id = %s AND ({_pairs_sql(kinds)})"
    return (
        f"(SELECT DISTINCT 0 AS c_kind, time {where} AND time >= %s AND time < %s)\n"
        f"UNION ALL (SELECT 1, time {where} ORDER BY time LIMIT 1)\n"
        f"UNION ALL (SELECT 2, time {where} ORDER BY time DESC LIMIT 1)\n"
        "LIMIT %s"
    )


_COVERAGE_SQL = {
    True: _coverage_sql(NodeBaseline._meta.db_table, NODE_KINDS),
    False: _coverage_sql(LinkBaseline._meta.db_table, LINK_KINDS),
}


def _baseline_coverage(scope: QueryScope, keys: Sequence[ElementKey], start: datetime, end: datetime) -> Raw:
    """One statement: the baseline instants of the requested elements in ``[start, end)`` (elements of
    one simulation share instants) and the first and last instant of their baseline (the covered range a
    gap names), each a range read of the (project, type, element, time) index. The first and last instant
    are the requested elements' own, not the project's: the table has no (project, time) index, and on a
    project-wide read PostgreSQL scans every project's rows (10 M baseline rows: 2.1 s a call). The nodes'
    baseline when the first element is a node, else the links'."""
    nodes = keys[0].element_type in NODE_TYPES
    kinds = NODE_KINDS if nodes else LINK_KINDS
    where = [scope.project_id, *_ids(keys, kinds)]
    # Bounded (R-PAGE-1): a 24 h window holds at most 1441 instants at the smallest step (60 s).
    return Raw(_COVERAGE_SQL[nodes], [*where, start, end, *where, *where, MAX_COVERAGE_ROWS], ("c_kind", "time"))


def model_gaps(
    instants: Sequence[datetime],
    start: datetime,
    end: datetime,
    *,
    step: timedelta,
    what: str,
    covered: tuple[datetime, datetime] | None,
) -> list[DataGap]:
    """The parts of ``[start, end)`` a stepped model series (an instant holds until the next step) does
    not cover, each a gap naming the range the series does cover — missing model data is reported,
    never silently absent."""
    span = (
        f"{what} covers {covered[0]:%Y-%m-%dT%H:%MZ} to {covered[1]:%Y-%m-%dT%H:%MZ}"
        if covered
        else f"there is no {what} at all"
    )
    holes: list[tuple[datetime, datetime]] = []
    cursor = start
    for t in sorted(instants):
        if t > cursor:
            holes.append((cursor, t))
        cursor = max(cursor, t + step)
    if cursor < end:
        holes.append((cursor, end))
    return [
        DataGap(start=a, end=b, reason=f"No {what} from {a:%Y-%m-%dT%H:%MZ} to {b:%Y-%m-%dT%H:%MZ}: the {span}.")
        for a, b in holes
    ]


def _run_gaps(start: datetime, end: datetime, first: datetime, last: datetime) -> list[DataGap]:
    """The parts of ``[start, end)`` outside an analysis run's series ``[first, last]``."""
    what = f"analysis run's series cover {first:%Y-%m-%dT%H:%MZ} to {last:%Y-%m-%dT%H:%MZ} only"
    parts = [(start, min(first, end))] if start < first else []
    if end > last:
        parts.append((max(last, start), end))
    return [
        DataGap(
            start=a,
            end=b,
            reason=f"No analysis run values from {a:%Y-%m-%dT%H:%MZ} to {b:%Y-%m-%dT%H:%MZ}: the {what}.",
        )
        for a, b in parts
        if b > a
    ]


def _measured_gaps(points: Sequence[HistoryPoint], interval_s: dict[str, int]) -> list[DataGap]:
    """Runs of slots in this page where a device sent nothing (measured value null): reported, never
    filled. ``end`` is exclusive (the slot after the last missing one)."""
    gaps: list[DataGap] = []
    run: list[HistoryPoint] = []

    def close() -> None:
        if run:
            step = timedelta(seconds=interval_s.get(run[0].device_id or "", 300))
            gaps.append(
                DataGap(
                    start=run[0].time,
                    end=run[-1].time + step,
                    reason=f"Device {run[0].device_id}: nothing received ({len(run)} slot(s)); not filled.",
                )
            )
            run.clear()

    for p in points:
        if p.origin == "measured" and p.value is None:
            if run and (run[-1].device_id != p.device_id):
                close()
            run.append(p)
        else:
            close()
    close()
    return gaps


@service
def query_element_history(
    *,
    scope: QueryScope,
    elements: Sequence[ElementKey],
    start: datetime,
    end: datetime,
    mode: str,
    run_id: str | None = None,
    page: PageRequest,
) -> Plan[ElementHistoryResult]:
    """One page of the elements' history in the global order of R-PAGE-3 (three queries: the elements,
    their devices, the UNION ALL page; ``analysis_comparison`` adds one for the run,
    ``realtime_comparison`` one for the baseline's coverage; all but the page in one round trip on the MCP
    driver)."""
    _validate(scope, elements, start, end, mode, run_id)
    # The elements, their devices and the mode's run or baseline coverage need nothing from each other's rows:
    # one round trip on the MCP driver; checked below in the order the errors are given.
    by_mode: list[Statement] = []
    if mode == "analysis_comparison":
        span_model = AnalysisNodeSeries if elements[0].element_type in NODE_TYPES else AnalysisLinkSeries
        by_mode = [run_with_span(span_model, elements[0].element_type, scope.project_id, run_id)]
    elif mode == "realtime_comparison":
        by_mode = [_baseline_coverage(scope, elements, start, end)]
    found, devices, *mode_rows = yield Together(_existing(scope, elements), _devices(scope, elements), *by_mode)
    missing = sorted({(k.element_type, k.element_id) for k in elements} - {(r["e_type"], r["e_id"]) for r in found})
    if missing:
        t, i = missing[0]
        raise NotFound(f"No {t} {i} in this project.")

    run: dict[str, Any] | None = None
    if mode == "analysis_comparison":
        runs = mode_rows[0]
        if not runs:
            raise NotFound("No analysis run with that id in this project.")
        run = runs[0]
        require_series(str(run_id), run)

    if len(devices) > MAX_DEVICES:
        raise LimitExceeded(f"More than {MAX_DEVICES} devices on these elements; name fewer elements.")

    pks = [d["pk"] for d in devices]
    modelled = [] if mode == "observed" else list(elements)
    run_pk = run["pk"] if run is not None else None
    coverage: list[dict[str, Any]] = mode_rows[0] if mode == "realtime_comparison" else []

    rows: list[dict[str, Any]] = []
    has_more = False
    if pks or modelled:
        # Under the MCP edge's inline budget only the points that can fit are read (``queries.fitting``).
        rows, more = yield from budgeted_rows(
            lambda n: _page(scope, pks, modelled, start, end, run_pk, n, page.offset), page.limit, _LEAST_POINT_BYTES
        )
        has_more = bool(more)

    by_device = {d["device_id"]: d for d in devices}
    model_origin = "model_baseline" if mode == "realtime_comparison" else "analysis_run"
    # Rows typed by their columns (the union's statement casts each one to the model's type): built without
    # re-validation, as the baseline series' points are.
    points = [
        HistoryPoint.model_construct(
            origin=("measured", "cleaned", model_origin)[r["h_rank"]],
            device_id=r["h_key"] if r["h_part"] == 0 else None,
            element_type=r["h_type"],
            element_id=r["h_id"],
            field=by_device[r["h_key"]]["quantity"] if r["h_part"] == 0 else _model_field(r["h_type"]),
            time=r["h_time"],
            value=r["h_value"],
            quality=r["h_quality"],
        )
        for r in rows
    ]
    check_series_bytes(points)  # ≤ 8 MiB (R-PAGE-2; the page is ≤ 500 points)

    gaps = [
        DataGap(start=start, end=end, reason=f"No SCADA device on {k.element_type} {k.element_id}: nothing measured.")
        for k in elements
        if not any(d["element_type"] == k.element_type and d["element_id"] == k.element_id for d in devices)
    ]
    gaps += _measured_gaps(points, {d["device_id"]: d["sample_interval_s"] for d in devices})
    if mode == "realtime_comparison":
        inside = [c["time"] for c in coverage if c["c_kind"] == 0]
        ends = {c["c_kind"]: c["time"] for c in coverage if c["c_kind"] != 0}
        steps = [b - a for a, b in zip(sorted(inside), sorted(inside)[1:], strict=False)]
        gaps += model_gaps(
            inside, start, end, step=min(steps, default=BASELINE_STEP), what="model baseline",
            covered=(ends[1], ends[2]) if ends else None,
        )  # fmt: skip
    if run is not None and run["first_time"] is not None and (start < run["first_time"] or end > run["last_time"]):
        # The run's series are contiguous from their first to their last instant: what lies outside is
        # reported with the range they cover.
        gaps += _run_gaps(start, end, run["first_time"], run["last_time"])
    truncated = has_more and page.offset + page.limit > MAX_OFFSET
    if truncated:
        gaps.append(
            DataGap(
                reason=f"More points follow beyond offset {MAX_OFFSET}, which paging cannot reach: narrow the "
                "window or name fewer elements to read them."
            )
        )

    data = ElementHistoryPage(
        items=points,
        total=None,
        limit=page.limit,
        offset=page.offset,
        has_more=has_more,
        mode=mode,  # type: ignore[arg-type]  # checked by _validate
        run_id=run_id,
        elements=list(elements),
        devices=[HistoryDevice(**{k: d[k] for k in HistoryDevice.model_fields}) for d in devices],
    )
    fields = {d["quantity"] for d in devices} | (
        {_model_field(k.element_type) for k in elements} if mode != "observed" else set()
    )
    result = ElementHistoryResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/element-history/{mode}" + (f"/{run_id}" if run_id else ""),
        queried_at=datetime.now(UTC),
        origin="measured",
        data=data,
        window=local_window(start, end, timezone=scope.timezone),
        units={f: UNITS[f] for f in sorted(fields) if f in UNITS},
        page=PageInfo(total=None, limit=page.limit, offset=page.offset, has_more=has_more),
        truncated=truncated,
        data_gaps=gaps,
    )
    result._device_quantities = {d["device_id"]: d["quantity"] for d in devices}  # converted by present
    return result
