"""The one window rule of the series tools (R-PAGE-2, issue 40 item 4): "at most 24 h" means 24 *local*
wall-clock hours in the project's time zone, so a whole local day is one call — the 23 h spring-forward
day and the 25 h fall-back day included — while 25 elapsed hours on an ordinary day stay refused.

The size of an answer is bounded by its points (10 000, checked by each service in SQL), not by the
hours: this rule only keeps one call to one local day at most. Every service whose window is in the
project's local time (SCADA readings, model baseline series, element history, analysis series, rankings)
calls ``local_window``; the window it returns carries the zone beside the UTC times (``TimeWindow.timezone``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from contexts.errors import InvalidParameter, LimitExceeded
from queries.schemas.common import TimeWindow

#: The longest window, in local wall-clock hours of the project's zone (R-PAGE-2).
MAX_LOCAL_HOURS = 24
MAX_LOCAL_WINDOW = timedelta(hours=MAX_LOCAL_HOURS)


def local_length(start: datetime, end: datetime, zone: ZoneInfo) -> timedelta:
    """The wall-clock length of ``[start, end)`` read on the clocks of ``zone``: the difference of the
    local times with their offsets dropped (local midnight → next local midnight is 24 h on every day,
    though 23 h or 25 h elapse across a DST change). Both must carry an offset."""
    local_start = start.astimezone(zone).replace(tzinfo=None)
    local_end = end.astimezone(zone).replace(tzinfo=None)
    return local_end - local_start


def local_window(start: datetime, end: datetime, *, timezone: str = "UTC") -> TimeWindow:
    """The window ``[start, end)`` in UTC, tagged with the project's zone ``timezone`` (IANA name).
    Refuses, with ``InvalidParameter``, times without an offset and ``end <= start``; with
    ``LimitExceeded``, a window longer than ``MAX_LOCAL_HOURS`` local hours of that zone."""
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidParameter("start and end must carry a timezone offset (e.g. 2026-11-01T08:00:00Z).")
    if end <= start:
        raise InvalidParameter("end must be later than start.")
    zone = ZoneInfo(timezone or "UTC")
    if local_length(start, end, zone) > MAX_LOCAL_WINDOW:
        raise LimitExceeded(
            f"The window may be at most {MAX_LOCAL_HOURS} h long in local hours of the project's time zone "
            f"{zone.key} (a whole local day is allowed, DST days included); ask for a shorter window.",
            details={"max_local_hours": MAX_LOCAL_HOURS, "timezone": zone.key},
        )
    return TimeWindow(start=start.astimezone(UTC), end=end.astimezone(UTC), timezone=zone.key)
