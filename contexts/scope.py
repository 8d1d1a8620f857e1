"""``QueryScope``: everything a query service may know about who is asking and for what.

It is built by the context resolver from a verified token and a server-side context binding — never
from tool input — and handed to every query service, which scopes every lookup by ``project_id`` (and
task/run where bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class QueryScope:
    principal_id: int
    issuer: str
    subject: str
    client_id: str
    project_id: int
    project_slug: str
    permissions: frozenset[str]
    purpose: str
    context_id: int | None = None
    session_id: str = ""
    task_id: int | None = None
    run_id: int | None = None
    execution_request_id: int | None = None
    allowed_tools: frozenset[str] = field(default_factory=frozenset)
    # The project's unit system and the network facts that decide what its numbers are in (read with the
    # binding; ``queries.units.present`` converts results with them).
    unit_system: str = "SI"
    # The project's IANA time zone (read in the same statement): series windows count its local hours.
    timezone: str = "UTC"
    quality_type: str = ""
    headloss_formula: str = "H-W"

    def has(self, permission: str) -> bool:
        return permission in self.permissions
