"""A tiled benchmark network: Net6 repeated N×N side by side, with baseline and SCADA readings.

Tile ``(i, j)`` is Net6 georeferenced like the demo (70 m per drawn unit) and shifted by whole tile
widths in the UTM plane, so the grid is centred on ``center``. Element ids get a tile prefix
(``T0305-JUNCTION-0``). Tile 0's baseline and readings are computed/generated in Python and COPYed;
the other tiles copy them server-side (``INSERT … SELECT``) with re-prefixed ids — identical values,
realistic volume, which is what a benchmark needs.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Model

from contexts.models import Project
from queries.demo import scada as demo_scada
from queries.importer.copy import summarize_reading_brin
from queries.importer.epanet import (
    BASELINE_START,
    delete_network,
    network_facts,
    network_geometry,
    read_inp,
    simulate,
    wntr_network_path,
    write_baseline,
    write_network,
)
from queries.importer.georef import Georeferencer
from queries.models import ELEMENT_MODELS, LinkBaseline, NodeBaseline, ScadaDevice, ScadaReading


@dataclass
class ScaleSummary:
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)


def tile_prefix(i: int, j: int) -> str:
    return f"T{i:02d}{j:02d}-"


def generate_scale_network(
    *,
    project: Project,
    tiles: int,
    center: tuple[float, float] = (117.2, 39.1),
    scale: float = 70.0,
    baseline_hours: float = 24.0,
    step_minutes: int = 60,
    start: datetime = BASELINE_START,
    devices_per_tile: tuple[int, int, int] = (24, 10, 6),
) -> ScaleSummary:
    """Replace ``project``'s network with Net6 tiled ``tiles``×``tiles`` (one transaction)."""
    if tiles < 1:
        raise ValueError("tiles must be at least 1")
    t0 = _time.monotonic()
    summary = ScaleSummary()
    wn = read_inp(wntr_network_path("Net6.inp"))
    xy = np.array([n.coordinates for _, n in wn.nodes()], dtype=float)
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    cx, cy = (lo + hi) / 2
    dx, dy = (hi - lo) * 1.05  # tile pitch in drawn units: the extent plus a 5 % street gap
    results = simulate(wn, hours=baseline_hours, step_minutes=step_minutes)
    summary.phases["simulate"] = _time.monotonic() - t0
    with transaction.atomic():
        t = _time.monotonic()
        ScadaDevice.objects.filter(project=project).delete()
        delete_network(project.pk)
        Project.objects.filter(pk=project.pk).update(**network_facts(wn))
        summary.phases["delete"] = _time.monotonic() - t
        t = _time.monotonic()
        first = tile_prefix(0, 0)
        half = (tiles - 1) / 2
        for i in range(tiles):
            for j in range(tiles):
                georef = Georeferencer(center=center, scale=scale, origin=(cx - (i - half) * dx, cy - (j - half) * dy))
                geometry = network_geometry(wn, georef)
                counts = write_network(
                    project_id=project.pk, wn=wn, geometry=geometry, id_prefix=tile_prefix(i, j),
                    global_options=(i == 0 and j == 0),
                )  # fmt: skip
                for k, v in counts.items():
                    summary.counts[k] = summary.counts.get(k, 0) + v
                if i == 0 and j == 0:
                    specs = demo_scada.choose_devices(
                        wn, geometry, np.random.default_rng(7), pressure=devices_per_tile[0],
                        flow=devices_per_tile[1], level=devices_per_tile[2], streets=["Tile Road"],
                    )  # fmt: skip
                    tile0 = (geometry, specs)
        summary.phases["elements"] = _time.monotonic() - t

        t = _time.monotonic()
        write_baseline(project_id=project.pk, wn=wn, results=results, start=start, id_prefix=first)
        _, specs0 = tile0
        demo_scada.write_scada(
            project_id=project.pk, wn=wn, results=results,
            specs=[_prefixed_spec(s, first) for s in specs0], start=start, hours=baseline_hours,
            rng=np.random.default_rng(11), stuck_device=None, element_prefix=first,
        )  # fmt: skip
        summary.phases["tile0_series"] = _time.monotonic() - t
        t = _time.monotonic()
        with connection.cursor() as cur:
            _stage_tile(cur, project.pk, first)
            for i in range(tiles):
                for j in range(tiles):
                    if i == 0 and j == 0:
                        continue
                    _copy_tile(cur, project.pk, tile_prefix(i, j))
        summarize_reading_brin()
        summary.phases["copy_tiles"] = _time.monotonic() - t
        # Every tile is a copy of tile 0, so the totals are tile 0's counts times the tile count.
        n_tiles = tiles * tiles
        steps = len(results.node["pressure"].index)
        summary.counts["node_baseline"] = wn.num_nodes * steps * n_tiles
        summary.counts["link_baseline"] = wn.num_links * steps * n_tiles
        summary.counts["scada_device"] = len(specs0) * n_tiles
        summary.counts["scada_reading"] = len(specs0) * int(baseline_hours * 3600 // demo_scada.SLOT_S) * n_tiles
    t = _time.monotonic()
    with connection.cursor() as cur:
        tables: tuple[type[Model], ...] = (
            NodeBaseline,
            LinkBaseline,
            ScadaReading,
            ScadaDevice,
            *ELEMENT_MODELS.values(),
        )
        for model in tables:
            cur.execute(f'ANALYZE "{model._meta.db_table}"')  # noqa: S608 - our table names
    summary.phases["analyze"] = _time.monotonic() - t
    summary.seconds = _time.monotonic() - t0
    return summary


def _prefixed_spec(spec: demo_scada.DeviceSpec, prefix: str) -> demo_scada.DeviceSpec:
    return demo_scada.DeviceSpec(
        device_id=prefix + spec.device_id, name=spec.name, quantity=spec.quantity, unit=spec.unit,
        element_type=spec.element_type, element_id=prefix + spec.element_id, lon=spec.lon, lat=spec.lat,
        accuracy=spec.accuracy,
    )  # fmt: skip


def _stage_tile(cur: Any, project_id: int, src: str) -> None:
    """Stage tile ``src``'s baseline, devices and readings in temporary tables (dropped at commit)
    with the prefix stripped, so each tile copy reads a small table instead of the growing project."""
    n = len(src) + 1
    like = src + "%"
    cur.execute(
        "CREATE TEMP TABLE tile_node ON COMMIT DROP AS SELECT element_type, substr(element_id, %s) AS eid, time, "
        f'pressure, head, demand, quality FROM "{NodeBaseline._meta.db_table}" '  # noqa: S608 - our names
        "WHERE project_id = %s AND element_id LIKE %s ORDER BY element_type, element_id, time",
        [n, project_id, like],
    )
    cur.execute(
        "CREATE TEMP TABLE tile_link ON COMMIT DROP AS SELECT element_type, substr(element_id, %s) AS eid, time, "
        f'flow, velocity, headloss, status, setting FROM "{LinkBaseline._meta.db_table}" '  # noqa: S608
        "WHERE project_id = %s AND element_id LIKE %s ORDER BY element_type, element_id, time",
        [n, project_id, like],
    )
    cur.execute(
        "CREATE TEMP TABLE tile_device ON COMMIT DROP AS SELECT substr(device_id, %s) AS did, name, quantity, "
        "unit, element_type, substr(element_id, %s) AS eid, sample_interval_s, accuracy "
        f'FROM "{ScadaDevice._meta.db_table}" WHERE project_id = %s AND device_id LIKE %s',  # noqa: S608
        [n, n, project_id, like],
    )
    cur.execute(
        "CREATE TEMP TABLE tile_reading ON COMMIT DROP AS SELECT substr(d.device_id, %s) AS did, r.time, "
        "r.monitored_value, r.cleaned_value, r.quality "
        f'FROM "{ScadaReading._meta.db_table}" r JOIN "{ScadaDevice._meta.db_table}" d ON d.id = r.device_id '  # noqa: S608
        "WHERE d.project_id = %s AND d.device_id LIKE %s",
        [n, project_id, like],
    )


def _copy_tile(cur: Any, project_id: int, dst: str) -> None:
    """Copy the staged tile to tile ``dst`` with re-prefixed ids; device locations move with the
    tile (taken from the new tile's element geometry)."""
    cur.execute(
        f'INSERT INTO "{NodeBaseline._meta.db_table}" (project_id, element_type, element_id, time, pressure, '  # noqa: S608
        "head, demand, quality) SELECT %s, element_type, %s || eid, time, pressure, head, demand, quality "
        "FROM tile_node",
        [project_id, dst],
    )
    cur.execute(
        f'INSERT INTO "{LinkBaseline._meta.db_table}" (project_id, element_type, element_id, time, flow, '  # noqa: S608
        "velocity, headloss, status, setting) SELECT %s, element_type, %s || eid, time, flow, velocity, "
        "headloss, status, setting FROM tile_link",
        [project_id, dst],
    )
    cur.execute(
        f'INSERT INTO "{ScadaDevice._meta.db_table}" (project_id, device_id, name, quantity, unit, native_unit, '  # noqa: S608
        "element_type, element_id, location, sample_interval_s, accuracy) "
        "SELECT %s, %s || t.did, t.name, t.quantity, t.unit, t.unit, t.element_type, %s || t.eid, "
        "COALESCE(j.geom, tk.geom, ST_LineInterpolatePoint(p.geom, 0.5)), t.sample_interval_s, t.accuracy "
        "FROM tile_device t "
        "LEFT JOIN queries_junction j ON t.element_type = 'junction' AND j.project_id = %s "
        "  AND j.element_id = %s || t.eid "
        "LEFT JOIN queries_tank tk ON t.element_type = 'tank' AND tk.project_id = %s AND tk.element_id = %s || t.eid "
        "LEFT JOIN queries_pipe p ON t.element_type = 'pipe' AND p.project_id = %s AND p.element_id = %s || t.eid "
        "ORDER BY t.did",
        [project_id, dst, dst, project_id, dst, project_id, dst, project_id, dst],
    )
    cur.execute(
        f'INSERT INTO "{ScadaReading._meta.db_table}" (device_id, time, monitored_value, cleaned_value, quality) '  # noqa: S608
        "SELECT d.id, t.time, t.monitored_value, t.cleaned_value, t.quality FROM tile_reading t "
        f'JOIN "{ScadaDevice._meta.db_table}" d ON d.project_id = %s AND d.device_id = %s || t.did '
        "ORDER BY t.time, d.id",
        [project_id, dst],
    )
