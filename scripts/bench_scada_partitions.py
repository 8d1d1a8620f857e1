"""The readings' partitioning decision (issue 21), measured: ``query_scada_readings`` at its maximum and the
import of one day's historian file, on the readings table as it is (one table) and range-partitioned by
month on ``time`` — the same rows, the same code (the partitioned copy takes the table's name).

Not part of ``make test``. Steps, on a database filled by ``generate_scada_history`` (see
``queries/models/README.md`` for the commands and the figures)::

    python scripts/bench_scada_partitions.py measure --project SLUG      # the current layout
    python scripts/bench_scada_partitions.py partition                   # copy into monthly partitions, swap names
    python scripts/bench_scada_partitions.py measure --project SLUG      # again, partitioned

``measure`` prints and appends to ``var/bench/scada_partitions.json``: rows, table+index size, p50/p95 of
20 devices × 24 h over 30 days spread over the history (a cold pass, then the same windows warm), then
``import_scada`` of a wide file of one day for every generated device: a new day (inserts), the same file
again (nothing changes) and a changed copy of a day inside the history (updates) — wall time of the
command, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
OUT = ROOT / "var" / "bench" / os.environ.get("BENCH_PARTITIONS_OUT", "scada_partitions.json")


def _setup() -> None:
    import django

    django.setup()


def _sql(statement: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.fetchall() if cursor.description else []


def partition() -> None:
    """Copy ``queries_scadareading`` into a table range-partitioned by month on ``time`` (the same columns,
    the unique ``(device_id, time)`` and a BRIN on ``time`` per partition), then swap the names."""
    _setup()
    lo, hi = _sql("SELECT min(time), max(time) FROM queries_scadareading")[0]
    t0 = time.monotonic()
    _sql("DROP TABLE IF EXISTS queries_scadareading_part CASCADE")
    _sql("CREATE SEQUENCE IF NOT EXISTS queries_scadareading_part_id_seq")
    _sql(
        "CREATE TABLE queries_scadareading_part ("
        "id bigint NOT NULL DEFAULT nextval('queries_scadareading_part_id_seq'),"
        " time timestamptz NOT NULL, monitored_value double precision, cleaned_value double precision,"
        " quality varchar(8) NOT NULL, device_id bigint NOT NULL,"
        " CONSTRAINT part_no_cleaned_without_monitored CHECK (monitored_value IS NOT NULL OR cleaned_value IS NULL),"
        " PRIMARY KEY (id, time), UNIQUE (device_id, time)) PARTITION BY RANGE (time)"
    )
    _sql("CREATE INDEX ON queries_scadareading_part USING brin (time) WITH (pages_per_range = 32, autosummarize = on)")
    month = datetime(lo.year, lo.month, 1, tzinfo=UTC)
    end = hi + timedelta(days=62)  # room for the measured imports after the history
    while month <= end:
        nxt = datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)
        _sql(
            f"CREATE TABLE queries_scadareading_p{month:%Y%m} PARTITION OF queries_scadareading_part "
            "FOR VALUES FROM (%s) TO (%s)",
            [month, nxt],
        )
        month = nxt
    _sql("CREATE TABLE queries_scadareading_pdefault PARTITION OF queries_scadareading_part DEFAULT")
    _sql("INSERT INTO queries_scadareading_part SELECT id, time, monitored_value, cleaned_value, quality, device_id "
         "FROM queries_scadareading")  # fmt: skip
    _sql("SELECT setval('queries_scadareading_part_id_seq', (SELECT max(id) FROM queries_scadareading_part))")
    copy_s = time.monotonic() - t0
    _sql("ALTER TABLE queries_scadareading RENAME TO queries_scadareading_flat")
    _sql("ALTER TABLE queries_scadareading_part RENAME TO queries_scadareading")
    _sql("ANALYZE queries_scadareading")
    print(json.dumps({"partitioned_copy_s": round(copy_s, 1)}))


def _write_day(path: Path, ids: list[str], day: datetime, shift: float) -> None:
    rng = np.random.default_rng(int(day.timestamp()))
    with path.open("w") as fh:
        fh.write("time," + ",".join(ids) + "\n")
        for r in range(288):
            t = day + timedelta(minutes=5 * r)
            values = 40 + shift + 5 * np.sin(2 * np.pi * r / 288) + rng.normal(0, 0.3, len(ids))
            fh.write(t.strftime("%Y-%m-%dT%H:%M:%SZ") + "," + ",".join(f"{v:.3f}" for v in values) + "\n")


def measure(slug: str) -> None:
    _setup()
    from contexts.models import Project
    from queries.models import ScadaDevice
    from queries.services import scada
    from tests.queries.factories import service_scope

    layout = (
        "partitioned"
        if _sql("SELECT relkind FROM pg_class WHERE relname = 'queries_scadareading'")[0][0] == "p"
        else "one table"
    )
    _sql("ANALYZE queries_scadareading")
    rows = _sql("SELECT reltuples::bigint FROM pg_class WHERE relname = 'queries_scadareading'")[0][0]
    if layout == "partitioned":
        rows = _sql("SELECT sum(reltuples)::bigint FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid "
                    "WHERE i.inhparent = 'queries_scadareading'::regclass")[0][0]  # fmt: skip
    size = _sql(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.oid = 'queries_scadareading'::regclass "
        "OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'queries_scadareading'::regclass)"
    )[0][0]
    lo, hi = _sql("SELECT min(time), max(time) FROM queries_scadareading WHERE device_id = "
                  "(SELECT min(id) FROM queries_scadadevice WHERE device_id LIKE 'GEN-%%')")[0]  # fmt: skip
    project = Project.objects.get(slug=slug)
    scope = service_scope(project, ["scada.view"])
    gen = list(ScadaDevice.objects.filter(project=project, device_id__startswith="GEN-").order_by("device_id")
               .values_list("device_id", flat=True))  # fmt: skip
    ids = gen[:: max(1, len(gen) // 20)][:20]
    days = (hi - lo).days
    starts = [lo + timedelta(days=1 + k * (days - 2) // 29) for k in range(30)]

    def one_pass() -> list[float]:
        out = []
        for start in starts:
            t0 = time.perf_counter()
            r = scada.query_scada_readings(scope=scope, device_ids=ids, start=start, end=start + timedelta(hours=24),
                                           field="cleaned_value")  # fmt: skip
            out.append((time.perf_counter() - t0) * 1000)
            assert r.data.total == 20 * 288, r.data.total
        return sorted(out)

    cold, warm = one_pass(), one_pass()
    pct = lambda xs: {"p50": round(statistics.median(xs), 1), "p95": round(xs[int(0.95 * len(xs)) - 1], 1)}  # noqa: E731
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    work = ROOT / "var" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    new_day = datetime(hi.year, hi.month, hi.day, tzinfo=UTC) + timedelta(days=1)
    old_day = lo + timedelta(days=days // 2)
    old_day = datetime(old_day.year, old_day.month, old_day.day, tzinfo=UTC)
    imports = {}
    changed = 1.0 + time.time() % 100  # new values on every run, whatever an earlier run wrote
    runs = (("new_day", new_day, 0.0), ("same_again", new_day, 0.0), ("changed_day", old_day, changed))
    for name, day, shift in runs:
        path = work / f"partition_{name}.csv"
        _write_day(path, gen, day, shift)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "manage.py", "import_scada", str(path), "--project", slug, "--json"],
                              cwd=ROOT, env=env, check=True, capture_output=True, text=True)  # fmt: skip
        summary = json.loads(done.stdout)
        imports[name] = {"wall_s": round(time.monotonic() - t0, 1), "inserted": summary["inserted"],
                         "updated": summary["updated"], "import_s": summary["seconds"],
                         "phases": summary["phases"]}  # fmt: skip
    # Undo the new day so the next layout imports the same file into the same state.
    _sql("DELETE FROM queries_scadareading WHERE time >= %s", [new_day])
    result = {
        "measured_at": datetime.now(UTC).isoformat(),
        "layout": layout,
        "rows": int(rows),
        "size_gb": round(float(size) / 1e9, 2),
        "devices_generated": len(gen),
        "query_20x24h_ms_cold": pct(cold),
        "query_20x24h_ms_warm": pct(warm),
        "imports_of_one_day": imports,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    previous = json.loads(OUT.read_text()) if OUT.exists() else []
    OUT.write_text(json.dumps([*previous, result], indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=("measure", "partition"))
    parser.add_argument("--project", default="bench-part")
    args = parser.parse_args()
    if args.step == "partition":
        partition()
    else:
        measure(args.project)


if __name__ == "__main__":
    main()
