"""The workbench runtime snapshot: the state of a project's operational workbench, read only here."""

from __future__ import annotations

from django.db import models


class WorkbenchRuntime(models.Model):
    """One snapshot per project: the simulation clock, the active scenario, and for every data source
    its last sync time and freshness (``data_sources = {name: {"last_sync", "freshness_s", "status"}}``).
    """

    project = models.OneToOneField("contexts.Project", on_delete=models.CASCADE, related_name="+")
    simulation_clock = models.DateTimeField()
    active_scenario = models.CharField(max_length=64, blank=True, default="")
    mode = models.CharField(max_length=32, default="monitoring")
    data_sources = models.JSONField(default=dict)
    captured_at = models.DateTimeField()

    class Meta:
        ordering = ["project_id"]

    def __str__(self) -> str:
        return f"runtime {self.project_id}"
