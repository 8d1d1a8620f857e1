"""``manage.py mcp_entry off --reason "…"`` / ``manage.py mcp_entry on --reason "…"`` / ``mcp_entry status``:
rollback of the MCP entry at run time, without a redeploy (issue 23 item 16, ``mcp_app.entry``).

``off`` refuses new bindings, makes every server process answer ``/mcp`` with 503 ``MCP_DISABLED`` (within
``mcp_app.entry.REFRESH_S``) and revokes every live context (audited, no overall limit); evidence and reports
are kept. ``on`` is the way back. Both write an audit row and a ``tjwater.audit`` log line.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import InvalidParameter
from contexts.management.commands._onboarding import command_actor
from mcp_app import entry


class Command(BaseCommand):
    help = "Turn the MCP entry off (revoking every live context) or back on, at run time."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("state", choices=["off", "on", "status"])
        parser.add_argument("--reason", default="", help="why (required for off and on; kept in the audit trail)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["state"] == "status":
            self.stdout.write("on" if entry.entry_enabled() else "off")
            return
        change_entry = entry.mcp_entry_off if options["state"] == "off" else entry.mcp_entry_on
        try:
            change = change_entry(actor=command_actor(), reason=options["reason"])
        except InvalidParameter as exc:
            raise CommandError(exc.message) from None
        if change.enabled:
            self.stdout.write("MCP entry on")
        else:
            self.stdout.write(f"MCP entry off; contexts revoked: {change.revoked_contexts}")
