"""Synthetic SCADA history at utility scale, for measurements (issue 21's partitioning decision).

``generate_scada_history``: ``devices`` pressure devices (``GEN-0000`` …, on the project's junctions,
every ``step_s`` seconds) and ``days`` days of their readings from ``start``, written by PostgreSQL
itself (``generate_series``, no Python per row) one day per statement, devices in order within a day —
the physical order daily historian imports give the table. Values are a daily wave plus noise, all
``good`` (cleaned = monitored). Each day commits on its own, so a long run can be stopped and resumed
with ``resume`` (days already present for the first device are skipped).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction

from contexts.models import Project
from queries.importer.copy import summarize_reading_brin
from queries.importer.scada_devices import ScadaImportError
from queries.models import Junction, ScadaDevice, ScadaReading


@dataclass
class HistorySummary:
    devices: int = 0
    days: int = 0
    rows: int = 0
    seconds: float = 0.0


def generate_scada_history(
    *,
    project: Project,
    devices: int,
    days: int,
    start: datetime,
    step_s: int = 300,
    progress: Callable[[int, int, float], None] | None = None,
) -> HistorySummary:
    """Create the generated devices (kept when present) and fill ``days`` days of readings from
    ``start`` (a day already holding readings of the first device is skipped)."""
    t0 = _time.monotonic()
    junctions = list(Junction.objects.filter(project=project).order_by("element_id").values_list("element_id", "geom"))
    if not junctions:
        raise ScadaImportError(f"project {project.slug} has no junctions (import a network first)")
    ids = [f"GEN-{i:04d}" for i in range(devices)]
    existing = set(ScadaDevice.objects.filter(project=project, device_id__in=ids).values_list("device_id", flat=True))
    ScadaDevice.objects.bulk_create(
        [
            ScadaDevice(
                project=project,
                device_id=d,
                name=f"Generated {d}",
                quantity="pressure",
                unit="m",
                native_unit="m",
                element_type="junction",
                element_id=junctions[i % len(junctions)][0],
                location=junctions[i % len(junctions)][1],
                sample_interval_s=step_s,
                accuracy=0.1,
            )  # fmt: skip
            for i, d in enumerate(ids)
            if d not in existing
        ],
        batch_size=1000,
    )
    pks = list(
        ScadaDevice.objects.filter(project=project, device_id__in=ids)
        .order_by("device_id")
        .values_list("pk", flat=True)
    )
    reading = ScadaReading._meta.db_table
    summary = HistorySummary(devices=len(pks))
    for day in range(days):
        lo = start + timedelta(days=day)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {reading} WHERE device_id = %s AND time >= %s AND time < %s LIMIT 1",  # noqa: S608
                [pks[0], lo, lo + timedelta(days=1)],
            )
            if cursor.fetchone():
                continue
            cursor.execute(
                f"""
                INSERT INTO {reading} (device_id, time, monitored_value, cleaned_value, quality)
                SELECT d.id, t.t, v.v, v.v, 'good'
                FROM unnest(%s::bigint[]) WITH ORDINALITY AS d(id, k)
                CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz, make_interval(secs => %s)) AS t(t)
                CROSS JOIN LATERAL (
                    SELECT round((40 + (d.k %% 7) + 5 * sin(extract(epoch FROM t.t) / 86400 * 2 * pi())
                                  + random() * 0.5)::numeric, 3)::double precision AS v
                ) v
                ORDER BY d.id, t.t
                """,  # noqa: S608 - our table name
                [pks, lo, lo + timedelta(days=1) - timedelta(seconds=step_s), step_s],
            )
            summary.rows += cursor.rowcount
        summary.days += 1
        if progress is not None:
            progress(day + 1, summary.rows, _time.monotonic() - t0)
    summarize_reading_brin()  # a bulk loader summarizes its BRIN ranges itself (queries/models/scada.py)
    summary.seconds = round(_time.monotonic() - t0, 1)
    return summary
