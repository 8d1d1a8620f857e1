"""Peripheral data around the network: points (hydrants, sampling points, meters), work orders, field
observations and lab test data. Every row carries ``synthetic`` so generated demo data can never be
mistaken for real measurements; tools pass the flag through.

Each time-stamped family has ``recorded_at`` (when the thing happened), indexed with the point so
"this point, this window" is one range scan.
"""

from __future__ import annotations

from django.contrib.gis.db import models as gis
from django.db import models


class PeripheralPoint(models.Model):
    """A point of interest: ``kind`` hydrant, sampling_point, customer_meter, …"""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    point_id = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=32)
    geom = gis.PointField(srid=4326)
    element_type = models.CharField(max_length=16, blank=True, default="")
    element_id = models.CharField(max_length=64, blank=True, default="")
    properties = models.JSONField(default=dict)
    synthetic = models.BooleanField()

    class Meta:
        ordering = ["project_id", "point_id"]
        constraints = [models.UniqueConstraint(fields=["project", "point_id"], name="peripheralpoint_project_uniq")]

    def __str__(self) -> str:
        return self.point_id


class WorkOrder(models.Model):
    """A maintenance work order at a point, opened at ``recorded_at``."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    point = models.ForeignKey(PeripheralPoint, on_delete=models.CASCADE, related_name="+", db_index=False)
    order_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    status = models.CharField(max_length=16)
    priority = models.CharField(max_length=16, default="normal")
    recorded_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    description = models.CharField(max_length=500, blank=True, default="")
    synthetic = models.BooleanField()

    class Meta:
        ordering = ["project_id", "point_id", "recorded_at", "order_id"]
        constraints = [models.UniqueConstraint(fields=["project", "order_id"], name="workorder_project_uniq")]
        indexes = [models.Index(fields=["project", "point", "recorded_at"], name="workorder_point_time")]

    def __str__(self) -> str:
        return self.order_id


class Observation(models.Model):
    """A field observation at a point (a pressure gauge reading, a visual check, a leak noise level)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    point = models.ForeignKey(PeripheralPoint, on_delete=models.CASCADE, related_name="+", db_index=False)
    recorded_at = models.DateTimeField()
    quantity = models.CharField(max_length=32)
    value = models.FloatField(null=True, blank=True)
    unit = models.CharField(max_length=16, blank=True, default="")
    note = models.CharField(max_length=500, blank=True, default="")
    observer = models.CharField(max_length=64, blank=True, default="")
    synthetic = models.BooleanField()

    class Meta:
        ordering = ["project_id", "point_id", "recorded_at", "id"]
        indexes = [models.Index(fields=["project", "point", "recorded_at"], name="observation_point_time")]

    def __str__(self) -> str:
        return f"{self.quantity}@{self.recorded_at:%Y-%m-%dT%H:%M}"


class TestData(models.Model):
    """A lab or field test result of a sample taken at a point (chlorine, turbidity, …)."""

    __test__ = False  # not a pytest test class despite the name

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    point = models.ForeignKey(PeripheralPoint, on_delete=models.CASCADE, related_name="+", db_index=False)
    sample_id = models.CharField(max_length=64)
    recorded_at = models.DateTimeField()
    parameter = models.CharField(max_length=32)
    value = models.FloatField()
    unit = models.CharField(max_length=16)
    method = models.CharField(max_length=64, blank=True, default="")
    lab = models.CharField(max_length=64, blank=True, default="")
    synthetic = models.BooleanField()

    class Meta:
        ordering = ["project_id", "point_id", "recorded_at", "sample_id", "parameter"]
        verbose_name_plural = "test data"
        constraints = [
            models.UniqueConstraint(fields=["project", "sample_id", "parameter"], name="testdata_sample_param_uniq")
        ]
        indexes = [models.Index(fields=["project", "point", "recorded_at"], name="testdata_point_time")]

    def __str__(self) -> str:
        return f"{self.sample_id} {self.parameter}"
