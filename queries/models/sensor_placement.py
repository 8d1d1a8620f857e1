"""Sensor placement runs: where to put pressure sensors so that events are detected.

``selected_sensors`` is the ordered list ``[{"rank", "element_type", "element_id", "marginal_gain"}]``;
``scores`` holds the objective value, coverage and per-candidate scores the optimiser reported.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from queries.models.analysis import RunStatus


class SensorPlacementRun(models.Model):
    """One sensor placement optimisation with its parameters, objective and outcome."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    run_id = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    title = models.CharField(max_length=200, blank=True, default="")
    parameters = models.JSONField(default=dict)
    objective = models.CharField(max_length=64)
    objective_value = models.FloatField(null=True, blank=True)
    selected_sensors = models.JSONField(default=list)
    scores = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project_id", "-created_at", "run_id"]
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="sensorplacement_project_run_uniq")]
        indexes = [models.Index(fields=["project", "-created_at", "run_id"], name="sensorplacement_recent")]

    def __str__(self) -> str:
        return self.run_id
