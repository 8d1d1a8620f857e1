"""``seed_demo``: build the demo utility, deterministically (fixed RNG seeds, fixed clock).

Two projects — ``tianjin-demo`` (WNTR's Net6 at 117.2, 39.1, ~70 m per drawn unit) and ``demo-b``
(Net3 at 117.4, 39.0) — with principals and memberships, 48 h of model baseline at 15 minutes, SCADA
devices with 5-minute readings (from the LINK-1523 main break at 08:00 to the end of the burst run's
window at 18:00, the devices where that run computes a measurable change read its values instead of the
baseline's), analysis and sensor placement runs computed with WNTR, GIS
attributes and a source GIS layer, a workbench runtime snapshot, an investigation task with two runs,
a lease, an execution request and a two-revision report, and synthetic peripheral data.

Re-running replaces the demo data (projects and principals keep their rows, everything under them is
rebuilt) in one transaction. ``ensure_demo_loaded()`` seeds only when the demo network is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time as _time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from wntr.network import WaterNetworkModel

from contexts.models import ExecutionRequest, Membership, Principal, Project, Task, TaskReport, TaskRun
from queries.demo import analysis as demo_analysis
from queries.demo import scada as demo_scada
from queries.demo.seeders import DEMO_SEEDERS
from queries.importer.baseline_window import align_patterns
from queries.importer.copy import copy_rows, linestring_ewkt, point_ewkt
from queries.importer.epanet import (
    NetworkGeometry,
    add_model_version,
    delete_network,
    georeferencer_for,
    network_facts,
    network_geometry,
    read_inp,
    simulate,
    wntr_network_path,
    write_baseline,
    write_network,
)
from queries.models import (
    ELEMENT_MODELS,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
    ElementGisProperties,
    GisFeature,
    GisLayer,
    IsolationValve,
    Junction,
    LinkBaseline,
    NetworkSource,
    NodeBaseline,
    Observation,
    PeripheralPoint,
    ScadaDevice,
    ScadaReading,
    SensorPlacementRun,
    TestData,
    WorkbenchRuntime,
    WorkOrder,
)

logger = logging.getLogger(__name__)

DEMO_SLUG = "tianjin-demo"
DEMO_B_SLUG = "demo-b"
#: Both demo utilities are in Tianjin. Their data and absolute timestamps are fixed in UTC (R-DEMO-1); the zone
#: only says what "local time" means for them.
DEMO_TIMEZONE = "Asia/Shanghai"
START = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 48
STEP_MINUTES = 15
SEED = 20261101
ALL_PERMISSIONS = ["webgis.view", "scada.view", "simulation.view", "optimization.run"]
DEMO_SESSION_ID = "session-demo-1"
DEMO_EXECUTION_REQUEST_ID = "exec-demo-1"
DEMO_LEASE_EXPIRES = datetime(2099, 1, 1, tzinfo=UTC)

# Row-major over a 3 × 2 grid of the network's extent, south-west first: the burst of LINK-1523 lies in
# the first cell, so the investigation's "low pressure in Hexi" names the district the data shows.
DISTRICTS = ["Hexi", "Heping", "Nankai", "Hedong", "Hebei", "Hongqiao"]
#: The demo's main break (``burst-20261101-0800``): at least this many pressure transmitters sit within
#: ``NEAR_BURST_M`` of its junction, where the run shows a pressure drop of more than 1 m.
BURST_PIPE = "LINK-1523"
NEAR_BURST_DEVICES = 3
NEAR_BURST_M = 1000.0
STREETS = [
    "Nanjing Road", "Weijin Road", "Jiefang North Road", "Heping Road", "Youyi Road", "Binshui Avenue",
    "Huanghe Road", "Changjiang Road", "Zhongshan Road", "Dagu South Road", "Xikang Road", "Chengdu Road",
    "Qixiangtai Road", "Fukang Road", "Anshan West Road", "Baidi Road", "Tongan Road", "Hongqi Road",
]  # fmt: skip
MATERIALS_BY_ERA = [(1975, ["CI", "STEEL"]), (1995, ["CI", "DI", "STEEL"]), (2010, ["DI", "PVC"]), (2100, ["PE", "DI"])]


class DemoConfigError(Exception):
    """The demo cannot be built with the current settings (message says what to set)."""


@dataclass
class SeedSummary:
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class _Network:
    project: Project
    inp: Path
    wn: WaterNetworkModel
    geometry: NetworkGeometry
    results: object
    #: The demo's model version (its .inp as imported), which its analysis runs pin.
    version: NetworkSource | None = None


def _run_demo_seeders(demo: Project, summary: SeedSummary | None = None) -> None:
    for seeder in DEMO_SEEDERS:
        added = seeder(project=demo)
        if summary is not None:
            _add(summary, added)


def demo_has_network() -> bool:
    return Junction.objects.filter(project__slug=DEMO_SLUG).exists()


def ensure_demo_loaded() -> bool:
    """Seed the demo unless ``tianjin-demo`` already has a network; returns True when it seeded.

    Meant for a test session's ``django_db_setup`` (so e2e servers see the demo) and ``make run``.
    """
    if demo_has_network():
        _own_demo_runs()
        demo = Project.objects.filter(slug=DEMO_SLUG).first()
        if demo is not None:
            _run_demo_seeders(demo)
        return False
    seed_demo()
    return True


def _own_demo_runs() -> None:
    """A demo seeded before runs had owners: give its runs the owners the seed now gives them (the demo's
    own rows only; a run of any other project without an owner stays unbindable)."""
    for slug, subject in ((DEMO_SLUG, "svc-worker"), (DEMO_B_SLUG, "bob")):
        owner = Principal.objects.filter(subject=subject, memberships__project__slug=slug).first()
        if owner is not None:
            TaskRun.objects.filter(task__project__slug=slug, owner__isnull=True).update(owner=owner)


def _prepare(
    slug: str, name: str, inp: str, center: tuple[float, float], scale: float, timezone_name: str = "UTC"
) -> tuple[Project, _Network]:
    path = wntr_network_path(inp)
    wn = read_inp(path)
    project, _ = Project.objects.update_or_create(
        slug=slug, defaults={"name": name, "timezone": timezone_name, **network_facts(wn)}
    )
    geometry = network_geometry(wn, georeferencer_for(wn, center=center, scale=scale))
    align_patterns(wn, START, project)  # patterns on the utility's local clock, as import_network puts them
    results = simulate(wn, hours=HOURS, step_minutes=STEP_MINUTES)
    return project, _Network(project=project, inp=path, wn=wn, geometry=geometry, results=results)


def _clear(project: Project) -> None:
    """Delete everything the demo owns under ``project`` (projects themselves keep their ids); the runs
    first, since they pin the model versions."""
    AnalysisRun.objects.filter(project=project).delete()
    delete_network(project.pk)
    for model in (ScadaDevice, SensorPlacementRun, ElementGisProperties, GisLayer, WorkbenchRuntime,
                  WorkOrder, Observation, TestData, PeripheralPoint):  # fmt: skip
        model.objects.filter(project=project).delete()
    Task.objects.filter(project=project).delete()
    Membership.objects.filter(project=project).delete()


def seed_demo() -> SeedSummary:
    """Build (or rebuild) the demo utility. Deterministic; one transaction."""
    issuer = settings.TJWATER_OIDC_ISSUER
    if not issuer:
        raise DemoConfigError(
            "TJWATER_OIDC_ISSUER is empty: set it to your issuer URL, or enable the dev issuer "
            "(TJWATER_DEV_ISSUER=1 with DEBUG=1) so demo principals get an issuer"
        )
    t0 = _time.monotonic()
    summary = SeedSummary()
    with transaction.atomic():
        demo, net = _prepare(DEMO_SLUG, "Tianjin demo utility", "Net6.inp", (117.2, 39.1), 70.0, DEMO_TIMEZONE)
        demo_b, net_b = _prepare(DEMO_B_SLUG, "Demo B (Binhai)", "Net3.inp", (117.4, 39.0), 20.0, DEMO_TIMEZONE)
        for project in (demo, demo_b):
            _clear(project)
        rng = np.random.default_rng(SEED)
        for n in (net, net_b):
            _add(summary, write_network(project_id=n.project.pk, wn=n.wn, geometry=n.geometry))
            text = n.inp.read_text(encoding="utf-8")
            n.version = add_model_version(project_id=n.project.pk, file_name=n.inp.name, inp_text=text,
                                          imported_by="seed_demo")  # fmt: skip
            n.version.imported_at = START - timedelta(days=9)  # fixed, like all of the demo's data
            n.version.save(update_fields=["imported_at"])
            _add(summary, {"model_version": 1})
            _add(summary, write_baseline(project_id=n.project.pk, wn=n.wn, results=n.results, start=START))
        _principals(issuer, demo, demo_b, summary)
        # The analyses first (they draw nothing from ``rng``): the SCADA readings near the burst read
        # what the burst run computed.
        burst, valve_layer = _analyses(net, net_b, summary)
        _scada(net, rng, pressure=24, flow=10, level=6, stuck="PT-004", summary=summary, burst=burst)
        _scada(net_b, rng, pressure=4, flow=2, level=2, stuck=None, summary=summary)
        _placements(net, summary)
        _gis(net, rng, valve_layer, summary)
        _gis(net_b, rng, None, summary)
        _runtime(demo, summary)
        _runtime(demo_b, summary)
        _peripheral(net, rng, summary)
        _tasks(demo, demo_b, summary)
        _run_demo_seeders(demo, summary)
        _analyze()
    summary.seconds = _time.monotonic() - t0
    logger.info("demo seeded in %.1fs", summary.seconds)
    return summary


def _analyze() -> None:
    """Planner statistics for the bulk-loaded tables (as ``queries.demo.scale`` does): without them a
    freshly seeded database — autovacuum may be off or not yet run — estimates one row everywhere and
    picks the ``(project, type, time)`` index for one element's series, scanning every element."""
    with connection.cursor() as cursor:
        tables: tuple[type[Model], ...] = (NodeBaseline, LinkBaseline, AnalysisNodeSeries, AnalysisLinkSeries,
                                           ScadaReading, ScadaDevice, AnalysisRun, AnalysisResult,
                                           *ELEMENT_MODELS.values())  # fmt: skip
        for model in tables:
            cursor.execute(f'ANALYZE "{model._meta.db_table}"')  # our own table names, no input


def _add(summary: SeedSummary, counts: dict[str, int]) -> None:
    for k, v in counts.items():
        summary.counts[k] = summary.counts.get(k, 0) + v


def _principals(issuer: str, demo: Project, demo_b: Project, summary: SeedSummary) -> None:
    people = {
        "alice": ("Alice Wang", False),
        "bob": ("Bob Li", False),
        "carol": ("Carol Zhao", False),
        "svc-worker": ("Investigation worker", True),
    }
    p: dict[str, Principal] = {}
    for sub, (display, service) in people.items():
        p[sub], _ = Principal.objects.update_or_create(
            issuer=issuer, subject=sub, defaults={"display_name": display, "is_service": service}
        )
    Membership.objects.bulk_create(
        [
            Membership(principal=p["alice"], project=demo, permissions=ALL_PERMISSIONS),
            Membership(principal=p["bob"], project=demo_b, permissions=ALL_PERMISSIONS),
            Membership(principal=p["bob"], project=demo, permissions=["webgis.view"]),
            Membership(principal=p["svc-worker"], project=demo, permissions=ALL_PERMISSIONS),
        ]
    )
    _add(summary, {"principal": len(p), "membership": 4})


def _scada(
    net: _Network, rng: np.random.Generator, *, pressure: int, flow: int, level: int, stuck: str | None,
    summary: SeedSummary, burst: demo_analysis.BurstOutcome | None = None,
) -> None:  # fmt: skip
    specs = demo_scada.choose_devices(
        net.wn, net.geometry, rng, pressure=pressure, flow=flow, level=level, streets=STREETS
    )
    scenario = None
    if burst is not None:
        specs = demo_scada.place_near(
            specs, _near_burst(net, burst), net.geometry, count=NEAR_BURST_DEVICES, spacing_m=60.0,
            streets=STREETS, keep=[stuck] if stuck else [],
        )  # fmt: skip
        scenario = _burst_scenario(net, burst, specs)
    _add(
        summary,
        demo_scada.write_scada(
            project_id=net.project.pk,
            wn=net.wn,
            results=net.results,
            specs=specs,
            start=START,
            hours=HOURS,
            rng=rng,
            stuck_device=stuck,
            scenario=scenario,
        ),
    )


def _near_burst(net: _Network, burst: demo_analysis.BurstOutcome) -> list[str]:
    """Demand junctions within ``NEAR_BURST_M`` of the burst junction where the run computed a pressure
    drop over 1 m (its ``affected_nodes`` result), nearest first."""
    affected = AnalysisResult.objects.get(run=burst.run, result_type="affected_nodes").payload
    assert affected["units"]["pressure_drop"] == "m"  # the demo utility is SI
    drops = {n["node_id"]: n["pressure_drop"] for n in affected["nodes"]}
    at = net.geometry.node_lonlat[burst.node_id]
    near = [
        (demo_scada.planar_m(at, net.geometry.node_lonlat[j]), j)
        for j, drop in drops.items()
        if drop > 1.0 and (net.wn.get_node(j).base_demand or 0) > 0
    ]
    return [j for d, j in sorted(near) if d <= NEAR_BURST_M]


def _burst_scenario(
    net: _Network, burst: demo_analysis.BurstOutcome, specs: list[demo_scada.DeviceSpec]
) -> demo_scada.Scenario:
    """What the burst run computed at the devices' elements, from the burst to the end of its window
    (18:00Z: in the demo's story the main is isolated and repaired then, and readings follow the
    baseline again). Only devices where it differs measurably from the baseline read it."""
    params = burst.run.parameters
    start_s = (datetime.fromisoformat(params["start"]) - START).total_seconds()
    # Up to its end, not at it: at 18:00 the readings are the baseline's again (a step, not a spike).
    end_s = start_s + 60 * int(params["duration_minutes"]) - 1
    by_quantity = {"pressure": "junction", "level": "tank", "flow": "pipe"}
    wanted = {(by_quantity[s.quantity], s.element_id) for s in specs}
    node_ids = [i for t, i in wanted if t != "pipe"]
    link_ids = [i for t, i in wanted if t == "pipe"]
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for etype, eid, t, pressure in AnalysisNodeSeries.objects.filter(
        run=burst.run, element_id__in=node_ids
    ).values_list("element_type", "element_id", "time", "pressure"):
        # A tank's EPANET pressure is its level above the bottom (head - elevation): what LT-* read.
        series.setdefault((etype, eid), []).append(((t - START).total_seconds(), pressure))
    for etype, eid, t, flow in AnalysisLinkSeries.objects.filter(run=burst.run, element_id__in=link_ids).values_list(
        "element_type", "element_id", "time", "flow"
    ):
        series.setdefault((etype, eid), []).append(((t - START).total_seconds(), flow))
    values = {
        key: (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
        for key, pts in ((k, sorted(p for p in v if p[0] <= end_s)) for k, v in series.items())
        if key in wanted
    }
    baseline = net.results  # a wntr SimulationResults (typed ``object`` on _Network)
    return demo_scada.scenario_devices(specs, baseline, net.wn, values, start_s=start_s, end_s=end_s)


def _analyses(net: _Network, net_b: _Network, summary: SeedSummary) -> tuple[demo_analysis.BurstOutcome, pd.DataFrame]:
    pid = net.project.pk
    assert net.version is not None and net_b.version is not None
    outcome = demo_analysis.burst_run(
        project=net.project,
        wn=net.wn,
        version=net.version,
        pipe_id=BURST_PIPE,
        start=START + timedelta(hours=8),
        duration_minutes=10 * 60,  # until 18:00Z, when the main is isolated and repaired
        emitter_coefficient_si=0.03,
        run_id="burst-20261101-0800",
        created_at=START + timedelta(hours=8, minutes=20),
    )
    _, valve_layer = demo_analysis.valve_isolation_run(
        project=net.project,
        wn=net.wn,
        version=net.version,
        pipe_id=outcome.pipe_id,
        seed=SEED % 1000,
        run_id="isolation-20261101-0830",
        created_at=START + timedelta(hours=8, minutes=30),
    )
    demo_analysis.failed_run(
        project_id=pid, inp_path=net.inp, pipe_id="LINK-12", run_id="whatif-20261101-1100",
        created_at=START + timedelta(hours=11),
    )  # fmt: skip
    demo_analysis.simulation_run(
        project=net_b.project, wn=net_b.wn, version=net_b.version, start=START + timedelta(hours=6), hours=24,
        run_id="simulation-20261101-0600", created_at=START + timedelta(hours=6),
    )  # fmt: skip
    _add(summary, {"analysis_run": 4})
    return outcome, valve_layer


def _placements(net: _Network, summary: SeedSummary) -> None:
    for run_id, n, radius, weight, hour in (
        ("placement-coverage-10", 10, 1500.0, "node", 12),
        ("placement-demand-20", 20, 800.0, "demand", 13),
    ):
        demo_analysis.sensor_placement_run(
            project_id=net.project.pk, wn=net.wn, run_id=run_id, n_sensors=n, radius_m=radius, weight=weight,
            candidates=600, seed=SEED % 997, created_at=START + timedelta(hours=hour),
        )  # fmt: skip
    _add(summary, {"sensor_placement_run": 2})


def _district(lon: float, lat: float, bbox: tuple[float, float, float, float]) -> str:
    x0, y0, x1, y1 = bbox
    col = min(2, int(3 * (lon - x0) / max(x1 - x0, 1e-9)))
    row = min(1, int(2 * (lat - y0) / max(y1 - y0, 1e-9)))
    return DISTRICTS[row * 3 + col]


def _material(year: int, rng: np.random.Generator) -> str:
    for until, options in MATERIALS_BY_ERA:
        if year < until:
            return options[int(rng.integers(len(options)))]
    return "PE"


def _diameter_class(d_m: float) -> str:
    dn = [50, 80, 100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1200, 1400, 1600, 1800]
    mm = d_m * 1000
    return f"DN{min(dn, key=lambda c: abs(c - mm))}"


def _gis(net: _Network, rng: np.random.Generator, valve_layer: pd.DataFrame | None, summary: SeedSummary) -> None:
    """GIS attributes for every element, and (for the main demo) two source layers whose feature ids
    are the GIS system's own (``WM-…``, ``IV-…``)."""
    pid = net.project.pk
    lons = [c[0] for c in net.geometry.node_lonlat.values()]
    lats = [c[1] for c in net.geometry.node_lonlat.values()]
    bbox = (min(lons), min(lats), max(lons), max(lats))
    rows: list[tuple[object, ...]] = []
    pipe_attrs: dict[str, dict[str, object]] = {}
    for etype, names in (
        ("junction", net.wn.junction_name_list), ("reservoir", net.wn.reservoir_name_list),
        ("tank", net.wn.tank_name_list), ("pipe", net.wn.pipe_name_list), ("pump", net.wn.pump_name_list),
        ("valve", net.wn.valve_name_list),
    ):  # fmt: skip
        for name in sorted(names):
            if etype in ("junction", "reservoir", "tank"):
                lon, lat = net.geometry.node_lonlat[name]
                diameter = net.wn.get_node(name).diameter if etype == "tank" else None
            else:
                coords = net.geometry.link_coords[name]
                lon, lat = coords[len(coords) // 2]
                diameter = getattr(net.wn.get_link(name), "diameter", None)
            year = int(rng.integers(1958, 2025))
            material = _material(year, rng) if etype in ("pipe", "valve") else ""
            road = STREETS[int(rng.integers(len(STREETS)))]
            props = {"asset_no": f"TJ-{etype[:2].upper()}-{hashlib.sha1(name.encode()).hexdigest()[:8].upper()}",
                     "owner": "Tianjin Water Supply (demo)", "condition_score": int(rng.integers(1, 6))}  # fmt: skip
            dclass = _diameter_class(diameter) if diameter else ""
            if etype == "pipe":
                pipe_attrs[name] = {"material": material, "install_year": year, "dn": dclass, "road": road}
            rows.append((pid, etype, name, material, year, dclass, _district(lon, lat, bbox), road, _jsonb(props)))
    n = copy_rows(
        ElementGisProperties._meta.db_table,
        [
            "project_id",
            "element_type",
            "element_id",
            "material",
            "install_year",
            "diameter_class",
            "district",
            "road",
            "properties",
        ],  # fmt: skip
        rows,
    )
    _add(summary, {"element_gis_properties": n})
    if valve_layer is None:
        return
    exported = START - timedelta(days=9)
    mains = GisLayer.objects.create(project_id=pid, layer_key="water_mains", name="Water mains (GIS export)",
                                    geometry_type="LineString", source_crs="EPSG:4326",
                                    source_name="ArcGIS Enterprise, layer WS_MAIN", exported_at=exported)  # fmt: skip
    # The GIS numbers features in its own sequence; some model pipes are missing from the export and
    # one feature is not in the model (an abandoned main), as in any real GIS/model pair.
    names = sorted(net.wn.pipe_name_list)
    order = rng.permutation(len(names)).tolist()
    feats: list[tuple[object, ...]] = []
    for seq, idx in enumerate(order):
        name = names[idx]
        if seq % 97 == 13:
            continue
        attrs = pipe_attrs[name]
        feats.append((mains.pk, f"WM-{200000 + seq * 3}", _jsonb({"MATERIAL": attrs["material"],
                      "INST_YEAR": attrs["install_year"], "DN": attrs["dn"], "ROAD_NAME": attrs["road"],
                      "MODEL_ID": name, "STATUS": "IN SERVICE"}),
                      linestring_ewkt(net.geometry.link_coords[name]), "pipe", name))  # fmt: skip
    lon, lat = net.geometry.node_lonlat[sorted(net.wn.junction_name_list)[0]]
    feats.append((mains.pk, "WM-199999", _jsonb({"MATERIAL": "CI", "INST_YEAR": 1962, "STATUS": "ABANDONED"}),
                  linestring_ewkt([(lon, lat), (lon + 0.001, lat + 0.0005)]), "", ""))  # fmt: skip
    # The valve layer the isolation run used: a layer of kind ``valves``, as ``import_gis --as-valves``
    # makes one, so that the demo's users can run valve isolation on it too.
    valves = GisLayer.objects.create(project_id=pid, layer_key="isolation_valves", name="Isolation valves",
                                     geometry_type="Point", source_crs="EPSG:4326", kind="valves",
                                     source_name="ArcGIS Enterprise, layer WS_VALVE", exported_at=exported)  # fmt: skip
    isolation: list[IsolationValve] = []
    for i, row in valve_layer.iterrows():
        link, node, fid = str(row["link"]), str(row["node"]), demo_analysis.valve_fid(i)
        lon, lat = net.geometry.node_lonlat[node]
        props = {"VALVE_NO": f"V{int(i):05d}", "ON_LINK": link, "NEAR_NODE": node, "TYPE": "GATE", "NORMAL_POS": "OPEN"}
        feats.append((valves.pk, fid, _jsonb(props), point_ewkt(lon, lat), "", ""))
        isolation.append(IsolationValve(layer=valves, source_fid=fid, link_id=link, node_id=node))
    n = copy_rows(GisFeature._meta.db_table,
                  ["layer_id", "source_fid", "properties", "geom", "element_type", "element_id"], feats)  # fmt: skip
    IsolationValve.objects.bulk_create(isolation)
    _add(summary, {"gis_layer": 2, "gis_feature": n, "isolation_valve": len(isolation)})


def _jsonb(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _runtime(project: Project, summary: SeedSummary) -> None:
    clock = START + timedelta(hours=36)
    WorkbenchRuntime.objects.create(
        project=project,
        simulation_clock=clock,
        active_scenario="burst-20261101-0800" if project.slug == DEMO_SLUG else "",
        mode="incident" if project.slug == DEMO_SLUG else "monitoring",
        data_sources={
            "scada": {"last_sync": (clock - timedelta(minutes=5)).isoformat(), "freshness_s": 300, "status": "fresh"},
            "model_baseline": {"last_sync": START.isoformat(), "freshness_s": 129600, "status": "fresh"},
            "gis": {"last_sync": (START - timedelta(days=9)).isoformat(), "freshness_s": 907200, "status": "stale"},
            "work_orders": {
                "last_sync": (clock - timedelta(hours=2)).isoformat(),
                "freshness_s": 7200,
                "status": "fresh",
            },  # fmt: skip
        },
        captured_at=clock,
    )
    _add(summary, {"workbench_runtime": 1})


def _peripheral(net: _Network, rng: np.random.Generator, summary: SeedSummary) -> None:
    """Synthetic hydrants, sampling points and meters at junctions, with work orders, observations
    and lab tests over the demo window. Every row says ``synthetic=True``."""
    pid = net.project.pk
    junctions = sorted(net.wn.junction_name_list)
    kinds = [("hydrant", "HY", 30), ("sampling_point", "SP", 10), ("customer_meter", "CM", 20)]
    points: list[PeripheralPoint] = []
    for kind, code, count in kinds:
        for i, idx in enumerate(sorted(rng.choice(len(junctions), size=count, replace=False).tolist()), start=1):
            jid = junctions[idx]
            lon, lat = net.geometry.node_lonlat[jid]
            points.append(PeripheralPoint(project_id=pid, point_id=f"{code}-{i:03d}", name=f"{kind.replace('_', ' ')} "  # type: ignore[misc]  # Django takes EWKT text; django-stubs only geometries
                          f"{code}-{i:03d} {STREETS[int(rng.integers(len(STREETS)))]}", kind=kind,
                          geom=f"SRID=4326;POINT({lon!r} {lat!r})", element_type="junction", element_id=jid,
                          properties={"installed": int(rng.integers(1985, 2024))}, synthetic=True))  # fmt: skip
    points = PeripheralPoint.objects.bulk_create(points)
    orders, observations, tests = [], [], []
    statuses = ["open", "in_progress", "closed"]
    for n, pt in enumerate([p for p in points if p.kind in ("hydrant", "customer_meter")][:25], start=1):
        opened = START + timedelta(minutes=int(rng.integers(0, HOURS * 60)))
        status = statuses[int(rng.integers(3))]
        orders.append(WorkOrder(project_id=pid, point=pt, order_id=f"WO-2026-{4100 + n}",
                      kind="hydrant_service" if pt.kind == "hydrant" else "meter_replacement", status=status,
                      priority=["low", "normal", "high"][int(rng.integers(3))], recorded_at=opened,
                      closed_at=opened + timedelta(hours=int(rng.integers(2, 20))) if status == "closed" else None,
                      description=f"Scheduled {'flushing' if pt.kind == 'hydrant' else 'meter swap'} at {pt.name}",
                      synthetic=True))  # fmt: skip
    for pt in [p for p in points if p.kind == "hydrant"]:
        for k in range(3):
            at = START + timedelta(hours=4 + 16 * k, minutes=int(rng.integers(0, 60)))
            observations.append(Observation(project_id=pid, point=pt, recorded_at=at, quantity="static_pressure",
                                value=round(float(rng.normal(32, 4)), 1), unit="m", observer="field crew 3",
                                note="gauge on hydrant outlet", synthetic=True))  # fmt: skip
    for pt in [p for p in points if p.kind == "sampling_point"]:
        for k in range(8):
            at = START + timedelta(hours=6 * k, minutes=int(rng.integers(0, 30)))
            sample = f"S-{pt.point_id}-{k + 1:02d}"
            for param, mean, sd, unit in (("free_chlorine", 0.45, 0.08, "mg/L"), ("turbidity", 0.3, 0.1, "NTU"),
                                          ("ph", 7.6, 0.15, "")):  # fmt: skip
                tests.append(TestData(project_id=pid, point=pt, sample_id=sample, recorded_at=at, parameter=param,
                             value=round(max(0.0, float(rng.normal(mean, sd))), 3), unit=unit,
                             method="DPD colorimetric" if param == "free_chlorine" else "field probe",
                             lab="Tianjin central lab (demo)", synthetic=True))  # fmt: skip
    WorkOrder.objects.bulk_create(orders)
    Observation.objects.bulk_create(observations)
    TestData.objects.bulk_create(tests)
    _add(summary, {"peripheral_point": len(points), "work_order": len(orders), "observation": len(observations),
                   "test_data": len(tests)})  # fmt: skip


def _tasks(demo: Project, demo_b: Project, summary: SeedSummary) -> None:
    # An investigation belongs to the principal that runs it (contexts.access.owns_run): the worker's
    # service identity on the demo; bob, the only member of demo-b, runs its review.
    worker = Principal.objects.get(subject="svc-worker", memberships__project=demo)
    bob = Principal.objects.get(subject="bob", memberships__project=demo_b)
    task = Task.objects.create(
        project=demo, title="Investigate low pressure in Hexi after the LINK-1523 break", status=Task.Status.IN_PROGRESS
    )
    TaskRun.objects.create(
        task=task,
        sequence=1,
        status=TaskRun.Status.SUPERSEDED,
        owner=worker,
        lease_holder="session-demo-0",
        lease_expires_at=START + timedelta(hours=9),
        superseded_at=START + timedelta(hours=9),
    )
    current = TaskRun.objects.create(
        task=task,
        sequence=2,
        status=TaskRun.Status.RUNNING,
        owner=worker,
        lease_holder=DEMO_SESSION_ID,
        lease_expires_at=DEMO_LEASE_EXPIRES,
    )
    ExecutionRequest.objects.create(run=current, request_id=DEMO_EXECUTION_REQUEST_ID)
    r1 = {
        "summary": "Customer calls report low pressure in Hexi from 08:05. Suspected main break on LINK-1523.",
        "findings": ["Calls cluster around JUNCTION-1304", "SCADA pressure transmitters not yet reviewed"],
        "evidence": [],
        "recommendations": ["Compare SCADA pressure with the model baseline", "Prepare valve isolation"],
    }
    r2 = {
        "summary": "Burst model run burst-20261101-0800 (main break at JUNCTION-1304 on LINK-1523) reproduces "
        "the complaints; isolation planned with run isolation-20261101-0830.",
        "findings": [
            "Modelled leak peaks at about 230 L/s from 08:00",
            "Modelled pressure drop over 1 m at about 270 junctions",
            "Pressure transmitter PT-004 stuck 20:00-02:00; its cleaned values are withheld",
        ],
        "evidence": [
            {"source": "analysis_run", "ref": "burst-20261101-0800"},
            {"source": "analysis_run", "ref": "isolation-20261101-0830"},
        ],
        "recommendations": ["Close the 4 valves listed in the isolation run", "Dispatch crew", "Notify customers"],
    }
    TaskReport.objects.create(task=task, revision=1, sections=r1)
    TaskReport.objects.create(task=task, revision=2, sections=r2)
    other = Task.objects.create(project=demo_b, title="Review Net3 pump schedule", status=Task.Status.OPEN)
    TaskRun.objects.create(
        task=other,
        sequence=1,
        status=TaskRun.Status.RUNNING,
        owner=bob,
        lease_holder="session-demo-b-1",
        lease_expires_at=DEMO_LEASE_EXPIRES,
    )
    _add(summary, {"task": 2, "task_run": 3, "execution_request": 1, "task_report": 2})
