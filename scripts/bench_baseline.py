"""``make bench-baseline``: the model baseline of a long window (issue 21), never part of ``make test``.

In its own database (``tjwater_bench_baseline``, migrated): ky4 imported without a baseline, then
``simulate_baseline_window`` over ``--hours`` (default 744 h, a month, every 900 s) in a child process —
wall time and the child's peak RSS (``/usr/bin/time``) — and the rows written. Figures go to stdout and
``var/bench/baseline.json`` with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_scada import _env, manage  # noqa: E402 - the same database set-up

CHILD = """
import json, django
from datetime import datetime
django.setup()
from contexts.models import Project
from queries.importer.baseline_window import simulate_baseline_window
s = simulate_baseline_window(project=Project.objects.get(slug="bench-baseline"),
                             start=datetime.fromisoformat({start!r}), hours={hours}, step_s={step})
print(json.dumps({{"instants": s.instants, "rows": s.rows, "seconds": s.seconds}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=float, default=744)
    parser.add_argument("--step", type=int, default=900)
    parser.add_argument("--network", default="ky4.inp")
    parser.add_argument("--db", default="tjwater_bench_baseline")
    args = parser.parse_args()
    import psycopg
    import wntr

    env = _env(args.db)
    admin = _env("postgres")["DATABASE_URL"].replace("postgis://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}"')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    with psycopg.connect(env["DATABASE_URL"].replace("postgis://", "postgresql://"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    manage(env, "migrate", "-v", "0")
    manage(env, "project_create", "bench-baseline", "--name", "Baseline bench")
    network = Path(wntr.__file__).parent / "library" / "networks" / args.network
    manage(env, "import_network", str(network), "--project", "bench-baseline", "--center", "117.2,39.1",
           "--scale", "0.3048",
           "--baseline-hours", "0")  # fmt: skip
    load_before = os.getloadavg()
    code = CHILD.format(start="2026-11-01T00:00:00+00:00", hours=args.hours, step=args.step)
    t0 = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.monotonic() - t0
    result = json.loads(done.stdout.strip().splitlines()[-1])
    results = {
        "measured_at": datetime.now(UTC).isoformat(),
        "network": args.network,
        "hours": args.hours,
        "step_s": args.step,
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(int(done.stderr.strip().splitlines()[-1]) / 1024, 1),
        **result,
        "load_average_after": os.getloadavg(),
    }
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "baseline.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
