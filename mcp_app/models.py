"""The MCP entry switch (issue 23 item 16, seed 001 "实施范围与验收": rollback turns the MCP entry off and
revokes the contexts, keeping evidence and reports)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class EntrySwitch(models.Model):
    """One row per operator change of the MCP entry (``manage.py mcp_entry on|off``), never deleted: the
    newest row is the entry's state (no row: on), all rows together are its audit trail — who, why, when,
    and (filled in once its sweep has finished) how many contexts turning it off revoked. In the
    database, so every server process sees the same state without a redeploy."""

    enabled = models.BooleanField()
    actor = models.CharField(max_length=300)
    reason = models.CharField(max_length=500)
    revoked_contexts = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"MCP entry {'on' if self.enabled else 'off'} at {self.at:%Y-%m-%d %H:%M:%S} by {self.actor}"


class McpTask(models.Model):
    """A submit tool's call answered as an MCP task (SEP-2663 ``io.modelcontextprotocol/tasks``, R-RUN-5):
    the second face of a job that the call's job answer names. Only the SHA-256 of the task id is kept
    (the id is a bearer-like secret returned once, like a context handle); the task belongs to the
    principal and project of the context it was created in, and every ``tasks/*`` request must come from
    that principal with a live context of that project (``mcp_app.tasks_extension``). ``arguments`` are
    the fields of the job answer its follow tools (``ToolSpec.follow``) are called with, e.g. a run id.
    In the database, so any server process answers ``tasks/get``; never updated — the job's own state
    machine is the state, read through the follow tool on each ``tasks/get``."""

    key = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the task id (hex)")
    principal = models.ForeignKey("contexts.Principal", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+")
    tool = models.CharField(max_length=100, help_text="the submit tool that created it")
    arguments = models.JSONField(default=dict, help_text="what the follow tools are called with")
    poll_interval_ms = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "MCP task"

    def __str__(self) -> str:
        return f"MCP task of {self.tool} {self.arguments}"
