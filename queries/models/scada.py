"""SCADA devices and their readings.

Readings keep what the device sent (``monitored_value``) apart from what cleaning made of it
(``cleaned_value``). The table holds one row per device per reporting slot once cleaning has run:

* ``quality=good``  — monitored present and plausible; ``cleaned_value == monitored_value``.
* ``quality=spike`` — monitored present but rejected by the despiking filter; ``cleaned_value`` NULL.
* ``quality=stuck`` — monitored present but part of a flat-line run; ``cleaned_value`` NULL.
* ``quality=gap``   — nothing was received for the slot (dropout): ``monitored_value`` NULL, and
  ``cleaned_value`` NULL too — cleaning marks gaps, it never invents a value where data is missing.

Index choice (the table must stay fast at tens of millions of rows): every read is "these devices,
this time window", served by the unique btree on ``(device_id, time)`` (an index range scan per
device, rows come out in time order). A BRIN index on ``time`` (a few pages for millions of rows, since
readings arrive in time order) serves whole-project time-window scans and retention deletes without a
second large btree (the BRIN index summarizes new ranges automatically; bulk loaders summarize
explicitly). Measured on 16.1 M rows (4,000 devices, 14 days): 3 devices × 24 h via the btree 1.5 ms;
all devices × 1 h via BRIN 12 ms; BRIN 24 kB vs btree 556 MB. At 100.8 M rows monthly range
partitioning on ``time`` gave the reads and a day's import nothing measurable (``queries/models/README.md``,
"partitioning"), so the table is not partitioned; it is the step for retention (drop a month), with the
same two indexes per partition.
"""

from __future__ import annotations

from django.contrib.gis.db import models as gis
from django.contrib.postgres.indexes import BrinIndex
from django.db import models


class Quantity(models.TextChoices):
    """The quantities a device may measure; each has one storage unit (``queries.scada_units``)."""

    PRESSURE = "pressure"
    FLOW = "flow"
    LEVEL = "level"
    PUMP_STATUS = "pump_status"
    PUMP_SPEED = "pump_speed"
    VALVE_POSITION = "valve_position"
    CHLORINE = "chlorine"
    TEMPERATURE = "temperature"


class ReadingQuality(models.TextChoices):
    GOOD = "good"
    SPIKE = "spike"
    STUCK = "stuck"
    GAP = "gap"


class ScadaDevice(models.Model):
    """A measuring device on a real network element: pressure at a junction, flow in a pipe, level in
    a tank, a pump's status or speed, a valve's position, chlorine, temperature. ``unit`` is the storage
    unit of its quantity (what its readings are stored and answered in, ``queries.scada_units``);
    ``native_unit`` is what the device's historian reports (converted on import). ``location`` is where
    it is installed (EPSG:4326). The database refuses a quantity it does not know (a CHECK)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    device_id = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    quantity = models.CharField(max_length=16, choices=Quantity.choices)
    unit = models.CharField(max_length=16)
    native_unit = models.CharField(max_length=16, blank=True, default="")
    element_type = models.CharField(max_length=16)
    element_id = models.CharField(max_length=64)
    location = gis.PointField(srid=4326)
    sample_interval_s = models.PositiveIntegerField(default=300)
    accuracy = models.FloatField(
        null=True, blank=True, help_text="sensor standard uncertainty, in the storage unit (null: none given)"
    )

    class Meta:
        ordering = ["project_id", "device_id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "device_id"], name="scadadevice_project_device_uniq"),
            models.CheckConstraint(condition=models.Q(quantity__in=Quantity.values), name="scadadevice_quantity_known"),
        ]

    def __str__(self) -> str:
        return self.device_id


class ScadaReading(models.Model):
    """One reporting slot of one device (see the module docstring for the quality rules)."""

    # Not a foreign key in the database (``db_constraint=False``): its per-row check cost the bulk import
    # as much as writing the rows (1.7 M rows: 7.2 s insert + 6.5 s of deferred checks at commit, against
    # 4.6 s without). Integrity is kept another way: the importer writes only its project's devices and
    # holds them FOR KEY SHARE until it commits, Django's delete cascades as before, and a statement-level
    # trigger on the devices table deletes the readings of any device deleted in SQL (migration 0010).
    device = models.ForeignKey(
        ScadaDevice, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    time = models.DateTimeField()
    monitored_value = models.FloatField(null=True, blank=True)
    cleaned_value = models.FloatField(null=True, blank=True)
    quality = models.CharField(max_length=8, choices=ReadingQuality.choices)

    class Meta:
        ordering = ["device_id", "time"]
        constraints = [
            models.UniqueConstraint(fields=["device", "time"], name="scadareading_device_time_uniq"),
            # Cleaning never invents a value where nothing was measured.
            models.CheckConstraint(
                condition=models.Q(monitored_value__isnull=False) | models.Q(cleaned_value__isnull=True),
                name="scadareading_no_cleaned_without_monitored",
            ),
        ]
        # autosummarize: autovacuum summarizes each page range as it fills; without it, ranges appended
        # after the last VACUUM stay unsummarized and every BRIN scan reads them all. Bulk loaders also
        # call brin_summarize_new_values() right after loading (see queries.demo.scada).
        indexes = [BrinIndex(fields=["time"], name="scadareading_time_brin", pages_per_range=32, autosummarize=True)]

    def __str__(self) -> str:
        return f"{self.device_id}@{self.time:%Y-%m-%dT%H:%M}"
