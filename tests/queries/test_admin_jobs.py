"""The admin's Jobs show every import (issue 40 item 6): network and GIS imports are Job rows like the
SCADA ones, a GIS file without a CRS is refused (and recorded as failed), and a dry run shows as one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from contexts.models import Project
from queries.importer.epanet import wntr_network_path
from queries.models import GisLayer, Job, ScadaReading
from tests.support.gis_files import Feature, write_layer

NET1 = wntr_network_path("Net1.inp")


@pytest.fixture
def superuser_client(db: None) -> Client:
    user = get_user_model().objects.create_superuser("jobs-admin", "jobs@example.org", "x" * 20)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def net1(project: Project) -> Project:
    call_command("import_network", str(NET1), "--project", project.slug, "--center", "117.2,39.1", "--scale", "30",
                 "--no-baseline")  # fmt: skip
    return project


def _jobs_page(client: Client, project: Project) -> str:
    response = client.get(reverse("admin:queries_job_changelist") + f"?project__id__exact={project.pk}")
    assert response.status_code == 200
    return response.content.decode()


def test_a_scada_dry_run_shows_as_a_dry_run(net1: Project, tmp_path: Path, superuser_client: Client) -> None:
    (tmp_path / "devices.csv").write_text(
        "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
        "PT-11,Pressure 11,pressure,psi,junction,11,,,900\n"
    )
    call_command("import_scada_devices", str(tmp_path / "devices.csv"), "--project", net1.slug)
    day = datetime(2026, 4, 1, tzinfo=UTC)
    rows = "".join(f"{(day + timedelta(minutes=15 * i)).isoformat()},{60 + i % 4}\n" for i in range(8))
    (tmp_path / "dry.csv").write_text("time,PT-11\n" + rows)
    call_command("import_scada", str(tmp_path / "dry.csv"), "--project", net1.slug, "--dry-run")
    (tmp_path / "real.csv").write_text("time,PT-11\n" + rows)
    call_command("import_scada", str(tmp_path / "real.csv"), "--project", net1.slug)

    dry = Job.objects.get(project=net1, subject="dry.csv")
    real = Job.objects.get(project=net1, subject="real.csv")
    assert (dry.kind, dry.status, dry.dry_run, real.dry_run) == ("scada_import", "succeeded", True, False)
    assert ScadaReading.objects.filter(device__project=net1).count() == 8  # the real import only
    body = _jobs_page(superuser_client, net1)
    assert body.count("Succeeded (dry run)") == 1
    network = Job.objects.get(project=net1, subject="Net1.inp")
    assert (network.kind, network.status) == ("network_import", "succeeded")
    assert "Network import" in body


def test_gis_imports_are_jobs_and_a_shapefile_without_prj_is_refused(
    net1: Project, tmp_path: Path, superuser_client: Client
) -> None:
    line = {"type": "LineString", "coordinates": [[117.20, 39.10], [117.21, 39.11]]}
    features = [Feature({"ASSET_ID": "10", "NOTE": "main"}, line)]
    shp = write_layer(tmp_path, "mains", features, crs=None, driver="ESRI Shapefile", suffix=".shp")
    assert not shp.with_suffix(".prj").exists()  # GDAL wrote a Shapefile that declares no CRS
    with pytest.raises(CommandError) as info:
        call_command("import_gis", str(shp), "--project", net1.slug, "--layer-key", "mains")
    assert str(info.value) == "mains.shp (layer mains) has no CRS: give it with --crs EPSG:NNNN"
    assert not GisLayer.objects.filter(project=net1).exists()
    call_command("import_gis", str(shp), "--project", net1.slug, "--layer-key", "mains", "--crs", "EPSG:4326")

    failed, done = Job.objects.filter(project=net1, subject="mains.shp").order_by("pk")
    assert (failed.kind, failed.status, failed.message) == ("gis_import", "failed", str(info.value))
    assert (done.kind, done.status, done.rows, done.detail["source_crs"]) == ("gis_import", "succeeded", 1, "EPSG:4326")
    body = _jobs_page(superuser_client, net1)
    assert "GIS layer import" in body and "has no CRS: give it with --crs EPSG:NNNN" in body
