"""Demo SCADA: devices on real elements and 5-minute readings derived from the model baseline.

monitored = baseline (linearly interpolated to 5 minutes) + a fixed per-device bias (the model is never
exactly the real network) + Gaussian sensor noise, then damaged the way field data is: dropouts (gaps:
slots with nothing received), spikes, and one stuck sensor. ``cleaned`` comes from ``clean_series``.

Every slot of every device has a row; a gap is ``monitored_value IS NULL`` with ``quality='gap'``.

A *scenario* (``Scenario``, e.g. the demo's main break) replaces the baseline as the truth of the devices
where it changes what they would measure: from its start to the end of its computed window those
devices read the scenario's values (interpolated to 5 minutes) with the same bias, noise and damage —
so the readings show the event where the model says it is visible, and nowhere else. ``place_near``
makes sure a few pressure transmitters sit where the event is (replacing, deterministically, the
pressure devices farthest-point sampling added last, which cover the least).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults

from queries.demo.cleaning import clean_series
from queries.importer.copy import copy_lines, copy_text, summarize_reading_brin
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
    for i, pid in enumerate(_spread(rng, big_pipes, link_mid, flow), start=1):
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


@dataclass(frozen=True)
class Scenario:
    """What a scenario computed at some devices' elements: from ``start_s`` to ``end_s`` (seconds after
    the readings' start) the devices in ``series`` read it instead of the baseline. ``series`` maps a
    device id to ``(times_s, values)`` in the device's quantity and unit."""

    start_s: float
    end_s: float
    series: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def planar_m(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Distance in metres between two lon/lat points, equirectangular (fine over a few km)."""
    mean_lat = np.radians((a[1] + b[1]) / 2)
    dx = np.radians(b[0] - a[0]) * np.cos(mean_lat) * 6371008.8
    dy = np.radians(b[1] - a[1]) * 6371008.8
    return float(np.hypot(dx, dy))


def place_near(
    specs: Sequence[DeviceSpec],
    candidates: Sequence[str],
    geometry: NetworkGeometry,
    *,
    count: int,
    spacing_m: float,
    streets: Sequence[str],
    keep: Sequence[str] = (),
) -> list[DeviceSpec]:
    """At least ``count`` pressure devices at ``candidates`` (junctions in order of preference), at least
    ``spacing_m`` apart. Missing ones replace the pressure devices picked last (their ids are kept, their
    element and place change); devices in ``keep`` are never moved. Deterministic: no randomness."""
    nl = geometry.node_lonlat
    wanted = set(candidates)
    specs = list(specs)
    placed = [s.element_id for s in specs if s.quantity == "pressure" and s.element_id in wanted]
    new_sites: list[str] = []
    for jid in candidates:
        if len(placed) + len(new_sites) >= count:
            break
        if all(planar_m(nl[jid], nl[other]) >= spacing_m for other in placed + new_sites):
            new_sites.append(jid)
    movable = [
        i
        for i, s in enumerate(specs)
        if s.quantity == "pressure" and s.element_id not in wanted and s.device_id not in keep
    ]
    for i, jid in zip(reversed(movable), new_sites, strict=False):
        street = streets[int(hashlib.sha1(jid.encode()).hexdigest(), 16) % len(streets)]
        specs[i] = replace(specs[i], name=f"Pressure {street} ({jid})", element_id=jid, lon=nl[jid][0], lat=nl[jid][1])
    return specs


def noise_sd(spec: DeviceSpec, truth: np.ndarray) -> float:
    """The standard deviation of the sensor noise ``synthesize`` adds to ``truth``."""
    if spec.quantity != "flow":
        return spec.accuracy
    return 0.01 * max(float(np.mean(np.abs(truth))), 0.001) + spec.accuracy


def scenario_devices(
    specs: Sequence[DeviceSpec],
    baseline: SimulationResults,
    wn: WaterNetworkModel,
    values: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]],
    *,
    start_s: float,
    end_s: float,
    min_sigma: float = 3.0,
) -> Scenario:
    """The scenario for the devices whose elements it changes measurably: ``values`` maps ``(element_type,
    element_id)`` to the scenario's ``(times_s, value)`` in the device's quantity; a device is included
    when the scenario differs from the baseline by more than ``min_sigma`` times its sensor noise at some
    instant in ``[start_s, end_s]``."""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for spec in specs:
        got = values.get((spec.element_type, spec.element_id))
        if got is None:
            continue
        t, v = got
        inside = (t >= start_s) & (t <= end_s)
        if not inside.any():
            continue
        base = _truth(baseline, spec, t[inside], wn, "")
        if float(np.max(np.abs(v[inside] - base))) > min_sigma * noise_sd(spec, base):
            series[spec.device_id] = (t, v)
    return Scenario(start_s=start_s, end_s=end_s, series=series)


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
    values: np.ndarray = np.interp(slots, t, series.to_numpy(dtype=float))
    return values


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
    scenario: Scenario | None = None,
) -> dict[str, int]:
    """Create the devices and COPY their readings (cleaned with ``clean_series``). ``element_prefix``
    is the tile prefix of the specs' element ids (the results use the network's own ids). Devices of
    ``scenario`` read its values inside its window instead of the baseline's."""
    devices = ScadaDevice.objects.bulk_create(
        ScadaDevice(  # type: ignore[misc]  # Django takes EWKT text; django-stubs only geometries
            project_id=project_id,
            device_id=s.device_id,
            name=s.name,
            quantity=s.quantity,
            unit=s.unit,
            native_unit=s.unit,
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
        truth = _truth(results, spec, slots, wn, element_prefix)
        if scenario is not None and spec.device_id in scenario.series:
            t, v = scenario.series[spec.device_id]
            inside = (slots >= scenario.start_s) & (slots <= scenario.end_s)
            truth[inside] = np.interp(slots[inside], t, v)
        monitored = synthesize(spec, truth, rng, stuck=stuck)
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
