"""An analysis run's series against the model baseline, as a server-rendered SVG (the run's admin page).

The same pattern as the device chart (``queries.admin_chart``): no script and no style attribute (the
admin's Content-Security-Policy forbids both), every text escaped, every query bounded. The chart shows one
field of one element: the run's scenario series (blue) and the project's model baseline of the same element
and field over the run's window (orange, dashed), times on the project's clock, values in the project's unit
system (``queries.units.shown``, the conversion of every tool's answer). A gap breaks a line.

Which element: the one asked (``?element=ID``, with ``?element_type=`` where a node and a link share an id),
else the most affected one the results name (``affected_nodes`` first, the most affected first, then every
result's elements by sequence) that has a stored series, else the run's first stored series. Which field: the
one asked (``?field=``), else what the kind changes most — a contaminant's quality, a flushing's velocity,
otherwise pressure of a node and flow of a link. The baseline injects no contaminant, so quality is drawn
without it (said in the legend). The baseline is the project's, as stored now (re-simulated from the current
model version): a run pinned to an older version is compared with the current model (the caption says which
version the run ran on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import urlencode

from django.db.models import Case, IntegerField, Value, When

from queries.admin_chart import HEIGHT, PAD, WIDTH, polylines
from queries.models import (
    LINK_TYPES,
    NODE_TYPES,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
    LinkBaseline,
    NodeBaseline,
)
from queries.timezones import project_zone
from queries.units import Q_FLOW, Q_HEAD, Q_PRESSURE, Q_QUALITY, Q_VELOCITY, Shown, shown

MAX_POINTS = 3000
#: Results read for the default element, and elements named from them (each a bounded query).
MAX_RESULTS = 20
MAX_CANDIDATES = 20
#: The fields charted, with their quantity (``queries.units``).
QUANTITY: dict[str, str] = {
    "pressure": Q_PRESSURE,
    "head": Q_HEAD,
    "demand": Q_FLOW,
    "quality": Q_QUALITY,
    "flow": Q_FLOW,
    "velocity": Q_VELOCITY,
}
NODE_FIELDS = ("pressure", "head", "demand")
LINK_FIELDS = ("flow", "velocity")
#: A contaminant run's quality is EPANET CHEM (stored kg/m³, shown mg/L).
QUALITY_TYPE = "CHEMICAL"

Element = tuple[str, str]  # (element_type, element_id)


@dataclass(frozen=True)
class RunChart:
    """What the run's admin page shows: the element and field charted (None when nothing can be), the
    fields offered for it, elements of the results with a series (to pick from), and the escaped markup
    (the SVG, or a sentence saying why there is none)."""

    element: Element | None
    field: str
    fields: tuple[str, ...]
    candidates: list[Element]
    html: str


def fields_for(run: AnalysisRun, element_type: str) -> tuple[str, ...]:
    if element_type in NODE_TYPES:
        return (*NODE_FIELDS, "quality") if run.kind == "contaminant" else NODE_FIELDS
    return LINK_FIELDS


def default_field(run: AnalysisRun, element_type: str) -> str:
    if element_type in NODE_TYPES:
        return "quality" if run.kind == "contaminant" else "pressure"
    return "velocity" if run.kind == "flushing" else "flow"


def _series_model(element_type: str) -> type[AnalysisNodeSeries] | type[AnalysisLinkSeries]:
    return AnalysisNodeSeries if element_type in NODE_TYPES else AnalysisLinkSeries


def _result_elements(run: AnalysisRun) -> list[Element]:
    """The elements the run's results name, ``affected_nodes`` first (its most affected first), then every
    other result's by sequence; at most ``MAX_CANDIDATES``, each once. One query."""
    first = Case(When(result_type="affected_nodes", then=Value(0)), default=Value(1), output_field=IntegerField())
    rows = (
        AnalysisResult.objects.filter(run=run)
        .annotate(first=first)
        .order_by("first", "sequence")
        .values_list("element_refs", flat=True)[:MAX_RESULTS]
    )
    seen: dict[Element, None] = {}
    for refs in rows:
        for ref in refs if isinstance(refs, list) else []:
            if not isinstance(ref, Mapping):
                continue
            element = (str(ref.get("element_type", "")), str(ref.get("element_id", "")))
            if element[0] in (*NODE_TYPES, *LINK_TYPES) and element[1]:
                seen.setdefault(element, None)
            if len(seen) >= MAX_CANDIDATES:
                return list(seen)
    return list(seen)


def _with_series(run: AnalysisRun, elements: Sequence[Element]) -> list[Element]:
    """Those of ``elements`` the run stores a series of, in their order (one query per family asked)."""
    stored: set[Element] = set()
    for types, model in ((NODE_TYPES, AnalysisNodeSeries), (LINK_TYPES, AnalysisLinkSeries)):
        ids = [i for t, i in elements if t in types]
        if ids:
            found = (
                model.objects.filter(run=run, element_id__in=ids)
                .order_by()
                .values_list("element_type", "element_id")
                .distinct()[: 2 * MAX_CANDIDATES]
            )
            stored.update(found)
    return [e for e in elements if e in stored]


def _first_stored(run: AnalysisRun) -> Element | None:
    """The run's first stored series element, nodes before links (an index probe each)."""
    for model in (AnalysisNodeSeries, AnalysisLinkSeries):
        row = model.objects.filter(run=run).order_by("element_type", "element_id", "time")
        first = row.values_list("element_type", "element_id")[:1]
        if first:
            return first[0]
    return None


def _asked(run: AnalysisRun, element_id: str, element_type: str) -> Element | None:
    """The element asked for, when the run stores its series (a node first where the type is not given)."""
    types = [element_type] if element_type in (*NODE_TYPES, *LINK_TYPES) else [*NODE_TYPES, *LINK_TYPES]
    for model, family in ((AnalysisNodeSeries, NODE_TYPES), (AnalysisLinkSeries, LINK_TYPES)):
        wanted = [t for t in types if t in family]
        if not wanted:
            continue
        row = model.objects.filter(run=run, element_type__in=wanted, element_id=element_id)
        found = row.order_by("element_type").values_list("element_type", "element_id")[:1]
        if found:
            return found[0]
    return None


def _how(field: str, unit_system: str) -> Shown | None:
    return shown(QUANTITY[field], unit_system=unit_system, quality_type=QUALITY_TYPE)


def _points(rows: Sequence[tuple[datetime, float | None]], how: Shown | None) -> list[tuple[datetime, float | None]]:
    if how is None:
        return list(rows)
    return [(t, None if v is None else how(v)) for t, v in rows]


def _sentence(text: str) -> str:
    return f'<p class="tjw-run-chart-none">{escape(text)}</p>'


def chart_link(element: Element, field: str = "") -> str:
    """The query string that charts ``element`` (and ``field``) on the run's page."""
    query = {"element": element[1], "element_type": element[0]}
    if field:
        query["field"] = field
    return "?" + urlencode(query)


def run_chart(run: AnalysisRun, params: Mapping[str, str]) -> RunChart:
    """The chart of ``run`` for the page's query ``params`` (``element``, ``element_type``, ``field``); see
    the module docstring. At most seven bounded queries (no more for a longer run)."""
    status = run.job.status if run.job is not None else run.status
    candidates = _with_series(run, _result_elements(run))
    asked = str(params.get("element", "")).strip()[:64]
    if status != "succeeded":
        return RunChart(None, "", (), candidates, _sentence(f"Run {run.run_id} is {status}: it has no series."))
    element = _asked(run, asked, str(params.get("element_type", ""))) if asked else None
    if asked and element is None:
        text = f"Run {run.run_id} stores no series for element {asked!r}; pick one below."
        return RunChart(None, "", (), candidates, _sentence(text))
    element = element or (candidates[0] if candidates else None) or _first_stored(run)
    if element is None:
        return RunChart(None, "", (), candidates, _sentence(f"Run {run.run_id} stores no series."))
    fields = fields_for(run, element[0])
    field = str(params.get("field", ""))
    field = field if field in fields else default_field(run, element[0])
    return RunChart(element, field, fields, candidates, _svg(run, element, field))


def _svg(run: AnalysisRun, element: Element, field: str) -> str:
    element_type, element_id = element
    scenario: list[tuple[datetime, Any]] = list(
        _series_model(element_type)
        .objects.filter(run=run, element_type=element_type, element_id=element_id)
        .order_by("time")
        .values_list("time", field)[:MAX_POINTS]
    )
    if not scenario:
        return _sentence(f"Run {run.run_id} stores no series for {element_type} {element_id}.")
    start, end = scenario[0][0], scenario[-1][0]
    baseline: list[tuple[datetime, Any]] = []
    if field != "quality":  # the baseline injects no contaminant: nothing to compare a quality with
        base = NodeBaseline if element_type in NODE_TYPES else LinkBaseline
        baseline = list(
            base.objects.filter(
                project_id=run.project_id,
                element_type=element_type,
                element_id=element_id,
                time__gte=start,
                time__lte=end,
            )
            .order_by("time")
            .values_list("time", field)[:MAX_POINTS]
        )
    project = run.project
    how = _how(field, project.unit_system)
    unit = escape(how.label if how is not None else "")
    scenario, baseline = _points(scenario, how), _points(baseline, how)
    values = [v for _, v in scenario + baseline if v is not None]
    if not values:
        return _sentence(f"The {field} of {element_type} {element_id} holds no values in this run (only gaps).")
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    if end <= start:
        end = start + timedelta(minutes=1)
    span = (end - start).total_seconds()

    def x(t: datetime) -> float:
        return PAD + (t - start).total_seconds() / span * (WIDTH - 2 * PAD)

    def y(v: float) -> float:
        return HEIGHT - PAD - (v - lo) / (hi - lo) * (HEIGHT - 2 * PAD)

    zone = project_zone(project)
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)
    what = escape(f"{element_type} {element_id}: {field}")
    run_label = escape(run.run_id)
    version = f" on model version {run.model_version.version}" if run.model_version is not None else ""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="tjw-run-chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{what}: run {run_label} against the model '
        'baseline">',
        f'<rect x="{PAD}" y="{PAD}" width="{WIDTH - 2 * PAD}" height="{HEIGHT - 2 * PAD}" fill="#fafafa" '
        'stroke="#ccc"/>',
    ]
    for label, data, colour, dash in (
        ("run", scenario, "#1f77b4", ""),
        ("model-baseline", baseline, "#ff7f0e", ' stroke-dasharray="6 3"'),
    ):
        for points in polylines(data, x, y):
            parts.append(f'<polyline class="tjw-{label}" points="{points}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.5"{dash}/>')  # fmt: skip
    if field == "quality":
        missing = " (none: the baseline injects no contaminant)"
    else:
        missing = "" if baseline else " (none in this window)"
    parts += [
        f'<text x="{PAD}" y="16" font-size="12" fill="#333">{what} ({unit or "no unit"}) · run {run_label}'
        f"{escape(version)}</text>",
        f'<text x="{PAD}" y="{PAD - 8}" font-size="12" fill="#333">{hi:.4g} {unit}</text>',
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" font-size="12" fill="#333">{lo:.4g} {unit} · '
        f"{local_start:%Y-%m-%d %H:%M} {escape(local_start.tzname() or '')}</text>",
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" font-size="12" fill="#333" text-anchor="end">'
        f"{local_end:%Y-%m-%d %H:%M} {escape(local_end.tzname() or '')} ({escape(zone.key)})</text>",
        f'<text x="{WIDTH - PAD}" y="{PAD - 8}" font-size="12" text-anchor="end"><tspan fill="#1f77b4">run'
        f'</tspan> · <tspan fill="#ff7f0e">model baseline{escape(missing)}</tspan></text>',
        "</svg>",
    ]
    return "".join(parts)
