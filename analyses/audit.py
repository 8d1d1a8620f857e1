"""The audit log of analysis runs (issue 42 item 7): submit, refuse (with the reason), start, finish,
cancel and fail, as ``contexts.AccessEvent`` rows — with the task run and execution request of an
investigation, and never the inputs beyond their hash."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contexts.models import AccessEvent

if TYPE_CHECKING:
    from analyses.submit import Submitter

#: What a row may carry besides the grant: names and numbers, never the payload.
ALLOWED = frozenset(
    {"kind", "run_id", "reason", "input_sha256", "estimate_cpu_s", "requested", "error_code", "cpu_seconds"}
)


def record(
    action: str,
    *,
    project_id: int,
    who: Submitter | None = None,
    grant: dict[str, Any] | None = None,
    actor: str = "",
    **details: Any,
) -> None:
    """Write one audit row (``action`` one of ``AccessEvent.Action``'s ``analysis_*``)."""
    unknown = set(details) - ALLOWED
    if unknown:
        raise ValueError(f"audit details not allowed: {sorted(unknown)}")
    grant = who.grant() if who is not None else (grant or {})
    for name in ("purpose", "task_id", "task_run_id", "execution_request_id"):
        if grant.get(name):
            details[name] = grant[name]
    AccessEvent.objects.create(
        action=AccessEvent.Action(action),
        actor=(who.actor if who is not None else actor)[:300] or "system",
        project_id=project_id,
        principal_id=grant.get("principal_id"),
        details=details,
    )
