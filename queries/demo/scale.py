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

import numpy as np
from django.db import connection, transaction

from contexts.models import Project
from queries.demo import scada as demo_scada
from queries.importer.epanet import (
    BASELINE_START,
    delete_network,
    network_geometry,
    read_inp,
    simulate,
    write_baseline,
    write_network,
    wntr_network_path,
)
from queries.importer.georef import Georeferencer
from queries.models import LinkBaseline, NodeBaseline, ScadaDevice, ScadaReading


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
        summary.phases["delete"] = _time.monotonic() - t
        t = _time.monotonic()
        first = tile_prefix(0, 0)
        half = (tiles - 1) / 2
        for i in range(tiles):
            for j in range(tiles):
                georef = Georeferencer(
                    center=center, scale=scale, origin=(cx - (i - half) * dx, cy - (j - half) * dy)
                )
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
        geometry0, specs0 = tile0
        demo_scada.write_scada(
            project_id=project.pk, wn=wn, results=results,
            specs=[_prefixed_spec(s, first) for s in specs0], start=start, hours=baseline_hours,
            rng=np.random.default_rng(11), stuck_device=None, element_prefix=first,
        )  # fmt: skip
        summary.phases["tile0_series"] = _time.monotonic() - t
        t = _time.monotonic()
        with connection.cursor() as cur:
            for i in range(tiles):
                for j in range(tiles):
                    if i == 0 and j == 0:
                        continue
                    _copy_tile(cur, project.pk, first, tile_prefix(i, j))
        summary.phases["copy_tiles"] = _time.monotonic() - t
        t = _time.monotonic()
        for model in (NodeBaseline, LinkBaseline):
            summary.counts[model._meta.model_name] = model.objects.filter(project=project).count()
        summary.counts["scada_device"] = ScadaDevice.objects.filter(project=project).count()
        summary.counts["scada_reading"] = ScadaReading.objects.filter(device__project=project).count()
    with connection.cursor() as cur:
        for model in (NodeBaseline, LinkBaseline, ScadaReading):
            cur.execute(f'ANALYZE "{model._meta.db_table}"')  # noqa: S608 - our table names
    summary.phases["count_analyze"] = _time.monotonic() - t
    summary.seconds = _time.monotonic() - t0
    return summary


def _prefixed_spec(spec: demo_scada.DeviceSpec, prefix: str) -> demo_scada.DeviceSpec:
    return demo_scada.DeviceSpec(
        device_id=prefix + spec.device_id, name=spec.name, quantity=spec.quantity, unit=spec.unit,
        element_type=spec.element_type, element_id=prefix + spec.element_id, lon=spec.lon, lat=spec.lat,
        accuracy=spec.accuracy,
    )  # fmt: skip


def _copy_tile(cur: object, project_id: int, src: str, dst: str) -> None:
    """Copy tile ``src``'s baseline, devices and readings to tile ``dst`` with re-prefixed ids; device
    locations move with the tile (the new tile's element geometry)."""
    n = len(src) + 1
    for table, cols in (
        (NodeBaseline._meta.db_table, "time, pressure, head, demand, quality"),
        (LinkBaseline._meta.db_table, "time, flow, velocity, headloss, status, setting"),
    ):
        cur.execute(  # type: ignore[attr-defined]
            f'INSERT INTO "{table}" (project_id, element_type, element_id, {cols}) '  # noqa: S608 - our names
            f"SELECT project_id, element_type, %s || substr(element_id, %s), {cols} FROM \"{table}\" "
            "WHERE project_id = %s AND element_id LIKE %s ORDER BY element_type, element_id, time",
            [dst, n, project_id, src + "%"],
        )
    dev = ScadaDevice._meta.db_table
    cur.execute(  # type: ignore[attr-defined]
        f'INSERT INTO "{dev}" (project_id, device_id, name, quantity, unit, element_type, element_id, location, '  # noqa: S608
        "sample_interval_s, accuracy) "
        "SELECT d.project_id, %s || substr(d.device_id, %s), d.name, d.quantity, d.unit, d.element_type, "
        "%s || substr(d.element_id, %s), "
        "COALESCE((SELECT ST_Centroid(e.geom) FROM queries_junction e WHERE e.project_id = d.project_id "
        "  AND e.element_id = %s || substr(d.element_id, %s)), "
        " (SELECT ST_LineInterpolatePoint(e.geom, 0.5) FROM queries_pipe e WHERE e.project_id = d.project_id "
        "  AND e.element_id = %s || substr(d.element_id, %s)), "
        " (SELECT e.geom FROM queries_tank e WHERE e.project_id = d.project_id "
        "  AND e.element_id = %s || substr(d.element_id, %s))), "
        "d.sample_interval_s, d.accuracy "
        f'FROM "{dev}" d WHERE d.project_id = %s AND d.device_id LIKE %s ORDER BY d.device_id',
        [dst, n, dst, n, dst, n, dst, n, dst, n, project_id, src + "%"],
    )
    rd = ScadaReading._meta.db_table
    cur.execute(  # type: ignore[attr-defined]
        f'INSERT INTO "{rd}" (device_id, time, monitored_value, cleaned_value, quality) '  # noqa: S608
        f'SELECT dn.id, r.time, r.monitored_value, r.cleaned_value, r.quality FROM "{rd}" r '
        f'JOIN "{dev}" d0 ON d0.id = r.device_id '
        f'JOIN "{dev}" dn ON dn.project_id = d0.project_id AND dn.device_id = %s || substr(d0.device_id, %s) '
        "WHERE d0.project_id = %s AND d0.device_id LIKE %s ORDER BY r.time, dn.id",
        [dst, n, project_id, src + "%"],
    )
