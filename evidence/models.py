"""What an investigation saw, and the receipts that make saving it exactly-once (SPEC §8, R-EVID).

``EvidenceSnapshot`` is the full result of one query made inside a task context (``task_execution`` or
``task_reader``), saved *before* the caller sees it. It is immutable: the database refuses any UPDATE
(migration 0002), whatever code path tries it. Its digest is the SHA-256 of the RFC 8785 (JCS)
canonical form of ``data``, so anyone holding the document can check it.

``QueryReceipt`` is the idempotency record of one call: the host's application request key
(``_meta["cn.tjwater/requestKey"]``) within a principal, project, session, task and run, with the hash
of the call's canonical parameters. The unique constraint on that key tuple is what makes concurrent
duplicates produce exactly one receipt — a database constraint, not a Python check.

Rows are written only by ``evidence.services``; nothing a client sends decides ``origin``.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from contexts.models import Principal, Project, Task, TaskRun

EVIDENCE_URI_PREFIX = "tjwater://evidence/"


class EvidenceSnapshot(models.Model):
    """One saved query result of an investigation run (R-EVID-1): scope (project, task, run), who saved
    it and the permissions its tool needed, the tool and its source, the canonical parameters (never the
    ``context_handle``), the whole result, its RFC 8785 byte size and SHA-256.
    ``origin`` is always ``system`` (a CHECK constraint): evidence is what the server's own query
    returned, never something a client submitted."""

    class Origin(models.TextChoices):
        SYSTEM = "system"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evidence_snapshots")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="evidence_snapshots")
    run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="evidence_snapshots")
    tool = models.CharField(max_length=100)
    source = models.CharField(max_length=100)
    # Who saved it and which permission codes its source tool needed for that call (the tool's own and
    # those its arguments added): every evidence read re-checks, live, that the reader still holds them
    # (``contexts.access.evidence_reach``). Rows from before these columns existed carry every product
    # permission (migration 0003): readable only by a principal that could query anything.
    principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="evidence_snapshots"
    )
    required_permissions = ArrayField(models.CharField(max_length=32), default=list)
    params = models.JSONField(default=dict)
    data = models.JSONField()
    byte_size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.SYSTEM)
    created_at = models.DateTimeField(auto_now_add=True)
    # A read of an analysis run's results (the analysis read tools naming a ``run_id``, R-RUN-6): the run
    # it read, and what the run computed from (R-RUN-1, issue 42 item 7) — its model version and the
    # SHA-256 of its canonical inputs; null for every other snapshot and for a run no engine computed (the
    # demo's). Set by the save's own statement (``evidence.services``), never changed (no UPDATE ever).
    # DO_NOTHING, with the database's foreign keys (deferred to the commit) as the guard: a transaction
    # that leaves a snapshot naming a deleted run or model version is refused, so the retention keeps the
    # runs evidence refers to (``analyses.retention``), while a deletion that takes the snapshot with it
    # — a project's, or the demo's rebuild deleting its tasks — commits.
    analysis_run = models.ForeignKey(
        "queries.AnalysisRun", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="+"
    )
    model_version = models.ForeignKey(
        "queries.NetworkSource", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="+"
    )
    input_sha256 = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "task", "run", "-created_at"], name="evidence_scope_created_idx"),
            models.Index(fields=["project", "tool"], name="evidence_project_tool_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(origin="system"), name="evidence_origin_system"),
            models.CheckConstraint(condition=Q(byte_size__gte=0), name="evidence_byte_size_nonneg"),
        ]

    def __str__(self) -> str:
        return f"evidence {self.pk} ({self.tool})"

    @property
    def uri(self) -> str:
        return f"{EVIDENCE_URI_PREFIX}{self.pk}"


class QueryReceipt(models.Model):
    """The idempotency receipt of one task-purpose call (R-EVID-2). ``pending`` while its query runs
    (``attempt`` numbers the claim, so only the current claimant can complete it), ``complete`` with
    the snapshot, or ``failed`` (superseded, cancelled, query error, commit failure, or left behind by
    a crashed process) — a failed receipt may be claimed again by a retry with the same key."""

    class State(models.TextChoices):
        PENDING = "pending"
        COMPLETE = "complete"
        FAILED = "failed"

    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="query_receipts")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="query_receipts")
    session_id = models.CharField(max_length=255)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="query_receipts")
    run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="query_receipts")
    request_key = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    params_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempt = models.PositiveIntegerField(default=1)
    snapshot = models.OneToOneField(
        EvidenceSnapshot, null=True, blank=True, on_delete=models.CASCADE, related_name="receipt"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "updated_at"], name="receipt_state_updated_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["principal", "project", "session_id", "task", "run", "request_key"], name="receipt_key_uniq"
            ),
            models.CheckConstraint(
                condition=Q(state="complete", snapshot__isnull=False)
                | (~Q(state="complete") & Q(snapshot__isnull=True)),
                name="receipt_complete_has_snapshot",
            ),
        ]

    def __str__(self) -> str:
        return f"receipt {self.pk} ({self.state})"
