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
from django.utils import timezone


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
    """A model version (issue 42 item 1): the EPANET .inp text of one ``import_network``, its SHA-256, the
    file name, who imported it and when. Every import adds one (numbered 1, 2, … per project); the
    project's current version is the newest (``current_model_version``). The baseline is simulated again
    from it for any window (``simulate_baseline``, the rolling baseline) with the network WNTR read at
    import. Versions are a history: an import never deletes one, only deleting the project does (runs,
    baseline windows and evidence that name a version keep it)."""

    project = models.ForeignKey(
        "contexts.Project", on_delete=models.CASCADE, related_name="model_versions", db_index=False
    )
    version = models.PositiveIntegerField()
    file_name = models.CharField(max_length=255)
    inp_text = models.TextField()
    #: SHA-256 (hex) of ``inp_text`` in UTF-8: the file as imported (``import_network`` refuses text that
    #: is not UTF-8, so these are the file's bytes).
    sha256 = models.CharField(max_length=64)
    imported_by = models.CharField(max_length=150, blank=True, default="")
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project_id", "-version"]
        verbose_name = "model version"
        constraints = [models.UniqueConstraint(fields=["project", "version"], name="networksource_project_version")]

    def __str__(self) -> str:
        return f"{self.project_id}: v{self.version} {self.file_name}"


def current_model_version(project_id: int) -> NetworkSource | None:
    """The project's newest model version, or None before its first ``import_network``."""
    return NetworkSource.objects.filter(project_id=project_id).order_by("-version").first()
