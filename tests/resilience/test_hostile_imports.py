"""Hostile files through the real ``manage.py import_scada_devices``, ``import_scada``, ``import_gis`` and
``import_network`` (issue 41 items 1, 3 and 4): each file is generated here, imported by a child process, and
for each the suite asserts the importing process's own peak RSS (≤ 500 MB, from ``wait4`` in a small
launcher), its time (≤ 10 s: every input but the early-stop one is ≤ 2 MB), a refusal naming the line, row,
field or member, and the project's readings, devices, GIS layers and network unchanged (counts and a checksum
of the values) whenever the file is refused. Figures go to ``var/resilience/results.json``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db import connection

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.gis import import_gis
from queries.importer.scada_devices import import_scada_devices
from queries.importer.scada_readings import import_scada
from queries.models import GisFeature, GisLayer, Job, ScadaReading
from tests.support.gis_files import Feature, write_layer
from tests.support.resilience import Figures
from tests.support.servers import ROOT, subprocess_database_url

pytestmark = [pytest.mark.resilience]

MB = 1024 * 1024
RSS_LIMIT_MB = 500
TIME_LIMIT_S = 10.0
SLUG = "hostile-imports"
DEVICES = (
    "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy\n"
    "PT-1,Pressure 10,pressure,psi,junction,10,,,300,0.2\n"
    "PT-2,Pressure 11,pressure,psi,junction,11,,,300,0.2\n"
)


@pytest.fixture(scope="module")
def hostile_project(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    """A committed project (the child process must see it) with two devices and a day of readings."""
    tmp = tmp_path_factory.mktemp("hostile")
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="Hostile imports", timezone="America/New_York")
        import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
        (tmp / "devices.csv").write_text(DEVICES)
        import_scada_devices(project=project, path=tmp / "devices.csv")
        start = datetime(2026, 1, 1, tzinfo=UTC)
        day = "time,PT-1,PT-2\n" + "".join(
            f"{(start + timedelta(minutes=5 * i)).isoformat()},{50 + i % 7},{51 + i % 5}\n" for i in range(288)
        )
        (tmp / "day.csv").write_text(day)
        import_scada(project=project, path=tmp / "day.csv")
        (tmp / "hydrants.geojson").write_text(json.dumps(_points(3)))
        import_gis(project=project, path=tmp / "hydrants.geojson", layer_key="k")
    yield project
    with django_db_blocker.unblock():
        Project.objects.filter(pk=project.pk).delete()


def _state(project: Project) -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), sum(r.monitored_value), sum(r.cleaned_value), string_agg(DISTINCT r.quality, ',') "
            "FROM queries_scadareading r JOIN queries_scadadevice d ON d.id = r.device_id WHERE d.project_id = %s",
            [project.pk],
        )
        readings = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), string_agg(device_id || name || unit, ',' ORDER BY device_id) FROM queries_scadadevice "
            "WHERE project_id = %s",
            [project.pk],
        )
        devices = cursor.fetchone()
        cursor.execute(
            "SELECT count(f.id), string_agg(l.name || f.source_fid || f.properties::text, ',' ORDER BY f.id) "
            "FROM queries_gislayer l LEFT JOIN queries_gisfeature f ON f.layer_id = l.id WHERE l.project_id = %s",
            [project.pk],
        )
        layers = cursor.fetchone()
        cursor.execute("SELECT count(*), sum(elevation) FROM queries_junction WHERE project_id = %s", [project.pk])
        return (readings, devices, layers, cursor.fetchone())


def _points(count: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A GeoJSON FeatureCollection of ``count`` hydrant points in WGS84 (``extra`` properties on each)."""
    return {
        "type": "FeatureCollection",
        "features": [
            {"type": "Feature", "properties": {"HYD": f"H-{i}", **(extra or {})},
             "geometry": {"type": "Point", "coordinates": [-85.0 + i * 1e-4, 38.0]}}
            for i in range(count)
        ],
    }  # fmt: skip


@dataclass
class Run:
    code: int
    out: str
    seconds: float
    rss_mb: float


#: A small launcher between this process and the import: Linux carries a process's RSS high-water mark
#: across fork and exec into ``ru_maxrss``, so a child forked from this (large) test process would report
#: at least this process's size. The launcher is small when it forks, so the import's figure is its own;
#: it writes the figure (KiB) to the fd given, then exits with the import's status.
_LAUNCH = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "os.write(fd, str(usage.ru_maxrss).encode())\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _run(command: str, path: Path, *extra: str) -> Run:
    """``manage.py <command> <path> --project …`` in a grandchild; its own peak RSS from ``wait4`` in a
    small launcher (``_LAUNCH``)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    read_fd, write_fd = os.pipe()
    t0 = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, str(write_fd),
         sys.executable, "manage.py", command, str(path), "--project", SLUG, *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
    )  # fmt: skip
    os.close(write_fd)
    assert child.stdout is not None
    out = child.stdout.read().decode("utf-8", "replace")
    code = child.wait()
    with os.fdopen(read_fd, "rb") as fh:
        kib = int(fh.read() or b"0")
    assert kib > 0, out  # the launcher reported
    return Run(code, out, time.monotonic() - t0, kib / 1024)


# --- the hostile files (name → writer) ---------------------------------------------------------------


def _absurd_years(path: Path) -> None:
    path.write_text("device_id,time,value\nPT-1,1700-01-01T00:00:00Z,50\nPT-1,2260-12-31T00:00:00Z,51\n")


def _long_number_gz(path: Path) -> None:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b"device_id,time,value\nPT-1,2026-01-02T00:00:00Z,1")
        for _ in range(200):
            fh.write(b"1" * MB)
        fh.write(b"\n")


def _gz_bomb(path: Path) -> None:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b"device_id,time,value\n")
        line = b"PT-1,2026-01-02T00:00:00Z,50\n" * 10_000
        for _ in range(1000):
            fh.write(line)


def _wide_header(path: Path) -> None:
    path.write_text("time," + ",".join(f"D{i}" for i in range(100_000)) + "\n2026-01-02T00:00:00Z\n")


def _many_rejects(path: Path) -> None:
    """20 MB of samples of a device that does not exist: refused at line 2, and the rest never read."""
    with path.open("w") as fh:
        fh.write("device_id,time,value\n")
        block = "".join(f"NOPE-{i},2026-01-02T00:00:00Z,{i}\n" for i in range(100_000))
        for _ in range(8):
            fh.write(block)


def _nul(path: Path) -> None:
    path.write_bytes(b"device_id,time,value\nPT-1,2026-01-02T00:00:00Z,50\nPT-1,2026-01-02T00:05:00Z,5\x000\n")


def _bad_utf8(path: Path) -> None:
    path.write_bytes(b"device_id,time,value\nPT-1,2026-01-02T00:00:00Z,50\nPT-\xff\xfe,2026-01-02T00:05:00Z,50\n")


def _formula(path: Path) -> None:
    path.write_text(
        'device_id,time,value\nPT-1,2026-01-02T00:00:00Z,50\nPT-1,2026-01-02T00:05:00Z,"=HYPERLINK(""http://x"")"\n'
    )


def _truncated_gz(path: Path) -> None:
    rows = "".join(f"PT-1,{(datetime(2026, 1, 2, tzinfo=UTC) + timedelta(minutes=5 * i)).isoformat()},{i % 9}\n"
                   for i in range(20_000))  # fmt: skip
    data = gzip.compress(("device_id,time,value\n" + rows).encode())
    path.write_bytes(data[: len(data) // 2])


def _parquet_wrong_types(path: Path) -> None:
    table = pa.table(
        {
            "device_id": ["PT-1", "PT-1", "PT-1"],
            "time": [1_767_312_000, 1_767_312_300, 1_767_312_600],  # epoch integers, not times
            "value": ["50", "abc", "52"],
        }
    )
    pq.write_table(table, path)


def _parquet_truncated(path: Path) -> None:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"device_id": ["PT-1"] * 1000, "time": ["2026-01-02T00:00:00Z"] * 1000,
                             "value": [50.0] * 1000}), buffer)  # fmt: skip
    path.write_bytes(buffer.getvalue()[:-200])


def _rtl_devices(path: Path) -> None:
    path.write_text(
        DEVICES.splitlines()[0] + "\n"
        'PT-1,=HYPERLINK("http://evil"),pressure,psi,junction,10,,,300,0.2\n'
        "PT-2,\u202eevil\u202c,pressure,psi,junction,11,,,300,0.2\n"
        "PT-3,bad,pressure,psi,junction,nope,,,300,0.2\n"
    )


def _huge_device_field(path: Path) -> None:
    path.write_text(
        DEVICES.splitlines()[0] + "\n" + "PT-9," + "n" * (200 * 1024) + ",pressure,psi,junction,10,,,300,\n"
    )


def _gis_zip_bomb(path: Path) -> None:
    """A zipped Shapefile whose .dbf is 64 MiB of zeros (about 64 KiB packed)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("hydrants.shp", b"\0" * 100)
        with zf.open("hydrants.dbf", "w", force_zip64=True) as member:
            for _ in range(64):
                member.write(b"\0" * MB)


def _gis_zip_escape(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hydrants.shp", b"\0" * 100)
        zf.writestr("../../../etc/cron.d/evil", b"* * * * * root true\n")


def _gis_points(path: Path) -> None:
    path.write_text(json.dumps(_points(3)))


def _gis_nul(path: Path) -> None:
    path.write_text(json.dumps(_points(3, {"NOTE": "kept\0cut here by GDAL"})))


def _gis_wide(path: Path) -> None:
    path.write_text(json.dumps(_points(1, {f"F{i}": i for i in range(10_000)})))


def _gis_huge_property(path: Path) -> None:
    path.write_text(json.dumps(_points(2, {"NOTE": "n" * 900_000})))


def _inp_nul(path: Path) -> None:
    path.write_bytes(b"[JUNCTIONS]\n;ID Elev Demand\n J1 10 1\x00\n[END]\n")


def _inp_long_line(path: Path) -> None:
    path.write_bytes(b"[TITLE]\n" + b"t" * (2 * MB) + b"\n[END]\n")


def _inp_bad_utf8(path: Path) -> None:
    path.write_bytes(b"[TITLE]\nok\n\xff\xfe title\n[END]\n")


@dataclass(frozen=True)
class Case:
    name: str
    command: str
    write: Callable[[Path], None]
    suffix: str
    expect: str  # the refusal's words (the line, row, field or bound)
    extra: tuple[str, ...] | None = None  # the command's options beside the file, when not EXTRA's


CASES = [
    Case("absurd-years", "import_scada", _absurd_years, ".csv", "line 2: time: 1700-01-01T00:00:00Z is outside the years 1970–2100"),  # noqa: E501
    Case("long-number-gz", "import_scada", _long_number_gz, ".csv.gz", "line 2 is longer than 1 MiB"),
    Case("gz-bomb", "import_scada", _gz_bomb, ".csv.gz", "unpacks more than 200 times its size"),
    Case("100k-columns", "import_scada", _wide_header, ".csv", "line 1 has 100001 columns, more than 10000"),
    Case("many-rejects", "import_scada", _many_rejects, ".csv", "stopped reading after line"),
    Case("nul", "import_scada", _nul, ".csv", "line 3 holds a NUL byte"),
    Case("invalid-utf8", "import_scada", _bad_utf8, ".csv", "line 3 is not UTF-8 text"),
    Case("formula-value", "import_scada", _formula, ".csv", "line 3: value: '=HYPERLINK(\"http://x\")' is not a number"),  # noqa: E501
    Case("truncated-gz", "import_scada", _truncated_gz, ".csv.gz", "not a readable gzip file"),
    Case("parquet-wrong-types", "import_scada", _parquet_wrong_types, ".parquet", "row 1: time: 1767312000 is not an ISO 8601 time"),  # noqa: E501
    Case("parquet-truncated", "import_scada", _parquet_truncated, ".parquet", "not a readable Parquet file"),
    Case("devices-formula-rtl", "import_scada_devices", _rtl_devices, ".csv", "line 4, field element_id"),
    Case("devices-huge-field", "import_scada_devices", _huge_device_field, ".csv", "line 2 has a field longer than 64 KiB"),  # noqa: E501
    Case("gis-zip-bomb", "import_gis", _gis_zip_bomb, ".zip", "member 'hydrants.dbf' unpacks more than 200 times its size"),  # noqa: E501
    Case("gis-zip-escape", "import_gis", _gis_zip_escape, ".zip", "member '../../../etc/cron.d/evil' points outside the archive"),  # noqa: E501
    Case("gis-10k-fields", "import_gis", _gis_wide, ".geojson", "has 10001 fields, more than 10000"),
    Case("gis-huge-property", "import_gis", _gis_huge_property, ".geojson", "feature fid 0: field 'NOTE' is longer than 64 KiB"),  # noqa: E501
    Case("gis-sql-layer-key", "import_gis", _gis_points, ".zip", "--layer-key must be 1 to 64 letters", ("--layer-key", "k'; DROP TABLE queries_gisfeature; --")),  # noqa: E501
    Case("gis-nul-property", "import_gis", _gis_nul, ".geojson", "line 1 holds a NUL character (\\u0000)"),
    Case("inp-nul", "import_network", _inp_nul, ".inp", "line 3 holds a NUL byte"),
    Case("inp-long-line", "import_network", _inp_long_line, ".inp", "line 2 is longer than 1 MiB"),
    Case("inp-invalid-utf8", "import_network", _inp_bad_utf8, ".inp", "line 3 of the network file is not UTF-8 text"),  # noqa: E501
]  # fmt: skip

#: What each command is given beside the file: the GIS import targets the project's existing layer, strictly.
EXTRA = {"import_gis": ("--layer-key", "k", "--strict"), "import_network": ("--no-baseline",)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_hostile_file_is_refused_cheaply_by_line_and_loses_nothing(
    hostile_project: Project, django_db_blocker: Any, tmp_path: Path, case: Case, figures: Figures
) -> None:
    path = tmp_path / f"{case.name}{case.suffix}"
    case.write(path)
    size = path.stat().st_size
    with django_db_blocker.unblock():
        before = _state(hostile_project)
    run = _run(case.command, path, *(case.extra if case.extra is not None else EXTRA.get(case.command, ())))
    with django_db_blocker.unblock():
        after = _state(hostile_project)
        job = Job.objects.filter(project=hostile_project).order_by("-pk").values("status", "message").first()
    figures.record(
        f"hostile_import.{case.name}",
        {"bytes": size, "seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1), "exit": run.code},
    )
    assert run.code != 0, run.out
    assert case.expect in run.out, run.out
    assert "Traceback" not in run.out
    assert run.rss_mb <= RSS_LIMIT_MB, (case.name, run.rss_mb)
    assert run.seconds <= TIME_LIMIT_S or size > 2 * MB, (case.name, run.seconds)
    assert after == before
    assert job is not None and job["status"] == "failed" and job["message"], job


def test_an_absurd_but_allowed_span_costs_the_rows_not_the_span(
    hostile_project: Project, tmp_path: Path, figures: Figures
) -> None:
    """Two samples 130 years apart (1970 and 2099) at a 5-minute interval: 13.7 M slots between them,
    and the import writes its two samples (no gap rows for the stretch), quickly and in little memory."""
    path = tmp_path / "span.csv"
    path.write_text("device_id,time,value\nPT-2,1970-01-01T00:00:00Z,50\nPT-2,2099-12-31T00:00:00Z,51\n")
    run = _run("import_scada", path, "--dry-run")
    figures.record(
        "hostile_import.span-130-years", {"seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1)}
    )
    assert run.code == 0, run.out
    assert run.rss_mb <= RSS_LIMIT_MB and run.seconds <= TIME_LIMIT_S, (run.rss_mb, run.seconds)


def test_random_times_over_decades_cost_the_rows(hostile_project: Project, tmp_path: Path, figures: Figures) -> None:
    """40,000 samples at random times from 1970 to 2100 (2 MB): bounded by the rows (GAP_SLOTS gap rows
    per sample at most), not by the 130 years between the first and the last."""
    rng = random.Random(41)
    start = datetime(1970, 1, 1, tzinfo=UTC).timestamp()
    span = datetime(2100, 1, 1, tzinfo=UTC).timestamp() - start
    lines = ["device_id,time,value"] + [
        f"PT-1,{datetime.fromtimestamp(start + rng.random() * span, UTC).isoformat()},{50 + rng.random():.3f}"
        for _ in range(40_000)
    ]
    path = tmp_path / "random.csv"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size <= 2 * MB
    run = _run("import_scada", path, "--dry-run")
    figures.record(
        "hostile_import.random-40k-over-130-years",
        {"seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1)},
    )
    assert run.code == 0, run.out
    assert run.rss_mb <= RSS_LIMIT_MB and run.seconds <= TIME_LIMIT_S, (run.rss_mb, run.seconds)


def test_duplicate_and_reordered_rows_cost_the_rows_and_place_by_the_rule(
    hostile_project: Project, django_db_blocker: Any, tmp_path: Path, figures: Figures
) -> None:
    """24,000 slots, each sample twice with two values, every line shuffled (2 MB): the import places by
    the rule (the mean of an analog slot's samples), exactly as the same slots sent once, in order, as the
    means. PT-2 gets the hostile file and PT-1 the clean one, in a window of their own."""
    rng = random.Random(4141)
    start = datetime(2027, 3, 1, tzinfo=UTC)
    slots = [(start + timedelta(minutes=5 * i)).isoformat() for i in range(24_000)]
    pairs = [(round(40 + rng.random() * 20, 2), round(40 + rng.random() * 20, 2)) for _ in slots]
    lines = [f"PT-2,{t},{v}" for t, pair in zip(slots, pairs, strict=True) for v in pair]
    rng.shuffle(lines)
    hostile, clean = tmp_path / "shuffled.csv", tmp_path / "means.csv"
    hostile.write_text("device_id,time,value\n" + "\n".join(lines) + "\n")
    clean.write_text("device_id,time,value\n" + "".join(
        f"PT-1,{t},{(a + b) / 2}\n" for t, (a, b) in zip(slots, pairs, strict=True)))  # fmt: skip
    assert hostile.stat().st_size <= 2 * MB
    try:
        run = _run("import_scada", hostile)
        figures.record(
            "hostile_import.duplicated-shuffled-48k-lines",
            {"bytes": hostile.stat().st_size, "seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1)},
        )
        assert run.code == 0, run.out
        assert run.rss_mb <= RSS_LIMIT_MB and run.seconds <= TIME_LIMIT_S, (run.rss_mb, run.seconds)
        assert _run("import_scada", clean).code == 0
        with django_db_blocker.unblock():
            window = ScadaReading.objects.filter(device__project=hostile_project, time__gte=start)
            got = {
                device: list(window.filter(device__device_id=device).order_by("time")
                             .values_list("time", "monitored_value", "quality"))
                for device in ("PT-1", "PT-2")
            }  # fmt: skip
        assert len(got["PT-2"]) == len(slots)
        for (t1, v1, q1), (t2, v2, q2) in zip(got["PT-1"], got["PT-2"], strict=True):
            assert (t1, q1) == (t2, q2) and abs(v1 - v2) <= 1e-9 * abs(v1), (t1, v1, v2)
    finally:
        with django_db_blocker.unblock():
            ScadaReading.objects.filter(device__project=hostile_project, time__gte=start).delete()


def test_sql_in_layer_and_field_names_is_stored_as_data(
    hostile_project: Project, django_db_blocker: Any, tmp_path: Path, figures: Figures
) -> None:
    """A GeoPackage whose layer and field names are SQL, through the real command: stored as the layer's
    name and a property key, nothing else in the project touched."""
    layer = "x'; DROP TABLE queries_gisfeature; --"
    field = 'a"); DELETE FROM queries_junction; --'
    point = {"type": "Point", "coordinates": [-85.0, 38.0]}
    gpkg = write_layer(tmp_path, layer, [Feature({field: "v"}, point)], crs="EPSG:4326")
    with django_db_blocker.unblock():
        readings, devices, layers, junctions = _state(hostile_project)
    run = _run("import_gis", gpkg, "--layer-key", "sql-names", "--source-layer", layer)
    try:
        figures.record(
            "hostile_import.gis-sql-names", {"seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1)}
        )
        assert run.code == 0, run.out
        with django_db_blocker.unblock():
            stored = GisLayer.objects.get(project=hostile_project, layer_key="sql-names")
            assert (stored.name, GisFeature.objects.get(layer=stored).properties) == (layer, {field: "v"})
            stored.delete()
            assert _state(hostile_project) == (readings, devices, layers, junctions)
    finally:
        with django_db_blocker.unblock():
            GisLayer.objects.filter(project=hostile_project, layer_key="sql-names").delete()


def test_a_layer_of_many_small_features_costs_little(
    hostile_project: Project, django_db_blocker: Any, tmp_path: Path, figures: Figures
) -> None:
    """2 MB of GeoJSON holding 17,000 points: the import's time and memory stay within the bounds."""
    path = tmp_path / "many.geojson"
    path.write_text(json.dumps(_points(17_000)))
    assert path.stat().st_size <= 2 * MB
    run = _run("import_gis", path, "--layer-key", "many-points")
    try:
        figures.record(
            "hostile_import.gis-17k-points",
            {"bytes": path.stat().st_size, "seconds": round(run.seconds, 2), "peak_rss_mb": round(run.rss_mb, 1)},
        )
        assert run.code == 0, run.out
        assert run.rss_mb <= RSS_LIMIT_MB and run.seconds <= TIME_LIMIT_S, (run.rss_mb, run.seconds)
        with django_db_blocker.unblock():
            assert (
                GisFeature.objects.filter(layer__project=hostile_project, layer__layer_key="many-points").count()
                == 17_000
            )
    finally:
        with django_db_blocker.unblock():
            GisLayer.objects.filter(project=hostile_project, layer_key="many-points").delete()
