"""``manage.py import_scada``'s summary line says how it read the times (issue 40 item 6): "times with
offsets" for a file whose times carry them, the zone for naive times, both counts for a mix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path


@pytest.fixture
def devices(project: Project, tmp_path: Path) -> Project:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    (tmp_path / "devices.csv").write_text(
        "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
        "PT-11,Pressure 11,pressure,psi,junction,11,,,900\n"
    )
    call_command("import_scada_devices", str(tmp_path / "devices.csv"), "--project", project.slug)
    return project


def _summary(project: Project, path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    call_command("import_scada", str(path), "--project", project.slug, *extra)
    return capsys.readouterr().out


def test_the_summary_says_how_times_were_read(
    devices: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    day = datetime(2026, 4, 1, tzinfo=UTC)
    aware = [(day + timedelta(minutes=15 * i)).isoformat() for i in range(4)]
    (tmp_path / "aware.csv").write_text("time,PT-11\n" + "".join(f"{t},60\n" for t in aware))
    out = _summary(devices, tmp_path / "aware.csv", capsys, "--timezone", "America/New_York")
    assert out.startswith("aware.csv (wide, times with offsets): 4 samples, 0 rejected;")
    naive = [(day + timedelta(minutes=15 * i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(4, 7)]
    (tmp_path / "naive.csv").write_text("time,PT-11\n" + "".join(f"{t},61\n" for t in naive))
    out = _summary(devices, tmp_path / "naive.csv", capsys, "--timezone", "America/New_York")
    assert out.startswith("naive.csv (wide, naive times in America/New_York): 3 samples")
    (tmp_path / "mixed.csv").write_text("time,PT-11\n" + f"{aware[0]},62\n" + f"{naive[0]},62\n")
    out = _summary(devices, tmp_path / "mixed.csv", capsys, "--timezone", "America/New_York", "--dry-run")
    assert out.startswith("mixed.csv (wide, 1 times with offsets, 1 naive in America/New_York): 2 samples")
