"""generate_scada_history: N devices × D days of readings written by PostgreSQL, a day per statement;
a second run skips the days already there."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.models import ScadaDevice, ScadaReading


def test_devices_and_days_of_readings(project: Project) -> None:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    args = ["generate_scada_history", "--project", project.slug, "--devices", "3", "--days", "2"]
    out = StringIO()
    call_command(*args, "--start", "2024-03-01T00:00:00Z", stdout=out)
    assert "3 devices, 2 day(s) written, 1,728 rows" in out.getvalue()
    readings = ScadaReading.objects.filter(device__project=project)
    assert readings.count() == 3 * 2 * 288
    assert not readings.exclude(quality="good").exists()
    assert ScadaDevice.objects.filter(project=project, device_id__startswith="GEN-").count() == 3
    out = StringIO()
    call_command(*args, "--start", "2024-03-02T00:00:00Z", stdout=out)  # day 1 is there: only 03-03 is new
    assert "1 day(s) written, 864 rows" in out.getvalue() and readings.count() == 3 * 3 * 288
