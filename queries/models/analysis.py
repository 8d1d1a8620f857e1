"""Analysis runs (burst, valve isolation, flushing, …), their results and their node/link series.

A run is identified by ``run_id`` (unique per project). Its results are typed rows (``result_type``)
with a JSON payload and the elements they refer to; its series have the shape of the model baseline
but belong to the run (scenario values, not the baseline).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from queries.models.baseline import LinkValues, NodeValues


class AnalysisKind(models.TextChoices):
    BURST = "burst"
    VALVE_ISOLATION = "valve_isolation"
    FLUSHING = "flushing"
    CONTAMINANT = "contaminant"
    LEAKAGE_IDENTIFICATION = "leakage_identification"
    BURST_DETECTION = "burst_detection"
    BURST_LOCATION = "burst_location"
    SIMULATION = "simulation"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AnalysisRun(models.Model):
    """One analysis run: what was asked (``parameters``), when it ran, how it ended, and a short
    ``summary`` (for a failed run: ``error_code`` and ``error_message``, no stack traces)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    run_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=32, choices=AnalysisKind.choices)
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    title = models.CharField(max_length=200, blank=True, default="")
    parameters = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(default=dict)
    error_code = models.CharField(max_length=64, blank=True, default="")
    error_message = models.CharField(max_length=500, blank=True, default="")
    # What the run computed from (issue 42 item 1, R-RUN-1): the model version it is pinned to (never
    # deleted while a run names it), the engine and its version, and the SHA-256 of its canonical inputs
    # (``queries.runs.inputs``). Empty for the demo's seeded runs, which no engine computed.
    model_version = models.ForeignKey(
        "queries.NetworkSource", null=True, blank=True, on_delete=models.RESTRICT, related_name="+"
    )
    engine = models.CharField(max_length=64, blank=True, default="")
    input_sha256 = models.CharField(max_length=64, blank=True, default="")
    #: 0–1 while running, with a one-line status message (R-RUN-4).
    progress = models.FloatField(null=True, blank=True)
    status_message = models.CharField(max_length=200, blank=True, default="")
    # A run submitted through the analyses app (issue 42): its job (the run's state machine: ``status``,
    # ``progress`` and ``status_message`` mirror the job's in the job's own transactions), who submitted it,
    # the client's idempotency key, the cost estimated before it was queued and what it actually cost.
    # The demo's seeded runs have no job.
    job = models.OneToOneField(
        "queries.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="analysis_run"
    )
    principal = models.ForeignKey(
        "contexts.Principal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    request_key = models.CharField(max_length=100, blank=True, default="")
    estimate = models.JSONField(default=dict, blank=True)
    cost = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["project_id", "-created_at", "run_id"]
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="analysisrun_project_run_uniq")]
        indexes = [
            models.Index(fields=["project", "-created_at", "run_id"], name="analysisrun_recent"),
            models.Index(fields=["principal", "project", "input_sha256"], name="analysisrun_same_question"),
        ]

    def __str__(self) -> str:
        return self.run_id


class AnalysisResult(models.Model):
    """One result of a run, e.g. ``isolation_segment`` (the valves to close and the pipes/junctions
    cut off), ``affected_nodes`` (pressure deficit), ``leak`` (where and how much). ``element_refs``
    is a list of ``{"element_type", "element_id"}``. ``sequence`` orders results within a run."""

    run = models.ForeignKey(AnalysisRun, on_delete=models.CASCADE, related_name="results", db_index=False)
    sequence = models.PositiveIntegerField()
    result_type = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    element_refs = models.JSONField(default=list)

    class Meta:
        ordering = ["run_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["run", "sequence"], name="analysisresult_run_seq_uniq")]
        indexes = [models.Index(fields=["run", "result_type", "sequence"], name="analysisresult_type")]

    def __str__(self) -> str:
        return f"{self.result_type}#{self.sequence}"


class AnalysisNodeSeries(NodeValues):
    """Node values of a run's scenario: pressure, head (m), demand (m³/s), quality, and leak demand
    (m³/s, null where the node has no leak)."""

    run = models.ForeignKey(AnalysisRun, on_delete=models.CASCADE, related_name="+", db_index=False)
    leak_demand = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "element_type", "element_id", "time"]
        verbose_name_plural = "analysis node series"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "element_type", "element_id", "time"], name="analysisnode_element_time_uniq"
            )
        ]
        indexes = [models.Index(fields=["run", "element_type", "time"], name="analysisnode_type_time")]


class AnalysisLinkSeries(LinkValues):
    """Link values of a run's scenario: flow (m³/s), velocity (m/s), headloss, status, setting."""

    run = models.ForeignKey(AnalysisRun, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        ordering = ["run_id", "element_type", "element_id", "time"]
        verbose_name_plural = "analysis link series"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "element_type", "element_id", "time"], name="analysislink_element_time_uniq"
            )
        ]
        indexes = [models.Index(fields=["run", "element_type", "time"], name="analysislink_type_time")]
