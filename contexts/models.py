"""Who may see what: projects, principals, memberships and investigation tasks (SPEC §1 "contexts").

Query contexts (the context handle bindings) and their audit trail live here too; everything a
call is allowed to touch is derived from these rows *at call time*, never cached from a token.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Permission(models.TextChoices):
    """Product permission codes (SPEC §5): what a membership grants on a project's data."""

    WEBGIS_VIEW = "webgis.view", "Network, GIS and analysis runs"
    SCADA_VIEW = "scada.view", "SCADA devices and readings"
    SIMULATION_VIEW = "simulation.view", "Model baseline and analysis series"
    OPTIMIZATION_RUN = "optimization.run", "Sensor placement runs"
    SIMULATION_RUN = "simulation.run", "Run hydraulic analyses (what-if, burst, isolation, flushing, contaminant)"


class UnitSystem(models.TextChoices):
    """The units a project's results are shown in (R-ONB-3: stored values are always SI)."""

    SI = "SI", "SI (m, m³/s; pressure as head in m)"
    US = "US", "US customary (psi, gpm, ft, in)"


class Project(models.Model):
    """A utility project: one hydraulic network and all data that belongs to it. Every business row
    in ``queries`` and ``evidence`` points at exactly one project, and every lookup is scoped by it.

    ``timezone`` is the utility's IANA time zone (local time for patterns and naive timestamps in its
    imports); ``unit_system`` the units its results are returned in (R-ONB-1, ``queries.units``)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    unit_system = models.CharField(max_length=2, choices=UnitSystem.choices, default=UnitSystem.SI)
    # Facts of the imported network that decide what its numbers are in (set by the network import):
    # EPANET's quality parameter (CHEMICAL, AGE, TRACE, NONE; "" = imported before it was recorded) and
    # headloss formula (H-W, D-W, C-M: the unit of pipe roughness).
    quality_type = models.CharField(max_length=8, blank=True, default="")
    headloss_formula = models.CharField(max_length=3, default="H-W")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class ProjectCompute(models.Model):
    """Whether a project may run analyses, and what they may cost (issue 42 item 3): off by default
    (no row is off); changed only through ``contexts.onboarding.project_compute`` (audited), by the
    ``project_compute`` command or the admin's action."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="compute")
    enabled = models.BooleanField(default=False)
    cpu_seconds_per_day = models.PositiveIntegerField(default=0, help_text="CPU seconds of runs per UTC day")
    max_concurrent = models.PositiveSmallIntegerField(default=0, help_text="runs queued or running at once")
    max_run_seconds = models.PositiveIntegerField(default=600, help_text="the hard time limit of one run")
    # Bounded storage (issue 42 item 8): the series rows the project's runs may hold together (a submission
    # that would pass it is refused, ``analyses.storage``), and how long a finished run is kept before the
    # beat purges it unless evidence refers to it (``analyses.retention``).
    max_series_rows = models.PositiveBigIntegerField(default=5_000_000, help_text="series rows of all runs at most")
    retention_days = models.PositiveSmallIntegerField(default=30, help_text="days a finished run is kept")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "project compute"
        verbose_name_plural = "project compute"

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"{self.project_id}: analyses {state}"


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
        # Names are not unique (two "Alice"s): the subject always tells principals apart.
        return f"{self.display_name} ({self.subject})" if self.display_name else self.subject


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
    agent session that may execute it and until when. ``owner`` is the principal that runs the
    investigation (the worker's service identity): only it binds task contexts on the run
    (``contexts.access.owns_run``); a run without an owner binds for nobody."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SUPERSEDED = "superseded"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    sequence = models.PositiveIntegerField()
    owner = models.ForeignKey(Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="owned_runs")
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
    #: The run permissions this execution was approved for (issue 42 item 3): a ``task_execution`` context
    #: gets the tools that start analyses only when the request approved ``simulation.run``. None by default.
    approved_permissions = ArrayField(models.CharField(max_length=32), default=list, blank=True)
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


class ContextPurpose(models.TextChoices):
    """Why a context exists (SPEC R-CTX-1): it decides which tools it may carry and which run it binds."""

    ORDINARY_CHAT = "ordinary_chat", "Ordinary project chat"
    TASK_EXECUTION = "task_execution", "Investigation run (main agent)"
    TASK_READER = "task_reader", "Read-only sub-agent of a run"


TASK_PURPOSES = frozenset({ContextPurpose.TASK_EXECUTION.value, ContextPurpose.TASK_READER.value})


class QueryContextQuerySet(models.QuerySet["QueryContext"]):
    def active(self, now: datetime) -> QueryContextQuerySet:
        return self.filter(revoked_at__isnull=True, expires_at__gt=now)

    def expired(self, now: datetime) -> QueryContextQuerySet:
        return self.filter(revoked_at__isnull=True, expires_at__lte=now)

    def revoked(self) -> QueryContextQuerySet:
        return self.filter(revoked_at__isnull=False)


class QueryContext(models.Model):
    """A context handle's server-side binding (SPEC R-CTX-2): who (principal + client), where (project,
    through the membership that allowed it), why (purpose, task/run/execution request, parent session)
    and which tools, until when. Only the SHA-256 of the handle is stored, so a database dump cannot be
    replayed; the handle itself is shown once, in the create response. Every call re-checks this row
    against the live membership and run (R-CTX-3), so revoking it here stops every server process on its
    next call."""

    handle_hash = models.CharField(max_length=64, unique=True, editable=False)
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="query_contexts")
    client_id = models.CharField(max_length=255)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="query_contexts")
    # The membership that granted the binding: the per-call check reads its live permissions and
    # revocation in the same query as the binding.
    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="query_contexts")
    session_id = models.CharField(max_length=255)
    purpose = models.CharField(max_length=32, choices=ContextPurpose.choices)
    allowed_tools = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.CASCADE, related_name="query_contexts")
    run = models.ForeignKey(TaskRun, null=True, blank=True, on_delete=models.CASCADE, related_name="query_contexts")
    execution_request = models.ForeignKey(
        ExecutionRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="query_contexts"
    )
    parent_session_id = models.CharField(max_length=255, blank=True)
    # The task report revision this binding reads by default (``get_task_context``): the one the binder
    # asked for, else the task's newest when the context was bound. Pinned, so a context renewed every
    # ten minutes keeps reading the revision its session was working on (issue 23 item 8).
    report_revision = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=300, blank=True)
    revoke_reason = models.CharField(max_length=500, blank=True)

    objects = QueryContextQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["expires_at"], name="querycontext_expires_idx"),
            models.Index(fields=["revoked_at"], name="querycontext_revoked_idx"),
            models.Index(fields=["project", "principal"], name="querycontext_proj_princ_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(purpose="ordinary_chat", task__isnull=True, run__isnull=True)
                | Q(purpose="task_execution", task__isnull=False, run__isnull=False, execution_request__isnull=False)
                | (Q(purpose="task_reader", task__isnull=False, run__isnull=False) & ~Q(parent_session_id="")),
                name="querycontext_purpose_binding",
            ),
            models.CheckConstraint(
                condition=Q(report_revision__isnull=True) | ~Q(purpose="ordinary_chat"),
                name="querycontext_revision_task_only",
            ),
        ]

    def __str__(self) -> str:
        return f"context {self.pk} ({self.handle_prefix}…)"

    @property
    def handle_prefix(self) -> str:
        """A short prefix of the handle's *hash* for operators; never the handle."""
        return self.handle_hash[:8]

    def state(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "active"


class ContextEvent(models.Model):
    """Audit trail of context bindings: creation and revocation, with the actor and the reason. Written
    in the same transaction as the change it records. Keeps the context id as a plain number (and the
    hash prefix) so the trail outlives the purge of the binding itself."""

    class Action(models.TextChoices):
        CREATED = "created"
        REVOKED = "revoked"

    context_id = models.BigIntegerField(db_index=True)
    handle_prefix = models.CharField(max_length=8)
    action = models.CharField(max_length=16, choices=Action.choices)
    actor = models.CharField(max_length=300)
    reason = models.CharField(max_length=500, blank=True)
    project_id = models.BigIntegerField(null=True)
    principal_id = models.BigIntegerField(null=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} context {self.context_id} by {self.actor}"


class AccessEvent(models.Model):
    """Audit trail of onboarding (``contexts.onboarding``): projects created, principals registered,
    memberships granted, changed and revoked — with the actor, in the same transaction as the change.
    Keeps ids as plain numbers so the trail outlives the rows it describes."""

    class Action(models.TextChoices):
        PROJECT_CREATED = "project_created"
        PRINCIPAL_REGISTERED = "principal_registered"
        MEMBERSHIP_GRANTED = "membership_granted"
        MEMBERSHIP_CHANGED = "membership_changed"
        MEMBERSHIP_REVOKED = "membership_revoked"
        PROJECT_UNITS_CHANGED = "project_units_changed"
        PROJECT_DELETED = "project_deleted"
        PROJECT_COMPUTE_CHANGED = "project_compute_changed"
        # Analysis runs (issue 42 item 7): the inputs are never recorded, only their hash.
        ANALYSIS_SUBMITTED = "analysis_submitted"
        ANALYSIS_REFUSED = "analysis_refused"
        ANALYSIS_STARTED = "analysis_started"
        ANALYSIS_SUCCEEDED = "analysis_succeeded"
        ANALYSIS_FAILED = "analysis_failed"
        ANALYSIS_CANCELLED = "analysis_cancelled"

    action = models.CharField(max_length=32, choices=Action.choices)
    actor = models.CharField(max_length=300)
    project_id = models.BigIntegerField(db_index=True)
    principal_id = models.BigIntegerField(null=True)
    details = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} project={self.project_id} principal={self.principal_id}"
