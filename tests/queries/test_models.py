"""Database-level rules of the queries models: ids unique per project and type, option rows, and the
readings rule that cleaning never invents a value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from contexts.models import Project
from queries.models import Junction, NetworkOptions, Pipe, ScadaDevice, ScadaReading

POINT = "SRID=4326;POINT(117.2 39.1)"


@pytest.fixture
def two_projects(db: None) -> tuple[Project, Project]:
    return Project.objects.create(slug="pa", name="A"), Project.objects.create(slug="pb", name="B")


def test_element_id_unique_per_project_and_type(two_projects: tuple[Project, Project]) -> None:
    a, b = two_projects
    Junction.objects.create(project=a, element_id="J1", elevation=1.0, geom=POINT)
    Junction.objects.create(project=b, element_id="J1", elevation=2.0, geom=POINT)  # other project: fine
    Pipe.objects.create(project=a, element_id="J1", start_node_id="J1", end_node_id="J2", length=1, diameter=0.1,
                        roughness=100, geom="SRID=4326;LINESTRING(117.2 39.1,117.3 39.1)")  # fmt: skip
    with pytest.raises(IntegrityError), transaction.atomic():
        Junction.objects.create(project=a, element_id="J1", elevation=3.0, geom=POINT)


def test_geography_column_follows_geometry(two_projects: tuple[Project, Project]) -> None:
    a, _ = two_projects
    Junction.objects.create(project=a, element_id="J9", elevation=1.0, geom=POINT)
    row = Junction.objects.get(project=a, element_id="J9")
    assert row.geog.coords == pytest.approx(row.geom.coords)


def test_pump_energy_options_need_a_pump_and_others_must_not_have_one(two_projects: tuple[Project, Project]) -> None:
    a, _ = two_projects
    NetworkOptions.objects.create(project=a, kind="pump_energy", pump_id="PU1", values={})
    NetworkOptions.objects.create(project=a, kind="hydraulic", values={})
    with pytest.raises(IntegrityError), transaction.atomic():
        NetworkOptions.objects.create(project=a, kind="pump_energy", values={})
    with pytest.raises(IntegrityError), transaction.atomic():
        NetworkOptions.objects.create(project=a, kind="time", pump_id="PU1", values={})


def test_database_refuses_a_cleaned_value_without_a_monitored_one(two_projects: tuple[Project, Project]) -> None:
    a, _ = two_projects
    device = ScadaDevice.objects.create(project=a, device_id="PT-1", name="p", quantity="pressure", unit="m",
                                        element_type="junction", element_id="J1", location=POINT)  # fmt: skip
    t = datetime(2026, 11, 1, tzinfo=UTC)
    ScadaReading.objects.create(device=device, time=t, monitored_value=None, cleaned_value=None, quality="gap")
    with pytest.raises(IntegrityError), transaction.atomic():
        ScadaReading.objects.create(device=device, time=t.replace(minute=5), monitored_value=None,
                                    cleaned_value=30.0, quality="good")  # fmt: skip
    with pytest.raises(IntegrityError), transaction.atomic():
        ScadaReading.objects.create(device=device, time=t, monitored_value=1.0, cleaned_value=1.0, quality="good")


def test_no_reading_outlives_its_device(two_projects: tuple[Project, Project]) -> None:
    """The readings' device key is not a database foreign key (the bulk import's speed): deleting a device,
    through Django or in plain SQL, takes its readings with it and leaves the other devices' alone."""
    a, _ = two_projects
    devices = [
        ScadaDevice.objects.create(
            project=a,
            device_id=f"PT-{i}",
            name="p",
            quantity="pressure",
            unit="m",
            element_type="junction",
            element_id="J1",
            location=POINT,
        )  # fmt: skip
        for i in range(3)
    ]
    t = datetime(2026, 11, 1, tzinfo=UTC)
    for device in devices:
        ScadaReading.objects.create(device=device, time=t, monitored_value=1.0, cleaned_value=1.0, quality="good")
    devices[0].delete()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM queries_scadadevice WHERE id = %s", [devices[1].pk])
    # By the devices' keys, not through a join: an orphan reading would have no device to join.
    left = ScadaReading.objects.filter(device_id__in=[d.pk for d in devices]).values_list("device_id", flat=True)
    assert list(left) == [devices[2].pk]
