"""The project's own facts an agent needs before it asks for a window: its name, time zone, the offset
in force now and the next DST change, and its unit system (issue 40 item 3). Read from the project row
(one query) and worked out with ``zoneinfo`` — the same zone the series tools count local hours in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from contexts.errors import NotFound
from contexts.models import Project
from contexts.scope import QueryScope
from queries.plan import Plan, service, statement_factory
from queries.schemas.project import ProjectClock, ProjectResult

SOURCE = "project"
#: How far ahead the next offset change is looked for (every DST zone changes at least once a year).
_HORIZON_DAYS = 400


def format_offset(offset: timedelta | None) -> str:
    """A UTC offset as ISO 8601 ``±HH:MM`` (``"+00:00"`` for UTC)."""
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


def next_offset_change(zone: ZoneInfo, now: datetime) -> datetime | None:
    """The first instant after ``now`` at which ``zone``'s UTC offset changes, to the second (``None``
    when it does not change within ``_HORIZON_DAYS``): a day-by-day scan, then a bisection inside the
    day of the change (``zoneinfo`` exposes no transition list)."""
    current = now.astimezone(zone).utcoffset()
    low = now.astimezone(UTC)
    for _ in range(_HORIZON_DAYS):
        high = low + timedelta(days=1)
        if high.astimezone(zone).utcoffset() != current:
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == current:
                    low = middle
                else:
                    high = middle
            return high.replace(microsecond=0)
        low = high
    return None


@statement_factory
def _project(project_id: int) -> Any:
    """The project's row (name, zone, units): a statement factory, compiled once."""
    return Project.objects.filter(pk=project_id).values("slug", "name", "timezone", "unit_system")[:1]


@service
def get_project(*, scope: QueryScope, now: datetime | None = None) -> Plan[ProjectResult]:
    """The caller's project's clock and units (one query). ``now``: the instant the offset is read at
    (tests pin it; the tools use the current time)."""
    rows = yield _project(scope.project_id)
    if not rows:
        raise NotFound("No such project.")
    row = rows[0]
    at = (now or datetime.now(UTC)).astimezone(UTC)
    zone = ZoneInfo(row["timezone"] or "UTC")
    change = next_offset_change(zone, at)
    return ProjectResult(
        source=SOURCE,
        source_ref=f"project:{row['slug']}",
        queried_at=datetime.now(UTC),
        origin="diagnostic",
        data=ProjectClock(
            slug=row["slug"],
            name=row["name"],
            timezone=zone.key,
            utc_offset_now=format_offset(at.astimezone(zone).utcoffset()),
            unit_system=row["unit_system"],
            next_offset_change=change,
            utc_offset_after=format_offset(change.astimezone(zone).utcoffset()) if change else None,
        ),
    )
