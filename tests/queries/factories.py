"""Factories of the query-service tests."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.contrib.gis.geos import Point

from contexts.models import Project
from contexts.scope import QueryScope
from queries.models import ScadaDevice, ScadaReading

DAY0 = datetime(2026, 11, 1, tzinfo=UTC)


def service_scope(project: Project, permissions: Iterable[str], subject: str = "alice") -> QueryScope:
    """The ``QueryScope`` a query service receives for a caller on ``project`` holding ``permissions``
    (service-level tests call services directly; the e2e tests get theirs from real context handles)."""
    return QueryScope(
        principal_id=1,
        issuer="i",
        subject=subject,
        client_id="c",
        project_id=project.pk,
        project_slug=project.slug,
        permissions=frozenset(permissions),
        purpose="ordinary_chat",
        timezone=project.timezone or "UTC",
    )


def dense_scada_project(slug: str, devices: int, points: int, *, gap_every: int | None = None) -> QueryScope:
    """A project of ``devices`` one-minute pressure devices (``D-00``, ``D-01``, …) with ``points`` readings
    each from ``DAY0`` (good values; with ``gap_every``, every slot ``m % gap_every == 5`` has none: a
    ``gap``), and the scope of a ``scada.view`` caller on it."""
    project = Project.objects.create(slug=slug, name=f"Dense SCADA {slug}")
    created = ScadaDevice.objects.bulk_create(
        ScadaDevice(
            project=project,
            device_id=f"D-{i:02d}",
            name=f"dense {i}",
            quantity="pressure",
            unit="m",
            element_type="junction",
            element_id=f"J-{i}",
            location=Point(117.0 + i / 100, 39.0, srid=4326),
            sample_interval_s=60,
        )
        for i in range(devices)
    )

    def missing(m: int) -> bool:
        return gap_every is not None and m % gap_every == 5

    ScadaReading.objects.bulk_create(
        ScadaReading(
            device=device,
            time=DAY0 + timedelta(minutes=m),
            monitored_value=None if missing(m) else 30.0 + m / 1000,
            cleaned_value=None if missing(m) else 30.0 + m / 1000,
            quality="gap" if missing(m) else "good",
        )
        for device in created
        for m in range(points)
    )
    return service_scope(project, {"scada.view"}, subject="s")
