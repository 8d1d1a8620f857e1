"""EPANET network import: read a .inp with WNTR, georeference it, store elements, patterns, curves,
options and schemas, and the model baseline from a real hydraulic simulation.

``import_network`` replaces a project's network atomically: the file is read and georeferenced
first (nothing is touched if that fails); then, in one transaction, the old network and baseline are
deleted, the new elements written, the simulation run and its baseline written. The simulation runs
inside the transaction because the baseline is part of what is replaced: a network EPANET cannot solve
(e.g. an unconnected node) fails the whole import and the old network and baseline stay as they were.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time as _time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import wntr
from django.db import DataError, IntegrityError, transaction
from django.db.models import Max
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from wntr.epanet.exceptions import EN_ERROR_CODES, EpanetException
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from contexts.models import Project
from queries.importer.bounded import HostileInput, check_lines
from queries.importer.copy import copy_lines, copy_rows, copy_text, linestring_ewkt, point_ewkt
from queries.importer.georef import CrsGeoreferencer, Georeferencer, geographic_or_refusal, placement_of
from queries.models import (
    NETWORK_SCHEMAS,
    Curve,
    Junction,
    LinkBaseline,
    NetworkOptions,
    NetworkSchema,
    NetworkSource,
    NodeBaseline,
    Pattern,
    Pipe,
    Pump,
    Reservoir,
    Tank,
    Valve,
)
from queries.runs.engine import EngineFailure, run_epanet, set_window
from queries.timezones import project_zone

logger = logging.getLogger(__name__)

#: Fixed origin of the demo's simulated time, so the demo is deterministic (imports default to the
#: project's current local day instead, ``local_day_start``).
BASELINE_START = datetime(2026, 11, 1, tzinfo=UTC)
DEFAULT_CENTER = (117.2, 39.1)


class NetworkImportError(Exception):
    """A network could not be imported; the message is one line meant for the operator."""

    code = "NETWORK_IMPORT_REFUSED"


class NetworkCrsRequired(NetworkImportError):
    """The coordinates are not lon/lat and the caller gave neither their CRS nor a centre to place them
    about: a default centre would put the utility somewhere it is not, silently (issue 40 item 6)."""

    code = "NETWORK_CRS_REQUIRED"


@dataclass
class ImportSummary:
    """What an import wrote."""

    project_slug: str
    counts: dict[str, int] = field(default_factory=dict)
    baseline_steps: int = 0
    seconds: float = 0.0
    #: How the coordinates were placed on the ground, in words (``placement_of``).
    placement: str = ""
    #: The model version the import created and the SHA-256 of its .inp text.
    model_version: int = 0
    sha256: str = ""


def wntr_network_path(name: str) -> Path:
    """Path of an example network shipped inside the WNTR package (``Net6.inp``, ``ky4.inp``, …)."""
    return Path(wntr.__file__).parent / "library" / "networks" / name


def read_inp(path: Path) -> WaterNetworkModel:
    """Read an EPANET .inp file with WNTR; a missing or unreadable file raises ``NetworkImportError``
    naming the section and line at fault and what is wrong there (``describe_inp_error``)."""
    if not path.is_file():
        raise NetworkImportError(f"network file not found: {path}")
    try:
        check_lines(path, what="network file")  # line bound, NUL and UTF-8 by line, before WNTR reads it whole
    except HostileInput as exc:
        raise NetworkImportError(f"not a readable EPANET .inp file: {exc}") from None
    try:
        wn = WaterNetworkModel(str(path))
    except OSError as exc:
        raise NetworkImportError(f"cannot read network file {path.name}: {exc.strerror or 'I/O error'}") from exc
    except UnicodeDecodeError as exc:
        raise NetworkImportError(
            f"not a readable EPANET .inp file: {path.name}: not UTF-8 text (byte {exc.start})"
        ) from exc
    except (
        ValueError, KeyError, IndexError, RuntimeError, EpanetException, AttributeError, TypeError, AssertionError,
    ) as exc:  # fmt: skip
        # WNTR's .inp reader reports malformed sections with these (ENSyntaxError is a ValueError subclass).
        reason = describe_inp_error(exc, path)
        raise NetworkImportError(f"not a readable EPANET .inp file: {path.name}: {reason}") from exc
    if wn.num_nodes == 0:
        raise NetworkImportError(f"not a readable EPANET .inp file: {path.name}: no nodes")
    return wn


def epanet_meaning(code: int) -> str:
    """EPANET's own meaning of an error code (its manual's table, as WNTR ships it), placeholders dropped."""
    text = EN_ERROR_CODES.get(code, "unknown error")
    return re.sub(r",?\s*\(?%s\)?", "", text).strip()


def _reader_frame(exc: BaseException) -> tuple[str, int, str] | None:
    """The section, line number and line text WNTR's reader was at when ``exc`` was raised.

    WNTR's ``InpFile._read_<section>`` methods loop ``for lnum, line in self.sections[...]``; its
    exceptions carry the line only for some errors, so the innermost such frame of the traceback (or of
    the exception it wraps) is read. This is WNTR's private structure (verified against wntr 1.5.0);
    without it the message just has no line."""
    seen: set[int] = set()
    current: BaseException | None = exc
    found: tuple[str, int, str] | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            local = tb.tb_frame.f_locals
            if code.co_name.startswith("_read_") and isinstance(local.get("lnum"), int):
                section = "[" + code.co_name.removeprefix("_read_").upper() + "]"
                found = (section, int(local["lnum"]), str(local.get("line", "")))
            tb = tb.tb_next
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _reason(exc: BaseException) -> str:
    """What is wrong, in words (never an exception class name)."""
    inner: BaseException = exc
    while isinstance(inner, EpanetException) and str(inner).startswith("(Error 200)") and inner.__cause__:
        inner = inner.__cause__  # WNTR wraps the real error in a generic "(Error 200) errors in input file"
    message = str(inner.args[0]) if isinstance(inner, EpanetException) and inner.args else str(inner)
    first, _, rest = message.partition("\n")
    text = first.strip()
    if isinstance(inner, EpanetException):
        text = re.sub(r"^\(Error (\d+)\)\s*", "", text)
        text = re.sub(r",?\s*at line \d+:?$", "", text).strip()
        text = text.replace("(%s)", "").strip().rstrip(",")
        if rest.strip():  # the offending line, as WNTR quotes it
            text += f" in {rest.strip()[:60]!r}"
        return text
    if isinstance(inner, AttributeError) and "factor" in text:
        return "the flow units are unknown (no UNITS in an [OPTIONS] section)"
    if isinstance(inner, IndexError):
        return "too few fields on the line"
    if isinstance(inner, ValueError) and text.startswith("could not convert string to float"):
        return "not a number: " + text.rsplit(":", 1)[-1].strip()
    if isinstance(inner, KeyError):
        return f"unknown name {text}"
    return text or "malformed content"


def describe_inp_error(exc: BaseException, path: Path) -> str:
    """One line: ``[SECTION] line N: reason`` (plus a hint when the file looks truncated)."""
    where = _reader_frame(exc)
    if where is None:
        match = re.search(r"at line (\d+)", str(exc))
        cause_match = re.search(r"at line (\d+)", str(exc.__cause__ or ""))
        line_no = match or cause_match
        prefix = f"line {line_no.group(1)}: " if line_no else ""
    else:
        prefix = f"{where[0]} line {where[1]}: "
    hint = ""
    try:
        content = path.read_bytes()
        looks_like_inp = b"[JUNCTIONS]" in content.upper() or b"[PIPES]" in content.upper()
        if looks_like_inp and b"[END]" not in content[-4096:].upper():
            hint = " (the file has no [END] section: is it truncated?)"
    except OSError:
        pass
    return f"{prefix}{_reason(exc)}{hint}"


def check_connected(wn: WaterNetworkModel, *, shown: int = 20) -> None:
    """Refuse a network with nodes that no path of links connects to a reservoir or tank (EPANET
    cannot solve it: error 233/200), naming those nodes (the first ``shown`` of them)."""
    names = list(wn.node_name_list)
    index = {n: i for i, n in enumerate(names)}
    starts = [index[link.start_node_name] for _, link in wn.links()]
    ends = [index[link.end_node_name] for _, link in wn.links()]
    graph = coo_matrix((np.ones(len(starts)), (starts, ends)), shape=(len(names), len(names)))
    _, labels = connected_components(graph, directed=False)
    sources = [index[n] for n in (*wn.reservoir_name_list, *wn.tank_name_list)]
    if not sources:
        raise NetworkImportError("the network has no reservoir or tank (EPANET error 224)")
    fed = np.isin(labels, labels[sources])
    loose = [names[i] for i in np.flatnonzero(~fed)]
    if loose:
        more = f" and {len(loose) - shown} more" if len(loose) > shown else ""
        raise NetworkImportError(
            f"the network is disconnected: {len(loose)} node(s) not connected to any reservoir or tank: "
            f"{', '.join(loose[:shown])}{more}"
        )


def simulate(wn: WaterNetworkModel, *, hours: float, step_minutes: int) -> SimulationResults:
    """Run the EPANET hydraulic (and quality, as the .inp asks) simulation over ``hours`` reported
    every ``step_minutes``. Temporary EPANET files go to a private temporary directory."""
    step = int(step_minutes * 60)
    if step <= 0 or hours <= 0:
        raise NetworkImportError("baseline hours and step minutes must be positive")
    set_window(wn, duration_s=int(hours * 3600), step_s=step)
    try:
        return run_epanet(wn)
    except EngineFailure as exc:
        if exc.code is None:
            raise NetworkImportError("hydraulic simulation failed: EPANET stopped without an error code") from exc
        meaning = epanet_meaning(exc.code)
        raise NetworkImportError(f"hydraulic simulation failed: EPANET error {exc.code}: {meaning}") from exc


def georeferencer_for(
    wn: WaterNetworkModel,
    *,
    center: tuple[float, float] | None,
    scale: float,
    crs: str | None = None,
    file_name: str = "the network",
) -> Georeferencer | CrsGeoreferencer:
    """The exact transform from ``crs`` when the network is drawn in one, else the schematic placement
    about ``center`` with ``scale`` metres per drawn unit. With neither, evidently lon/lat coordinates
    are read as EPSG:4326 and any others are refused (``NetworkCrsRequired``)."""
    if crs:
        try:
            return CrsGeoreferencer(crs=crs)
        except ValueError as exc:
            raise NetworkImportError(str(exc)) from exc
    points: list[tuple[float, float]] = [tuple(n.coordinates) for _, n in wn.nodes()]
    for _, link in wn.links():
        points.extend(tuple(v) for v in link.vertices)
    if center is None:
        refusal = geographic_or_refusal(points, file_name=file_name)
        if refusal:
            raise NetworkCrsRequired(refusal)
        return CrsGeoreferencer(crs="EPSG:4326")
    try:
        return Georeferencer.for_points(points, center=center, scale=scale)
    except ValueError as exc:
        raise NetworkImportError(str(exc)) from exc


# --- rows -------------------------------------------------------------------------------------------


def _name(obj: Any) -> str:
    """A WNTR pattern/curve reference (object, name or None) as a stored name ("" = none)."""
    if obj is None:
        return ""
    return str(getattr(obj, "name", obj))


def _opt(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _status(link: Any) -> str:
    status = str(link.initial_status).upper()
    if getattr(link, "check_valve", False):
        return "CV"
    return status if status in {"OPEN", "CLOSED", "ACTIVE", "CV"} else "OPEN"


@dataclass
class NetworkGeometry:
    """The georeferenced geometry of a network: lon/lat per node id, lon/lat polyline per link id."""

    node_lonlat: dict[str, tuple[float, float]]
    link_coords: dict[str, list[tuple[float, float]]]


def network_geometry(wn: WaterNetworkModel, georef: Georeferencer | CrsGeoreferencer) -> NetworkGeometry:
    """Lon/lat of every node and the lon/lat polyline of every link (start, vertices, end)."""
    names = list(wn.node_name_list)
    xy = np.array([wn.get_node(n).coordinates for n in names], dtype=float).reshape(-1, 2)
    try:
        lonlat = georef.transform(xy).tolist()
    except ValueError as exc:
        raise NetworkImportError(str(exc)) from exc
    node_lonlat = {n: (ll[0], ll[1]) for n, ll in zip(names, lonlat, strict=True)}
    link_coords: dict[str, list[tuple[float, float]]] = {}
    for name, link in wn.links():
        verts = list(link.vertices)
        middle = [tuple(p) for p in georef.transform(np.array(verts, dtype=float)).tolist()] if verts else []
        link_coords[name] = [node_lonlat[link.start_node_name], *middle, node_lonlat[link.end_node_name]]
    return NetworkGeometry(node_lonlat=node_lonlat, link_coords=link_coords)


def _tag(obj: Any) -> str:
    return str(obj.tag or "")[:64]


# The leading columns every node table and every link table share, in COPY order.
NODE_COLUMNS = ["project_id", "element_id", "tag", "geom", "initial_quality"]
LINK_COLUMNS = ["project_id", "element_id", "tag", "start_node_id", "end_node_id", "initial_status", "geom"]


def write_network(
    *,
    project_id: int,
    wn: WaterNetworkModel,
    geometry: NetworkGeometry,
    id_prefix: str = "",
    global_options: bool = True,
) -> dict[str, int]:
    """COPY the elements, patterns, curves and options of ``wn`` into ``project_id``; ``id_prefix``
    is prepended to every id (tiled benchmark networks); ``global_options=False`` writes only the
    per-pump options (the project already has the global kinds and schemas)."""
    pid = project_id
    p = id_prefix
    nl, lc = geometry.node_lonlat, geometry.link_coords
    counts: dict[str, int] = {}

    def node_head(name: str, node: Any) -> tuple[object, ...]:
        """The values of NODE_COLUMNS for one node."""
        return (pid, p + name, _tag(node), point_ewkt(*nl[name]), float(node.initial_quality or 0.0))

    def link_head(name: str, link: Any) -> tuple[object, ...]:
        """The values of LINK_COLUMNS for one link (the geometry runs start node → vertices → end node)."""
        return (
            pid,
            p + name,
            _tag(link),
            p + link.start_node_name,
            p + link.end_node_name,
            _status(link),
            linestring_ewkt(lc[name]),
        )

    counts["pattern"] = copy_rows(
        Pattern._meta.db_table,
        ["project_id", "pattern_id", "multipliers"],
        ((pid, p + name, _json([float(m) for m in pat.multipliers])) for name, pat in wn.patterns()),
    )
    counts["curve"] = copy_rows(
        Curve._meta.db_table,
        ["project_id", "curve_id", "curve_type", "points"],
        (
            (pid, p + name, str(c.curve_type or "UNKNOWN").upper(), _json([[float(x), float(y)] for x, y in c.points]))
            for name, c in wn.curves()
        ),
    )
    counts["junction"] = copy_rows(
        Junction._meta.db_table,
        [
            *NODE_COLUMNS,
            "elevation",
            "base_demand",
            "demand_pattern",
            "demand_category",
            "emitter_coefficient",
        ],  # fmt: skip
        (
            (
                *node_head(name, j),
                float(j.elevation),
                float(j.base_demand or 0.0),
                _prefixed(p, _name(j.demand_timeseries_list[0].pattern_name) if len(j.demand_timeseries_list) else ""),
                str(j.demand_timeseries_list[0].category or "") if len(j.demand_timeseries_list) else "",
                _opt(j.emitter_coefficient),
            )  # fmt: skip
            for name, j in wn.junctions()
        ),
    )
    counts["reservoir"] = copy_rows(
        Reservoir._meta.db_table,
        [*NODE_COLUMNS, "base_head", "head_pattern"],
        (
            (
                *node_head(name, r),
                float(r.base_head),
                _prefixed(p, _name(r.head_pattern_name)),
            )  # fmt: skip
            for name, r in wn.reservoirs()
        ),
    )
    counts["tank"] = copy_rows(
        Tank._meta.db_table,
        [
            *NODE_COLUMNS,
            "elevation",
            "init_level",
            "min_level",
            "max_level",
            "diameter",
            "min_volume",
            "volume_curve",
            "overflow",
            "mixing_model",
        ],  # fmt: skip
        (
            (
                *node_head(name, t),
                float(t.elevation),
                float(t.init_level),
                float(t.min_level),
                float(t.max_level),
                float(t.diameter),
                float(t.min_vol or 0.0),
                _prefixed(p, _name(t.vol_curve_name)),
                bool(t.overflow),
                str(t.mixing_model or "MIXED").upper(),
            )  # fmt: skip
            for name, t in wn.tanks()
        ),
    )
    counts["pipe"] = copy_rows(
        Pipe._meta.db_table,
        [
            *LINK_COLUMNS,
            "length",
            "diameter",
            "roughness",
            "minor_loss",
            "check_valve",
            "bulk_coeff",
            "wall_coeff",
        ],  # fmt: skip
        (
            (
                *link_head(name, k),
                float(k.length),
                float(k.diameter),
                float(k.roughness),
                float(k.minor_loss or 0.0),
                bool(k.check_valve),
                _opt(k.bulk_coeff),
                _opt(k.wall_coeff),
            )  # fmt: skip
            for name, k in wn.pipes()
        ),
    )
    counts["pump"] = copy_rows(
        Pump._meta.db_table,
        [
            *LINK_COLUMNS,
            "pump_type",
            "pump_curve",
            "power",
            "speed",
            "speed_pattern",
            "efficiency_curve",
            "energy_price",
            "energy_pattern",
        ],  # fmt: skip
        (
            (
                *link_head(name, k),
                str(k.pump_type).upper(),
                _prefixed(p, _name(getattr(k, "pump_curve_name", None))),
                _opt(getattr(k, "power", None)),
                float(k.base_speed or 1.0),
                _prefixed(p, _name(k.speed_pattern_name)),
                _prefixed(p, _name(k.efficiency_curve_name)),
                _opt(k.energy_price),
                _prefixed(p, _name(k.energy_pattern)),
            )  # fmt: skip
            for name, k in wn.pumps()
        ),
    )
    counts["valve"] = copy_rows(
        Valve._meta.db_table,
        [
            *LINK_COLUMNS,
            "valve_type",
            "diameter",
            "setting",
            "headloss_curve",
            "minor_loss",
        ],  # fmt: skip
        (
            (
                *link_head(name, k),
                str(k.valve_type).upper(),
                float(k.diameter),
                None if k.valve_type == "GPV" else _opt(k.initial_setting),
                _prefixed(p, _name(getattr(k, "headloss_curve_name", None))),
                float(k.minor_loss or 0.0),
            )  # fmt: skip
            for name, k in wn.valves()
        ),
    )
    counts["options"] = write_options(project_id=pid, wn=wn, id_prefix=p, global_options=global_options)
    return counts


def _prefixed(prefix: str, name: str) -> str:
    return prefix + name if name else ""


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    return _name(value)


def write_options(*, project_id: int, wn: WaterNetworkModel, id_prefix: str = "", global_options: bool = True) -> int:
    """Store the option kinds (values named as ``NETWORK_SCHEMAS``), one ``pump_energy`` row per pump,
    and (with ``global_options``) one schema row per kind."""
    rows: list[NetworkOptions] = []
    sources = {"hydraulic": wn.options.hydraulic, "time": wn.options.time, "energy": wn.options.energy}
    for kind, src in sources.items() if global_options else ():
        names = [prop["name"] for prop in NETWORK_SCHEMAS[kind]["properties"]]
        rows.append(
            NetworkOptions(
                project_id=project_id,
                kind=kind,
                values={n: _jsonable(getattr(src, n, None)) for n in names},
            )
        )
    for name, pump in wn.pumps():
        rows.append(
            NetworkOptions(
                project_id=project_id,
                kind="pump_energy",
                pump_id=id_prefix + name,
                values={
                    "pump_id": id_prefix + name,
                    "efficiency_curve": _prefixed(id_prefix, _name(pump.efficiency_curve_name)),
                    "energy_price": _opt(pump.energy_price),
                    "energy_pattern": _prefixed(id_prefix, _name(pump.energy_pattern)),
                },
            )
        )
    NetworkOptions.objects.bulk_create(rows, batch_size=1000)
    if not global_options:
        return len(rows)
    NetworkSchema.objects.bulk_create(
        NetworkSchema(project_id=project_id, kind=kind, description=s["description"], properties=s["properties"])
        for kind, s in NETWORK_SCHEMAS.items()
    )
    return len(rows)


# --- baseline --------------------------------------------------------------------------------------

NODE_FIELDS = (("pressure", "pressure"), ("head", "head"), ("demand", "demand"), ("quality", "quality"))


def _node_type_lists(wn: WaterNetworkModel) -> list[tuple[str, list[str]]]:
    return [
        ("junction", list(wn.junction_name_list)),
        ("reservoir", list(wn.reservoir_name_list)),
        ("tank", list(wn.tank_name_list)),
    ]


def _link_type_lists(wn: WaterNetworkModel) -> list[tuple[str, list[str]]]:
    return [("pipe", list(wn.pipe_name_list)), ("pump", list(wn.pump_name_list)), ("valve", list(wn.valve_name_list))]


def _time_axis(results: SimulationResults, start: datetime) -> list[datetime]:
    return [start + timedelta(seconds=int(s)) for s in results.node["pressure"].index]


def node_series_lines(
    results: SimulationResults,
    wn: WaterNetworkModel,
    *,
    start: datetime,
    head: Sequence[object],
    id_prefix: str = "",
    names: dict[str, Sequence[str]] | None = None,
) -> Iterator[str]:
    """COPY text lines ``(*head, element_type, element_id, time, pressure, head, demand, quality)``
    ordered by element type, element, time (the unique index order, which keeps index inserts cheap).
    ``names`` narrows the elements per type (default: all)."""
    times = [ts.isoformat() for ts in _time_axis(results, start)]
    prefix = "".join(f"{copy_text(h)}\t" for h in head)
    for etype, all_names in _node_type_lists(wn):
        chosen = list(names.get(etype, ())) if names is not None else all_names
        if not chosen:
            continue
        pr, hd, dm, ql = (
            results.node[f][chosen].to_numpy(dtype=float).T.tolist() for f in ("pressure", "head", "demand", "quality")
        )
        for i, name in enumerate(chosen):
            lead = f"{prefix}{etype}\t{copy_text(id_prefix + name)}\t"
            p_, h_, d_, q_ = pr[i], hd[i], dm[i], ql[i]
            for k, ts in enumerate(times):
                yield f"{lead}{ts}\t{p_[k]!r}\t{h_[k]!r}\t{d_[k]!r}\t{q_[k]!r}\n"


def link_series_lines(
    results: SimulationResults,
    wn: WaterNetworkModel,
    *,
    start: datetime,
    head: Sequence[object],
    id_prefix: str = "",
    names: dict[str, Sequence[str]] | None = None,
) -> Iterator[str]:
    """COPY text lines ``(*head, element_type, element_id, time, flow, velocity, headloss, status,
    setting)``; a NaN setting is stored as NULL."""
    times = [ts.isoformat() for ts in _time_axis(results, start)]
    prefix = "".join(f"{copy_text(h)}\t" for h in head)
    for etype, all_names in _link_type_lists(wn):
        chosen = list(names.get(etype, ())) if names is not None else all_names
        if not chosen:
            continue
        fl, ve, hl, st, se = (
            results.link[f][chosen].to_numpy(dtype=float).T
            for f in ("flowrate", "velocity", "headloss", "status", "setting")
        )
        st_l = np.nan_to_num(st, nan=0.0).astype(int).tolist()
        se_l = [[r"\N" if math.isnan(v) else repr(v) for v in row] for row in se.tolist()]
        fl, ve, hl = fl.tolist(), ve.tolist(), hl.tolist()
        for i, name in enumerate(chosen):
            lead = f"{prefix}{etype}\t{copy_text(id_prefix + name)}\t"
            f_, v_, h_, s_, t_ = fl[i], ve[i], hl[i], st_l[i], se_l[i]
            for k, ts in enumerate(times):
                yield f"{lead}{ts}\t{f_[k]!r}\t{v_[k]!r}\t{h_[k]!r}\t{s_[k]}\t{t_[k]}\n"


def with_leak_column(lines: Iterable[str], node_id: str | None, leak_by_time: Mapping[str, float]) -> Iterator[str]:
    """``node_series_lines`` with a ``leak_demand`` column: ``leak_by_time`` (ISO time → m³/s) at ``node_id``,
    NULL elsewhere (an analysis run's node series)."""
    for line in lines:
        parts = line.split("\t", 4)
        value = leak_by_time.get(parts[3]) if node_id is not None and parts[2] == node_id else None
        yield f"{line[:-1]}\t{value!r}\n" if value is not None else f"{line[:-1]}\t\\N\n"


NODE_SERIES_COLUMNS = ["element_type", "element_id", "time", "pressure", "head", "demand", "quality"]
LINK_SERIES_COLUMNS = ["element_type", "element_id", "time", "flow", "velocity", "headloss", "status", "setting"]


def write_baseline(
    *, project_id: int, wn: WaterNetworkModel, results: SimulationResults, start: datetime, id_prefix: str = ""
) -> dict[str, int]:
    """COPY the node and link baseline series of ``results`` into ``project_id``."""
    return {
        "node_baseline": copy_lines(
            NodeBaseline._meta.db_table,
            ["project_id", *NODE_SERIES_COLUMNS],
            node_series_lines(results, wn, start=start, head=(project_id,), id_prefix=id_prefix),
        ),
        "link_baseline": copy_lines(
            LinkBaseline._meta.db_table,
            ["project_id", *LINK_SERIES_COLUMNS],
            link_series_lines(results, wn, start=start, head=(project_id,), id_prefix=id_prefix),
        ),
    }


def _storage_reason(exc: DataError | IntegrityError) -> str:
    """What the database refused, in words: PostgreSQL's own one-line message without the SQL."""
    if isinstance(exc, DataError) and "too long" in str(exc):
        return "an element, pattern or curve id is longer than 64 characters"
    if isinstance(exc, IntegrityError) and "duplicate key" in str(exc):
        return "an id occurs twice"
    return str(exc).split("\n")[0][:200] or "the database refused a row"


# --- the import ------------------------------------------------------------------------------------

NETWORK_MODELS = (Junction, Reservoir, Tank, Pipe, Pump, Valve, Pattern, Curve, NetworkOptions, NetworkSchema)


def network_facts(wn: WaterNetworkModel) -> dict[str, str]:
    """What decides the units of a network's numbers (``Project.quality_type``, ``headloss_formula``)."""
    quality = str(wn.options.quality.parameter or "NONE").upper()
    return {
        "quality_type": quality if quality in {"CHEMICAL", "AGE", "TRACE"} else "NONE",
        "headloss_formula": str(wn.options.hydraulic.headloss).upper(),
    }


def delete_network(project_id: int, *, keep_versions: bool = False) -> None:
    """Delete a project's network, options, schemas and baseline (single DELETEs, no cascades), and its
    model versions unless ``keep_versions`` (a re-import keeps them: they are a history)."""
    for model in (NodeBaseline, LinkBaseline, *NETWORK_MODELS):
        model.objects.filter(project_id=project_id).delete()
    if not keep_versions:
        NetworkSource.objects.filter(project_id=project_id).delete()


def add_model_version(*, project_id: int, file_name: str, inp_text: str, imported_by: str) -> NetworkSource:
    """The project's next model version (inside the caller's transaction, which holds the project lock)."""
    last = NetworkSource.objects.filter(project_id=project_id).aggregate(v=Max("version"))["v"] or 0
    return NetworkSource.objects.create(
        project_id=project_id, version=last + 1, file_name=file_name[:255], inp_text=inp_text,
        sha256=hashlib.sha256(inp_text.encode()).hexdigest(), imported_by=imported_by[:150],
    )  # fmt: skip


def local_day_start(project: Project, now: datetime | None = None) -> datetime:
    """Midnight of the project's current local day (in its time zone), as an aware datetime."""
    zone = project_zone(project)
    local = (now or datetime.now(UTC)).astimezone(zone)
    return datetime(local.year, local.month, local.day, tzinfo=zone)


def import_network(
    *,
    project: Project,
    inp_path: Path,
    center: tuple[float, float] | None = DEFAULT_CENTER,
    scale: float = 1.0,
    crs: str | None = None,
    baseline_hours: float = 24.0,
    step_minutes: int = 15,
    start: datetime | None = None,
    imported_by: str = "",
) -> ImportSummary:
    """Import ``inp_path`` as ``project``'s network, replacing the old one atomically, as its next model
    version (``imported_by`` says who).

    With ``crs`` the coordinates are in that CRS and transformed exactly; without it ``center``/``scale``
    place a schematic drawing (``scale`` metres per drawn unit); ``center=None`` (the command without
    ``--crs``/``--center``) reads lon/lat coordinates as EPSG:4326 and refuses any others.
    ``baseline_hours=0`` skips the simulation (no baseline). Everything that can be checked before
    writing is checked first (the file, the CRS, the connectivity), so a refused file never touches the
    database. The baseline starts at ``start``, by default the project's current local day
    (``local_day_start``), with patterns on the local clock. The .inp text is kept (``NetworkSource``)
    so any other window can be simulated later (``simulate_baseline``).
    """
    start = start or local_day_start(project)
    t0 = _time.monotonic()
    wn = read_inp(inp_path)
    check_connected(wn)
    georef = georeferencer_for(wn, center=center, scale=scale, crs=crs, file_name=inp_path.name)
    geometry = network_geometry(wn, georef)
    if baseline_hours < 0 or (baseline_hours > 0 and step_minutes <= 0):
        raise NetworkImportError("baseline hours must be >= 0 and step minutes > 0")
    summary = ImportSummary(project_slug=project.slug, placement=placement_of(georef, scale=scale))
    try:
        with transaction.atomic():
            # Lock the project row so two imports of the same project serialize, not interleave.
            Project.objects.select_for_update().filter(pk=project.pk).first()
            delete_network(project.pk, keep_versions=True)
            Project.objects.filter(pk=project.pk).update(**network_facts(wn))
            summary.counts.update(write_network(project_id=project.pk, wn=wn, geometry=geometry))
            version = add_model_version(
                project_id=project.pk, file_name=inp_path.name,
                inp_text=inp_path.read_bytes().decode("utf-8", errors="replace"),  # as is: CRLF kept
                imported_by=imported_by,
            )  # fmt: skip
            summary.model_version, summary.sha256 = version.version, version.sha256
            if baseline_hours > 0:
                local = start.astimezone(project_zone(project))
                wn.options.time.pattern_start = wn.options.time.start_clocktime = (
                    local.hour * 3600 + local.minute * 60 + local.second
                )
                results = simulate(wn, hours=baseline_hours, step_minutes=step_minutes)
                summary.counts.update(write_baseline(project_id=project.pk, wn=wn, results=results, start=start))
                summary.baseline_steps = len(results.node["pressure"].index)
    except (DataError, IntegrityError) as exc:
        # The data does not fit the model (e.g. an id longer than 64 characters, a duplicate id): the
        # transaction rolled back, so the previous network is untouched.
        raise NetworkImportError(
            f"cannot store the network from {inp_path.name}: {_storage_reason(exc)}; the previous network is unchanged"
        ) from exc
    summary.seconds = _time.monotonic() - t0
    logger.info("imported network into project %s: %s", project.slug, summary.counts)
    return summary
