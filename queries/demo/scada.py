"""Demo SCADA: devices on real elements and 5-minute readings derived from the model baseline.

monitored = baseline (linearly interpolated to 5 minutes) + a fixed per-device bias (the model is never
exactly the real network) + Gaussian sensor noise, then damaged the way field data is: dropouts (gaps:
slots with nothing received), spikes, and one stuck sensor. ``cleaned`` comes from ``clean_series``.

Every slot of every device has a row; a gap is ``monitored_value IS NULL`` with ``quality='gap'``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.db import connection
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from queries.demo.cleaning import clean_series
from queries.importer.copy import copy_lines, copy_text
from queries.importer.epanet import NetworkGeometry
from queries.models import ScadaDevice, ScadaReading

SLOT_S = 300


@dataclass(frozen=True)
class DeviceSpec:
    device_id: str
    name: str
    quantity: str
    unit: str
    element_type: str
    element_id: str
    lon: float
    lat: float
    accuracy: float


def _spread(
    rng: np.random.Generator, candidates: Sequence[str], xy: dict[str, tuple[float, float]], n: int
) -> list[str]:
    """Pick ``n`` candidates spread over the map (farthest-point sampling from a random first pick)."""
    if len(candidates) <= n:
        return list(candidates)
    pts = np.array([xy[c] for c in candidates])
    chosen = [int(rng.integers(len(candidates)))]
    dist = np.hypot(*(pts - pts[chosen[0]]).T)
    while len(chosen) < n:
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.hypot(*(pts - pts[nxt]).T))
    return [candidates[i] for i in chosen]


def choose_devices(
    wn: WaterNetworkModel,
    geometry: NetworkGeometry,
    rng: np.random.Generator,
    *,
    pressure: int,
    flow: int,
    level: int,
    streets: Sequence[str],
) -> list[DeviceSpec]:
    """Pressure transmitters at demand junctions, flow meters on large pipes, level at tanks."""
    nl, lc = geometry.node_lonlat, geometry.link_coords
    demand_junctions = sorted(n for n, j in wn.junctions() if (j.base_demand or 0) > 0)
    big_pipes = sorted(n for n, p in wn.pipes() if p.diameter >= 0.3 and p.length > 50)
    if len(big_pipes) < flow:
        big_pipes = sorted(wn.pipe_name_list)
    link_mid = {n: tuple(np.mean(np.array(lc[n]), axis=0)) for n in big_pipes}
    specs: list[DeviceSpec] = []
    for i, jid in enumerate(_spread(rng, demand_junctions, nl, pressure), start=1):
        street = streets[int(rng.integers(len(streets)))]
        specs.append(DeviceSpec(f"PT-{i:03d}", f"Pressure {street} ({jid})", "pressure", "m", "junction", jid,
                                *nl[jid], 0.15))  # fmt: skip
    for i, pid in enumerate(_spread(rng, big_pipes, link_mid, flow), start=1):  # type: ignore[arg-type]
        street = streets[int(rng.integers(len(streets)))]
        lon, lat = link_mid[pid]
        specs.append(DeviceSpec(f"FT-{i:03d}", f"Flow main {street} ({pid})", "flow", "m3/s", "pipe", pid,
                                float(lon), float(lat), 0.0005))  # fmt: skip
    tanks = sorted(wn.tank_name_list)
    picked = sorted(rng.choice(len(tanks), size=min(level, len(tanks)), replace=False).tolist())
    for i, idx in enumerate(picked, start=1):
        tid = tanks[idx]
        specs.append(DeviceSpec(f"LT-{i:03d}", f"Level {tid}", "level", "m", "tank", tid, *nl[tid], 0.01))
    return specs


def _truth(
    results: SimulationResults, spec: DeviceSpec, slots: np.ndarray, wn: WaterNetworkModel, prefix: str
) -> np.ndarray:
    element = spec.element_id[len(prefix) :]
    if spec.quantity == "pressure":
        series = results.node["pressure"][element]
    elif spec.quantity == "flow":
        series = results.link["flowrate"][element]
    else:  # level above the tank bottom = head - elevation
        series = results.node["head"][element] - wn.get_node(element).elevation
    t = series.index.to_numpy(dtype=float)
    return np.interp(slots, t, series.to_numpy(dtype=float))


def synthesize(
    spec: DeviceSpec, truth: np.ndarray, rng: np.random.Generator, *, stuck: tuple[int, int] | None
) -> list[float | None]:
    """Monitored values of one device: truth + bias + noise, with dropouts, spikes, and a stuck run."""
    n = len(truth)
    scale = 1.0 if spec.quantity != "flow" else max(float(np.mean(np.abs(truth))), 0.001)
    bias = rng.normal(0.0, 2 * spec.accuracy)
    noise = rng.normal(0.0, spec.accuracy if spec.quantity != "flow" else 0.01 * scale + spec.accuracy, n)
    values = truth + bias + noise
    # Spikes: about 0.4 % of slots, far outside the noise (transmitter glitches, EMI).
    spike_at = rng.random(n) < 0.004
    magnitude = {"pressure": 8.0, "flow": 0.8 * scale + 0.02, "level": 1.0}[spec.quantity]
    values = np.where(spike_at, values + rng.choice([-1.0, 1.0], n) * magnitude * rng.uniform(1.0, 2.0, n), values)
    out: list[float | None] = [round(float(v), 4) for v in values]
    if stuck is not None:
        a, b = stuck
        for m in range(a, b):
            out[m] = out[a - 1]
    # Dropouts: one outage of 15 min - 3 h for about half the devices, plus rare single lost samples.
    if rng.random() < 0.5:
        length = min(int(rng.integers(3, 37)), max(1, n // 4))
        begin = int(rng.integers(0, n - length))
        for m in range(begin, begin + length):
            out[m] = None
    for m in np.flatnonzero(rng.random(n) < 0.005).tolist():
        out[m] = None
    return out


def summarize_reading_brin() -> None:
    """Summarize the readings' BRIN page ranges written since the last summary, so time-window scans
    skip them at once instead of after the next autovacuum."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT brin_summarize_new_values(%s::regclass)", ["scadareading_time_brin"])


def write_scada(
    *,
    project_id: int,
    wn: WaterNetworkModel,
    results: SimulationResults,
    specs: Sequence[DeviceSpec],
    start: datetime,
    hours: float,
    rng: np.random.Generator,
    stuck_device: str | None,
    element_prefix: str = "",
) -> dict[str, int]:
    """Create the devices and COPY their readings (cleaned with ``clean_series``). ``element_prefix``
    is the tile prefix of the specs' element ids (the results use the network's own ids)."""
    devices = ScadaDevice.objects.bulk_create(
        ScadaDevice(
            project_id=project_id,
            device_id=s.device_id,
            name=s.name,
            quantity=s.quantity,
            unit=s.unit,
            element_type=s.element_type,
            element_id=s.element_id,
            location=f"SRID=4326;POINT({s.lon!r} {s.lat!r})",
            sample_interval_s=SLOT_S,
            accuracy=s.accuracy,
        )
        for s in specs
    )
    n_slots = int(hours * 3600 // SLOT_S)
    slots = np.arange(n_slots, dtype=float) * SLOT_S
    stamps = [(start + timedelta(seconds=int(s))).isoformat() for s in slots]
    per_device: list[tuple[int, list[float | None], list[float | None], list[str]]] = []
    for device, spec in zip(devices, specs, strict=True):
        stuck = (20 * 12, 26 * 12) if spec.device_id == stuck_device else None
        monitored = synthesize(spec, _truth(results, spec, slots, wn, element_prefix), rng, stuck=stuck)
        threshold = {"pressure": 2.0, "flow": 0.0, "level": 0.3}[spec.quantity]
        if spec.quantity == "flow":
            present = [abs(v) for v in monitored if v is not None]
            threshold = 0.25 * (float(np.mean(present)) if present else 0.0) + 10 * spec.accuracy
        cleaned, quality = clean_series(monitored, min_threshold=threshold)
        per_device.append((device.pk, monitored, cleaned, quality))

    def lines() -> Iterator[str]:
        # Time-major order, like live ingestion: keeps the BRIN index on time tight.
        for k, ts in enumerate(stamps):
            for pk, monitored, cleaned, quality in per_device:
                yield f"{pk}\t{ts}\t{copy_text(monitored[k])}\t{copy_text(cleaned[k])}\t{quality[k]}\n"

    rows = copy_lines(
        ScadaReading._meta.db_table, ["device_id", "time", "monitored_value", "cleaned_value", "quality"], lines()
    )
    summarize_reading_brin()
    return {"scada_device": len(devices), "scada_reading": rows}
