"""import_scada on real files (CSV, CSV.gz, Parquet; long and wide): units converted, naive local times
across DST changes (nonexistent and ambiguous times rejected by line), the slot rule, gaps kept, the
demo's cleaning, idempotence, last import wins, rejects above --max-rejects refuse the file whole, a
failure mid-merge leaves the old readings, --dry-run and --json."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from contexts.models import Project
from queries.importer import scada_readings
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.scada_devices import ScadaImportError, import_scada_devices
from queries.importer.scada_readings import RejectedFile, import_scada
from queries.models import Job, ScadaReading
from tests.support.servers import ROOT, subprocess_database_url

PSI = 0.7030695796391595  # m of water head per psi
GPM = 6.30901964e-05  # m³/s per US gallon per minute
NY = "America/New_York"
DEVICES = (
    "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy\n"
    "PT-1,Pressure 10,pressure,psi,junction,10,,,300,0.2\n"
    "PT-2,Pressure 11,pressure,psi,junction,11,,,300,0.2\n"
    "FT-1,Flow 10,flow,gpm,pipe,10,,,300,1\n"
    "PS-1,Pump 9,pump_status,on/off,pump,9,,,300,\n"
)


@pytest.fixture
def net1(project: Project, tmp_path: Path) -> Project:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    path = tmp_path / "devices.csv"
    path.write_text(DEVICES)
    import_scada_devices(project=project, path=path)
    return project


def rows(project: Project, device: str) -> list[tuple[datetime, float | None, float | None, str]]:
    return list(
        ScadaReading.objects.filter(device__project=project, device__device_id=device)
        .order_by("time")
        .values_list("time", "monitored_value", "cleaned_value", "quality")
    )


def psi_wave(i: int) -> float:
    return round(60 + 0.3 * ((i * 7) % 5), 2)  # 60 … 61.2 psi, never six equal in a row


def wide_dst_csv(tmp_path: Path, name: str = "historian.csv") -> Path:
    """Naive New York times every 5 minutes over the spring-forward night of 2026-03-08 (02:00–02:55
    do not exist): a historian clock that wrote them anyway."""
    lines = ["time,PT-1,FT-1"]
    start = datetime(2026, 3, 8, 1, 0)
    for i in range(36):  # 01:00 … 03:55 local wall clock
        t = start + timedelta(minutes=5 * i)
        flow = "" if i in (30, 31) else f"{1000 + i}"
        lines.append(f"{t:%Y-%m-%d %H:%M:%S},{psi_wave(i)},{flow}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_wide_local_times_across_spring_forward(net1: Project, tmp_path: Path) -> None:
    path = wide_dst_csv(tmp_path)
    with pytest.raises(RejectedFile) as refused:
        import_scada(project=net1, path=path, timezone=NY)
    # Line 1 is the header; 02:00 local is the 13th time → line 14.
    assert refused.value.summary.rejects == 12
    assert refused.value.summary.reject_lines[0] == (
        "line 14: time: 2026-03-08 02:00:00 does not exist in America/New_York (clocks moved forward); "
        "give it an offset"
    )
    assert not ScadaReading.objects.filter(device__project=net1).exists()  # refused whole

    summary = import_scada(project=net1, path=path, timezone=NY, max_rejects=12)
    assert (summary.layout, summary.rejects, summary.samples) == ("wide", 12, 24 + 22)
    pt = rows(net1, "PT-1")
    # 01:00 EST = 06:00Z … 01:55 EST; then 03:00 EDT = 07:00Z: the span is 06:00Z–07:55Z, 24 slots.
    assert pt[0][0] == datetime(2026, 3, 8, 6, 0, tzinfo=UTC) and pt[-1][0] == datetime(2026, 3, 8, 7, 55, tzinfo=UTC)
    assert len(pt) == 24
    assert pt[0][1] == pytest.approx(psi_wave(0) * PSI, rel=1e-9)  # psi → m head
    assert pt[12][1] == pytest.approx(psi_wave(24) * PSI, rel=1e-9)  # 03:00 EDT is the 25th line
    ft = {t: (m, q) for t, m, _, q in rows(net1, "FT-1")}
    assert ft[datetime(2026, 3, 8, 6, 0, tzinfo=UTC)][0] == pytest.approx(1000 * GPM, rel=1e-9)
    # The two empty cells (03:30, 03:35 EDT) stay gaps, never filled.
    assert ft[datetime(2026, 3, 8, 7, 30, tzinfo=UTC)] == (None, "gap")
    assert ft[datetime(2026, 3, 8, 7, 35, tzinfo=UTC)] == (None, "gap")

    again = import_scada(project=net1, path=path, timezone=NY, max_rejects=12)
    assert (again.inserted, again.updated, again.unchanged) == (0, 0, again.slots)
    assert rows(net1, "PT-1") == pt


def test_fall_back_ambiguous_times_are_rejected_unless_offset(net1: Project, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text(
        "device_id,time,value\n"
        "PT-1,2026-11-01 00:55,50\n"
        "PT-1,2026-11-01 01:30,50.5\n"  # ambiguous in New York
        "PT-1,2026-11-01T01:30:00-05:00,51\n"  # the second 01:30, with its offset: fine
        "PT-1,yesterday,52\n"
        "PT-1,2026-11-01 03:00,abc\n"
        "XX-9,2026-11-01 03:00,1\n"
    )
    with pytest.raises(RejectedFile) as refused:
        import_scada(project=net1, path=path, timezone=NY)
    # Reported per batch by kind (device, time, value), each kind in line order.
    assert refused.value.summary.reject_lines == [
        "line 7: device_id: no device 'XX-9' in this project",
        "line 3: time: 2026-11-01 01:30 is ambiguous in America/New_York (clocks moved back); give it an offset",
        "line 5: time: yesterday is not an ISO 8601 time",
        "line 6: value: 'abc' is not a number",
    ]
    summary = import_scada(project=net1, path=path, timezone=NY, max_rejects=4)
    got = rows(net1, "PT-1")
    assert summary.samples == 2 and (got[0][0], got[-1][0], len(got)) == (
        datetime(2026, 11, 1, 4, 55, tzinfo=UTC),  # 00:55 EDT
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST, given with its offset
        2,  # the 18 slots between them are longer than GAP_SLOTS: no rows (read as a gap)
    )


def test_slot_rule_mean_for_analog_last_for_states_and_gaps(net1: Project, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text(
        "device_id,time,value,quality\n"
        "PT-1,2026-05-01T00:01:00Z,10,good\n"
        "PT-1,2026-05-01T00:03:00Z,20,good\n"  # same slot as 00:01 → mean 15 psi
        "PT-1,2026-05-01T00:12:00Z,30,bad\n"  # flagged bad → not received
        "PT-1,2026-05-01T00:20:00Z,12,good\n"
        "PS-1,2026-05-01T00:04:00Z,off,\n"
        "PS-1,2026-05-01T00:02:00Z,on,\n"  # earlier in the slot: the 00:04 sample is the last
        "PS-1,2026-05-01T00:06:00Z,ON,\n"
    )
    import_scada(project=net1, path=path)
    pt = rows(net1, "PT-1")
    assert [(t.minute, q) for t, _, _, q in pt] == [(0, "good"), (5, "gap"), (10, "gap"), (15, "gap"), (20, "good")]
    assert pt[0][1] == pytest.approx(15 * PSI, rel=1e-9)
    assert [m for _, m, _, _ in rows(net1, "PS-1")] == [0.0, 1.0]


def test_cleaning_keeps_monitored_and_cleaned_apart(net1: Project, tmp_path: Path) -> None:
    lines = ["device_id,time,value"]
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    for i in range(60):
        value = psi_wave(i) + (40 if i == 20 else 0)  # one spike of 28 m
        if 40 <= i < 48:
            value = 55.0  # stuck for 8 slots
        lines.append(f"PT-1,{(t0 + timedelta(minutes=5 * i)).isoformat()},{value}")
    path = tmp_path / "clean.csv"
    path.write_text("\n".join(lines) + "\n")
    import_scada(project=net1, path=path)
    got = rows(net1, "PT-1")
    assert got[20][1] == pytest.approx((psi_wave(20) + 40) * PSI) and got[20][2:] == (None, "spike")
    assert {q for _, _, _, q in got[40:48]} == {"stuck"} and all(c is None for _, _, c, _ in got[40:48])
    assert got[0][2] == got[0][1] and got[0][3] == "good"


def test_overlap_replaces_last_import_wins(net1: Project, tmp_path: Path) -> None:
    t0 = datetime(2026, 7, 1, tzinfo=UTC)
    first = tmp_path / "a.csv.gz"
    with gzip.open(first, "wt") as fh:
        fh.write("device_id,time,value\n")
        for i in range(24):
            fh.write(f"PT-2,{(t0 + timedelta(minutes=5 * i)).isoformat()},{psi_wave(i)}\n")
    import_scada(project=net1, path=first)
    second = tmp_path / "b.parquet"
    times = [t0 + timedelta(minutes=5 * i) for i in (10, 11, 14)]  # slots 12, 13 inside the span: now gaps
    pq.write_table(
        pa.table(
            {
                "device_id": ["PT-2"] * 3,
                "time": pa.array(times, type=pa.timestamp("us", tz="UTC")),
                "value": [70.0, 71.0, 72.0],
            }
        ),
        second,
    )
    summary = import_scada(project=net1, path=second)
    assert summary.layout == "long" and summary.slots == 5
    got = rows(net1, "PT-2")
    assert len(got) == 24
    assert [round(m / PSI, 6) if m is not None else None for _, m, _, _ in got[10:15]] == [70, 71, None, None, 72]
    assert got[9][1] == pytest.approx(psi_wave(9) * PSI) and got[15][1] == pytest.approx(psi_wave(15) * PSI)


def test_a_failure_mid_merge_leaves_the_old_readings(
    net1: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = wide_dst_csv(tmp_path)
    import_scada(project=net1, path=path, timezone=NY, max_rejects=12)
    before = {d: rows(net1, d) for d in ("PT-1", "FT-1")}
    shifted = tmp_path / "shifted.csv"
    shifted.write_text(path.read_text().replace(",60", ",65"))
    calls = {"n": 0}
    real = scada_readings._clean_block

    def dies_on_the_second_device(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # as if the process were interrupted half-way
        real(*args)

    monkeypatch.setattr(scada_readings, "_clean_block", dies_on_the_second_device)
    with pytest.raises(KeyboardInterrupt):
        import_scada(project=net1, path=shifted, timezone=NY, max_rejects=12)
    assert {d: rows(net1, d) for d in ("PT-1", "FT-1")} == before


def test_the_command_dry_run_json_and_refusals(net1: Project, tmp_path: Path) -> None:
    path = wide_dst_csv(tmp_path)
    out = StringIO()
    args = [str(path), "--project", net1.slug, "--timezone", NY, "--max-rejects", "12", "--json"]
    call_command("import_scada", *args, "--dry-run", stdout=out)
    dry = json.loads(out.getvalue())
    assert dry["dry_run"] is True and dry["inserted"] == 48 and dry["rejects"] == 12
    assert not ScadaReading.objects.filter(device__project=net1).exists()
    out = StringIO()
    call_command("import_scada", *args, stdout=out)
    assert json.loads(out.getvalue())["inserted"] == 48
    job = Job.objects.filter(project=net1, kind="scada_import", status="succeeded").get(detail__dry_run=False)
    assert (job.rows, job.rejects, job.subject) == (48, 12, "historian.csv") and len(job.reject_lines) == 12
    with pytest.raises(CommandError, match="more than --max-rejects 0"):
        call_command("import_scada", str(path), "--project", net1.slug, "--timezone", NY, stdout=StringIO())
    failed = Job.objects.get(project=net1, kind="scada_import", status="failed")
    assert failed.message.startswith("historian.csv refused, nothing written: 12 rejected sample(s)")
    bad = tmp_path / "bad.csv"
    bad.write_text("when,what\n1,2\n")
    with pytest.raises(CommandError, match="line 1: not a SCADA layout"):
        call_command("import_scada", str(bad), "--project", net1.slug)
    bad.write_text("time,PT-1,NOPE\n")
    with pytest.raises(CommandError, match="line 1: no device 'NOPE' in this project"):
        call_command("import_scada", str(bad), "--project", net1.slug)
    with pytest.raises(ScadaImportError, match="not an IANA time zone"):
        import_scada(project=net1, path=path, timezone="Mars/Olympus")


def test_the_progress_bar_shows_rows_rate_and_rejects(monkeypatch: pytest.MonkeyPatch) -> None:
    from queries.management.commands import import_scada as command

    clock = iter([0.0, 2.0, 2.1, 4.0])
    monkeypatch.setattr(command.time, "monotonic", lambda: next(clock))
    out = StringIO()
    bar = command.ProgressBar(out, enabled=True)
    bar(1_000_000, 3)  # 2 s after the start: drawn
    bar(1_100_000, 3)  # 0.1 s later: not redrawn
    bar(2_000_000, 4)
    bar.done()
    assert out.getvalue() == (
        "\r     1,000,000 samples     500,000/s       3 rejected "
        "\r     2,000,000 samples     500,000/s       4 rejected \n"
    )


# --- killed mid-way: a real process, SIGKILLed while its transaction is open --------------------------


@pytest.fixture
def committed_net1(django_db_setup: None, django_db_blocker: Any, tmp_path: Path) -> Iterator[Project]:
    with django_db_blocker.unblock():
        Project.objects.filter(slug="scada-kill").delete()
        project = Project.objects.create(slug="scada-kill", name="Killed import")
        import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
        (tmp_path / "devices.csv").write_text(DEVICES)
        import_scada_devices(project=project, path=tmp_path / "devices.csv")
    yield project
    with django_db_blocker.unblock():
        Project.objects.filter(pk=project.pk).delete()


def test_an_import_killed_mid_way_leaves_the_old_readings(
    committed_net1: Project, django_db_blocker: Any, tmp_path: Path
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    old = tmp_path / "old.csv"
    old.write_text("time,PT-1,PT-2\n" + "".join(f"{(start + timedelta(minutes=5 * i)).isoformat()},50,51\n"
                                                   for i in range(288)))  # fmt: skip
    with django_db_blocker.unblock():
        import_scada(project=committed_net1, path=old)
        before = rows(committed_net1, "PT-1")
    big = tmp_path / "big.csv.gz"
    with gzip.open(big, "wt", compresslevel=1) as fh:  # 120 days of 3 devices: long enough to be caught
        fh.write("time,PT-1,PT-2,FT-1\n")
        for i in range(120 * 288):
            fh.write(
                f"{(start + timedelta(minutes=5 * i)).isoformat()},{psi_wave(i)},{psi_wave(i + 1)},{900 + i % 5}\n"
            )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    child = subprocess.Popen(
        [sys.executable, "manage.py", "import_scada", str(big), "--project", committed_net1.slug],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    db = settings.DATABASES["default"]["NAME"]
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        deadline = time.monotonic() + 120
        seen = ""
        cleaning = ("DECLARE tjw_blocks", "FETCH", "COPY (SELECT time", "COPY tjw_final", "COPY tjw_gone")
        while not seen.startswith(cleaning):
            assert child.poll() is None and time.monotonic() < deadline, "the import ended before it was caught"
            cursor.execute(
                "SELECT query FROM pg_stat_activity WHERE datname = %s AND query LIKE %s "
                "AND state IN ('active', 'idle in transaction') AND pid <> pg_backend_pid()",
                [db, "%tjw_%"],
            )
            found = cursor.fetchone()
            seen = found[0].strip() if found else ""
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)  # mid-way: staged, part cleaned, nothing merged yet
        child.wait(timeout=30)
        while True:  # the server notices the lost client and rolls the transaction back
            # Only a transaction still open counts: an idle session of another test whose last statement
            # was an import's is not this import (in the full suite one kept this loop to its deadline).
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query LIKE %s "
                "AND state IN ('active', 'idle in transaction') AND pid <> pg_backend_pid()",
                [db, "%tjw_%"],
            )
            if cursor.fetchone()[0] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert rows(committed_net1, "PT-1") == before
        assert not ScadaReading.objects.filter(device__project=committed_net1, device__device_id="FT-1").exists()
