"""Model baseline results: the hydraulic simulation of the imported network, per element and time.

These are *model* values (labelled as such by the tools), never measurements. One row per element and
timestamp; ``element_type`` is stored because tools always name it and node ids of different types
share one namespace in EPANET. Two btrees: ``(project, type, element, time)`` for one element's series,
``(project, type, time)`` for one field of every element at one time — covering (``INCLUDE`` the id and
the value columns): the rows of one instant are spread over every heap page (rows are written element by
element), so "every junction's pressure at 09:00" is an index-only scan instead of a read of the whole
table (``rank_model_baseline`` over 332 k junctions of the scale network: 2.2 s → 0.23 s).
"""

from __future__ import annotations

from django.db import models


class NodeValues(models.Model):
    """The value columns of one node at one time, shared by the baseline and analysis-run series."""

    element_type = models.CharField(max_length=16)
    element_id = models.CharField(max_length=64)
    time = models.DateTimeField()
    pressure = models.FloatField()
    head = models.FloatField()
    demand = models.FloatField()
    quality = models.FloatField()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.element_type} {self.element_id}@{self.time:%Y-%m-%dT%H:%M}"


class LinkValues(models.Model):
    """The value columns of one link at one time, shared by the baseline and analysis-run series."""

    element_type = models.CharField(max_length=16)
    element_id = models.CharField(max_length=64)
    time = models.DateTimeField()
    flow = models.FloatField()
    velocity = models.FloatField()
    headloss = models.FloatField()
    status = models.SmallIntegerField()
    setting = models.FloatField(null=True, blank=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.element_type} {self.element_id}@{self.time:%Y-%m-%dT%H:%M}"


class NodeBaseline(NodeValues):
    """Node results: pressure (m), head (m), demand (m³/s), quality (mg/L or h for age)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        ordering = ["project_id", "element_type", "element_id", "time"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "element_type", "element_id", "time"], name="nodebaseline_element_time_uniq"
            )
        ]
        indexes = [
            models.Index(
                fields=["project", "element_type", "time"],
                name="nodebaseline_type_time_cov",
                include=["element_id", "pressure", "head", "demand", "quality"],
            )
        ]


class LinkBaseline(LinkValues):
    """Link results as WNTR reports them: flow (m³/s), velocity (m/s), headloss (pipes: per unit
    length, m/m; pumps: negative head gain, m; valves: m), status (0 closed, 1 open, 2 active), setting
    (pipes: roughness; pumps: relative speed; valves: setting; NULL when EPANET reports none)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        ordering = ["project_id", "element_type", "element_id", "time"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "element_type", "element_id", "time"], name="linkbaseline_element_time_uniq"
            )
        ]
        indexes = [
            models.Index(
                fields=["project", "element_type", "time"],
                name="linkbaseline_type_time_cov",
                include=["element_id", "flow", "velocity", "headloss", "status", "setting"],
            )
        ]


class NetworkSource(models.Model):
    """The EPANET .inp text a project's network was imported from, kept so the model baseline can be
    simulated again for any window (``simulate_baseline``, the rolling baseline) with the same network
    WNTR read at import. Replaced with the network (one row per project)."""

    project = models.OneToOneField("contexts.Project", on_delete=models.CASCADE, related_name="+")
    file_name = models.CharField(max_length=255)
    inp_text = models.TextField()
    imported_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.project_id}: {self.file_name}"
