"""``manage.py import_network`` says what it did (issue 40 item 6): coordinates that are not lon/lat
without ``--crs`` or ``--center`` are refused with a sentence, not placed at a default centre; lon/lat
coordinates are read as EPSG:4326; every run is a Job row."""

from __future__ import annotations

from pathlib import Path

import pytest
import wntr
from django.core.management import call_command
from django.core.management.base import CommandError

from contexts.models import Project
from queries.importer.epanet import wntr_network_path
from queries.models import Job, Junction

NET1 = wntr_network_path("Net1.inp")


def _lon_lat_copy(tmp_path: Path) -> Path:
    """Net1 redrawn in lon/lat degrees about Bardstown, KY (one drawn unit = 1e-4 degree)."""
    wn = wntr.network.WaterNetworkModel(str(NET1))
    for _, node in wn.nodes():
        x, y = node.coordinates
        node.coordinates = (-85.5 + x * 1e-4, 38.0 + y * 1e-4)
    for _, link in wn.links():
        link.vertices = [(-85.5 + x * 1e-4, 38.0 + y * 1e-4) for x, y in link.vertices]
    out = tmp_path / "net1-lonlat.inp"
    wntr.network.write_inpfile(wn, str(out))
    return out


def test_a_drawing_without_crs_or_center_is_refused_and_recorded(project: Project) -> None:
    with pytest.raises(CommandError) as info:
        call_command("import_network", str(NET1), "--project", project.slug, "--no-baseline")
    assert str(info.value) == (
        "Net1.inp has coordinates x 10..70, y 10..90, which are not longitude/latitude degrees: give their "
        "CRS with --crs EPSG:NNNN, or place a schematic drawing with --center LON,LAT (and --scale metres "
        "per drawn unit)"
    )
    assert not Junction.objects.filter(project=project).exists()
    job = Job.objects.get(project=project, subject="Net1.inp")
    assert (job.kind, job.status, job.message) == ("network_import", "failed", str(info.value))
    with pytest.raises(CommandError, match="Net1.inp has coordinates x 10..70"):  # --scale alone places nothing
        call_command("import_network", str(NET1), "--project", project.slug, "--scale", "30", "--no-baseline")


def test_lon_lat_coordinates_are_read_as_wgs84(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("import_network", str(_lon_lat_copy(tmp_path)), "--project", project.slug, "--no-baseline")
    assert "(coordinates read as EPSG:4326 lon/lat)" in capsys.readouterr().out
    junction = Junction.objects.get(project=project, element_id="10")
    assert junction.geom.coords == pytest.approx((-85.5 + 20 * 1e-4, 38.0 + 70 * 1e-4), abs=1e-9)


def test_center_places_the_drawing_and_the_job_says_so(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("import_network", str(NET1), "--project", project.slug, "--center", "-85.5,38.0", "--scale", "30",
                 "--no-baseline")  # fmt: skip
    out = capsys.readouterr().out
    assert "(schematic drawing placed about -85.5,38 at 30 m per drawn unit)" in out
    job = Job.objects.get(project=project, subject="Net1.inp")
    assert (job.kind, job.status, job.dry_run) == ("network_import", "succeeded", False)
    assert (
        job.rows == sum(v for k, v in job.detail.items() if k not in ("placement", "model_version")) > 9 + 12
    )  # Net1's junctions, pipes…
    assert job.detail["placement"] == "schematic drawing placed about -85.5,38 at 30 m per drawn unit"
    assert job.finished_at is not None


# --- model versions (issue 42 item 1) -----------------------------------------------------------------


def test_every_import_is_a_model_version_and_a_refused_one_adds_none(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each import_network adds the project's next model version — its .inp text, SHA-256 of the file,
    file name, who and when — and keeps the earlier ones; the current version is the newest, and the
    baseline simulates from it. A refused import adds no version."""
    import getpass
    import hashlib

    from queries.importer.baseline_window import _network
    from queries.models import NetworkSource, current_model_version

    net3 = wntr_network_path("Net3.inp")
    args = ["--project", project.slug, "--center", "-85.5,38.0", "--scale", "30", "--no-baseline"]
    call_command("import_network", str(NET1), *args)
    call_command("import_network", str(net3), *args)
    out = capsys.readouterr().out.splitlines()
    sha1, sha3 = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (NET1, net3))
    assert out[0].endswith(f"; model version 1 (sha256 {sha1[:12]}…)") and out[1].endswith(
        f"version 2 (sha256 {sha3[:12]}…)"
    )
    versions = list(NetworkSource.objects.filter(project=project).order_by("version"))
    assert [(v.version, v.file_name, v.sha256) for v in versions] == [(1, "Net1.inp", sha1), (2, "Net3.inp", sha3)]
    assert versions[0].inp_text.encode() == NET1.read_bytes() and versions[0].imported_at <= versions[1].imported_at
    assert {v.imported_by for v in versions} == {f"manage.py ({getpass.getuser()})"}
    current = current_model_version(project.pk)
    assert current is not None and current.version == 2
    assert sorted(_network(project).junction_name_list) == sorted(
        wntr.network.WaterNetworkModel(str(net3)).junction_name_list
    )
    assert Job.objects.filter(project=project, kind="network_import").order_by("pk").last().detail["model_version"] == 2  # type: ignore[union-attr]

    broken = tmp_path / "broken.inp"
    broken.write_text("[JUNCTIONS]\n J1 abc 1\n[END]\n")
    with pytest.raises(CommandError):
        call_command("import_network", str(broken), *args)
    assert NetworkSource.objects.filter(project=project).count() == 2
    assert current_model_version(project.pk).version == 2  # type: ignore[union-attr]
