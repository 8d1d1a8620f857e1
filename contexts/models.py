"""Who may see what: projects, principals, memberships and investigation tasks (SPEC §1 "contexts").

Query contexts (the context handle binding) live here too once the context issue lands; everything a
call is allowed to touch is derived from these rows *at call time*, never cached from a token.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q


class Permission(models.TextChoices):
    """Product permission codes (SPEC §5): what a membership grants on a project's data."""

    WEBGIS_VIEW = "webgis.view", "Network, GIS and analysis runs"
    SCADA_VIEW = "scada.view", "SCADA devices and readings"
    SIMULATION_VIEW = "simulation.view", "Model baseline and analysis series"
    OPTIMIZATION_RUN = "optimization.run", "Sensor placement runs"


class Project(models.Model):
    """A utility project: one hydraulic network and all data that belongs to it. Every business row
    in ``queries`` and ``evidence`` points at exactly one project, and every lookup is scoped by it."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Principal(models.Model):
    """A person or service identity as the OpenID issuer names it: ``(issuer, sub)``. Identity always
    comes from a verified token, never from a request body or client-reported information."""

    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    display_name = models.CharField(max_length=200, blank=True)
    is_service = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["issuer", "subject"]
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="principal_issuer_sub_uniq")]

    def __str__(self) -> str:
        return self.display_name or self.subject


class Membership(models.Model):
    """A principal's permissions on one project. Revocation sets ``revoked_at``; a revoked membership
    grants nothing, and contexts bound through it stop working on their next call."""

    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="memberships")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    permissions = ArrayField(models.CharField(max_length=32, choices=Permission.choices), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project", "principal"]
        constraints = [
            models.UniqueConstraint(fields=["principal", "project"], name="membership_principal_project_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.principal} @ {self.project}"


class Task(models.Model):
    """An investigation task in a project. Task purposes bind a context to one run of one task."""

    class Status(models.TextChoices):
        OPEN = "open"
        IN_PROGRESS = "in_progress"
        CLOSED = "closed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    title = models.CharField(max_length=300)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "id"]

    def __str__(self) -> str:
        return self.title


class TaskRun(models.Model):
    """One execution of a task. A newer run supersedes an older one; at most one run per task is
    current (``superseded_at IS NULL``), enforced by a partial unique index. The lease names the native
    agent session that may execute it and until when."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SUPERSEDED = "superseded"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    sequence = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    lease_holder = models.CharField(max_length=255, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["task", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["task", "sequence"], name="taskrun_task_sequence_uniq"),
            models.UniqueConstraint(
                fields=["task"], condition=Q(superseded_at__isnull=True), name="taskrun_one_current_per_task"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}#{self.sequence}"


class ExecutionRequest(models.Model):
    """The host's request to execute a run; a ``task_execution`` context names one."""

    run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="execution_requests")
    request_id = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "id"]

    def __str__(self) -> str:
        return self.request_id


class TaskReport(models.Model):
    """A revision of a task's report: sections as JSON. Revisions are immutable once written; a change
    is a new revision (the database refuses a second row with the same revision)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="reports")
    revision = models.PositiveIntegerField()
    sections = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["task", "revision"], name="taskreport_task_revision_uniq"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="taskreport_revision_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} r{self.revision}"
