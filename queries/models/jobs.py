"""Import and simulation jobs, as operators see them in the admin.

One row per run of ``import_network``/``import_gis``/``import_scada_devices``/``import_scada``/
``simulate_baseline`` (and per window the rolling baseline computes): what it worked on (a file name or a
time window), its status, how many rows it wrote, its rejects (the count and the first lines), how long it
took and who started it. A failed job keeps why, in a sentence (``message``); a dry run (``--dry-run``:
checked and counted, nothing written) is marked ``dry_run`` so its rows are not mistaken for data that
landed. The baseline, both SCADA imports and the analyses run on the job runner (``queries.jobrunner``:
a failure's state is written after its work rolled back, its success in the work's own transaction); the
network and GIS imports record their rows outside their own transaction, so one that rolled back still
shows as failed.
"""

from __future__ import annotations

from django.db import models


class JobKind(models.TextChoices):
    """The kinds this app records. ``Job.kind`` has no database choices: kinds are validated against the
    job runner's registry (``queries.jobrunner.registry``), where every app registers its own."""

    SCADA_DEVICES = "scada_devices", "SCADA devices import"
    SCADA_IMPORT = "scada_import", "SCADA readings import"
    BASELINE = "baseline", "Baseline simulation"
    NETWORK_IMPORT = "network_import", "Network import"
    GIS_IMPORT = "gis_import", "GIS layer import"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Job(models.Model):
    """One import or simulation job of a project (see the module docstring)."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=40, help_text="a kind of the job runner's registry")
    subject = models.CharField(max_length=300, help_text="the file imported, or the simulated window")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    rows = models.BigIntegerField(null=True, blank=True)
    dry_run = models.BooleanField(default=False, help_text="checked and counted, nothing written")
    rejects = models.IntegerField(default=0)
    reject_lines = models.JSONField(default=list, blank=True)
    progress = models.FloatField(null=True, blank=True, help_text="0–1 while running")
    message = models.TextField(blank=True, help_text="why it failed, in a sentence")
    error_code = models.CharField(max_length=32, blank=True, help_text="TIME_LIMIT, WORKER_LOST, EPANET_110, …")
    status_message = models.CharField(max_length=200, blank=True, help_text="one line of progress")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="last progress of a running job")
    time_limit_s = models.PositiveIntegerField(null=True, blank=True, help_text="its hard time limit")
    detail = models.JSONField(default=dict, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    started_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="job_project_created")]

    def __str__(self) -> str:
        return f"{self.kind_label} {self.subject}"

    @property
    def kind_label(self) -> str:
        from queries.jobrunner.registry import kind_label

        return kind_label(self.kind)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()
