"""Result data of get_project: the project's clock and units (issue 40 item 3)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from queries.schemas.common import ResultEnvelope


class ProjectClock(BaseModel):
    """What an agent needs to read and ask in the project's local time: its IANA ``timezone``, the UTC
    offset in force now (``"-05:00"``), the ``unit_system`` results come in (``SI`` or ``US``) and the next
    change of the offset (a DST change: when, in UTC, and the offset after it; null in a zone without one
    within a year). Series windows are capped at 24 local hours of this zone."""

    slug: str
    name: str
    timezone: str
    utc_offset_now: str
    unit_system: str
    next_offset_change: datetime | None
    utc_offset_after: str | None


class ProjectResult(ResultEnvelope[ProjectClock]):
    pass
