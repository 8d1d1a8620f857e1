"""The one place a project's time zone is read (``Project.timezone`` arrives with issue 20; until then
every project is on UTC). Everything that needs "the project's local clock" calls ``project_zone``."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from contexts.models import Project


def project_zone(project: Project) -> ZoneInfo:
    """The project's IANA time zone (UTC when it has none)."""
    return ZoneInfo(getattr(project, "timezone", "") or "UTC")


def local_instant(naive: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock time ``naive`` in ``zone``. A time the clocks skipped (spring
    forward) or passed twice (fall back) is refused with a sentence naming it and the way out (give
    the offset), as ``import_scada`` refuses such a time by line."""
    early, late = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    if early.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive:
        raise ValueError(
            f"{naive:%Y-%m-%dT%H:%M:%S} does not exist in {zone.key} (the clocks moved forward then); give the "
            "time with its UTC offset."
        )
    if early.utcoffset() != late.utcoffset():
        raise ValueError(
            f"{naive:%Y-%m-%dT%H:%M:%S} happens twice in {zone.key} (the clocks moved back then); give the "
            f"offset: {early.isoformat()} or {late.isoformat()}."
        )
    return early.astimezone(UTC)
