"""The one place a project's time zone is read (``Project.timezone`` arrives with issue 20; until then
every project is on UTC). Everything that needs "the project's local clock" calls ``project_zone``."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from contexts.models import Project


def project_zone(project: Project) -> ZoneInfo:
    """The project's IANA time zone (UTC when it has none)."""
    return ZoneInfo(getattr(project, "timezone", "") or "UTC")
