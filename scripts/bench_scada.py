"""``make bench-scada``: the SCADA import at historian scale (issue 21), never part of ``make test``.

In its own database (``tjwater_bench_scada`` on the server of ``DATABASE_URL``, migrated, Net3 imported
without a baseline): ``--devices`` devices (three in four pressure in psi, the rest flow in gpm, every
``--step`` seconds) and a wide historian CSV.gz of ``--days`` days of them (default 200 devices × 365 days
× 5 min ≈ 21 M values), with a few empty cells. Then ``manage.py import_scada`` in a child process
(wall time and its peak RSS from ``/usr/bin/time``), the same file again (nothing may change), and
``query_scada_readings`` at its maximum (20 devices × 24 h) through the service, p50/p95 over 30 windows.
Figures go to stdout and ``var/bench/scada.json`` with the machine's load average.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _env(db: str) -> dict[str, str]:
    base = os.environ.get("DATABASE_URL", "postgis://postgres@127.0.0.1:5432/tjwater")
    url = base.rsplit("/", 1)[0] + "/" + db
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1"}


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )


def write_files(out: Path, devices: int, days: int, step: int) -> tuple[Path, Path, int]:
    rng = np.random.default_rng(21)
    ids = [f"PT-{i:04d}" if i % 4 else f"FT-{i:04d}" for i in range(devices)]
    dev = out / "devices.csv"
    with dev.open("w") as fh:
        fh.write("device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy\n")
        junctions = [str(j) for j in (10, 15, 20, 35, 40, 50, 60, 601, 61, 101, 103, 105, 107, 109, 111, 113)]
        pipes = [str(p) for p in (20, 40, 50, 60, 101, 103, 105, 107, 109, 111, 112, 113)]
        for i, d in enumerate(ids):
            if d.startswith("PT"):
                fh.write(f"{d},Pressure {d},pressure,psi,junction,{junctions[i % len(junctions)]},,,{step},0.2\n")
            else:
                fh.write(f"{d},Flow {d},flow,gpm,pipe,{pipes[i % len(pipes)]},,,{step},2\n")
    csv = out / "historian.csv.gz"
    start = datetime(2025, 1, 1, tzinfo=UTC)
    n = days * 86400 // step
    base = np.where(np.array([d.startswith("PT") for d in ids]), 60.0, 800.0)
    with gzip.open(csv, "wt", compresslevel=1) as fh:
        fh.write("time," + ",".join(ids) + "\n")
        block = 2016
        for b in range(0, n, block):
            m = min(block, n - b)
            k = np.arange(b, b + m)[:, None]
            values = base * (1 + 0.1 * np.sin(2 * np.pi * k / (86400 / step))) + rng.normal(0, 0.3, (m, len(ids)))
            text = np.char.mod("%.2f", values)
            text[rng.random((m, len(ids))) < 0.002] = ""
            for r in range(m):
                t = start + timedelta(seconds=int((b + r) * step))
                fh.write(t.strftime("%Y-%m-%dT%H:%M:%SZ") + "," + ",".join(text[r]) + "\n")
    return dev, csv, n * len(ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--step", type=int, default=300)
    parser.add_argument("--db", default="tjwater_bench_scada")
    args = parser.parse_args()
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    env = _env(args.db)
    admin = _env("postgres")["DATABASE_URL"].replace("postgis://", "postgresql://")
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}"')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    with psycopg.connect(env["DATABASE_URL"].replace("postgis://", "postgresql://"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    manage(env, "migrate", "-v", "0")
    manage(env, "project_create", "bench-scada", "--name", "SCADA bench")
    manage(env, "import_network", str(_net3()), "--project", "bench-scada", "--center", "117.2,39.1",
           "--baseline-hours", "0")  # fmt: skip
    t = time.monotonic()
    dev, csv, cells = write_files(out, args.devices, args.days, args.step)
    generated_s = time.monotonic() - t
    manage(env, "import_scada_devices", str(dev), "--project", "bench-scada")
    load_before = os.getloadavg()

    def timed_import() -> tuple[float, float, dict[str, object]]:
        # /usr/bin/time -f %M: the peak RSS (KiB) of the import process itself, not of earlier children.
        t0 = time.monotonic()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%M", sys.executable, "manage.py", "import_scada", str(csv), "--project",
             "bench-scada", "--json"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        seconds = time.monotonic() - t0
        peak_kib = int(done.stderr.strip().splitlines()[-1])
        return seconds, peak_kib / 1024, json.loads(done.stdout)

    first_s, first_rss, first = timed_import()
    again_s, again_rss, again = timed_import()
    query = _query_times(env, args.days)
    results = {
        "measured_at": datetime.now(UTC).isoformat(),
        "load_average_before": load_before,
        "cpus": os.cpu_count(),
        "devices": args.devices,
        "days": args.days,
        "values_in_file": cells,
        "file_mb": round(csv.stat().st_size / 1e6, 1),
        "generate_s": round(generated_s, 1),
        "import_s": round(first_s, 1),
        "import_peak_rss_mb": round(first_rss, 1),
        "import_summary": {k: first[k] for k in ("samples", "slots", "inserted", "updated", "rejects", "phases")},
        "reimport_s": round(again_s, 1),
        "reimport_peak_rss_mb": round(again_rss, 1),
        "reimport_changed": again["inserted"] + again["updated"],
        "reimport_phases": again["phases"],
        "query_scada_readings_20x24h_ms": query,
        "load_average_after": os.getloadavg(),
    }
    (out / "scada.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    load = ", ".join(f"{x:.2f}" for x in results["load_average_before"])
    print(
        f"import {cells / 1e6:.1f} M values: {first_s:.0f} s, peak RSS {first_rss:.0f} MB; the same file again: "
        f"{again_s:.0f} s ({results['reimport_changed']} rows changed); query_scada_readings 20 x 24 h: "
        f"p50 {query['p50']} ms, p95 {query['p95']} ms; load average before: {load} ({os.cpu_count()} CPUs)"
    )


def _net3() -> Path:
    import wntr

    return Path(wntr.__file__).parent / "library" / "networks" / "Net3.inp"


def _query_times(env: dict[str, str], days: int) -> dict[str, float]:
    code = (
        f"DAYS = {days}\n"
        + r"""
import json, statistics, time, django
from datetime import timedelta, datetime, UTC
django.setup()
from contexts.models import Project
from queries.models import ScadaDevice
from queries.services import scada
from queries.schemas.common import PageRequest
from tests.queries.factories import service_scope
p = Project.objects.get(slug="bench-scada")
scope = service_scope(p, ["scada.view"])
ids = list(ScadaDevice.objects.filter(project=p).order_by("device_id").values_list("device_id", flat=True)[:20])
times = []
for k in range(31):
    start = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=1 + k * (DAYS - 2) // 30)
    t0 = time.perf_counter()
    r = scada.query_scada_readings(scope=scope, device_ids=ids, start=start, end=start + timedelta(hours=24),
                                   field="cleaned_value")
    times.append((time.perf_counter() - t0) * 1000)
    assert r.data.total == 20 * 288, r.data.total
times = sorted(times[1:])
print(json.dumps({"p50": round(statistics.median(times), 1), "p95": round(times[int(0.95 * len(times)) - 1], 1),
                  "points": 20 * 288}))
"""
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
