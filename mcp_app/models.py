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
