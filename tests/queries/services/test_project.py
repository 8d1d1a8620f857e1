"""get_project (issue 40 item 3): the project's zone, the offset now, the next DST change and the unit
system — on a New York US project through the service (the offset read at pinned instants on either
side of the 2026 changes), and on the demo over real MCP; one query."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from contexts.models import Project
from queries.services import project
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, structured

pytestmark = [pytest.mark.django_db]


def new_york() -> Project:
    return Project.objects.create(slug="ny-clock", name="New York Water", timezone="America/New_York", unit_system="US")


def test_new_york_in_summer_and_in_winter(django_assert_num_queries: Callable[..., Any]) -> None:
    scope = service_scope(new_york(), {"webgis.view"})
    with django_assert_num_queries(1):
        summer = project.get_project(scope=scope, now=datetime(2026, 7, 1, 12, tzinfo=UTC)).data
    assert (summer.slug, summer.name, summer.timezone, summer.unit_system) == (
        "ny-clock",
        "New York Water",
        "America/New_York",
        "US",
    )
    # EDT now; clocks fall back at 02:00 EDT on 2026-11-01 = 06:00Z, to EST.
    assert (summer.utc_offset_now, summer.next_offset_change, summer.utc_offset_after) == (
        "-04:00",
        datetime(2026, 11, 1, 6, tzinfo=UTC),
        "-05:00",
    )
    winter = project.get_project(scope=scope, now=datetime(2026, 12, 5, tzinfo=UTC)).data
    # EST now; clocks spring forward at 02:00 EST on 2027-03-14 = 07:00Z.
    assert (winter.utc_offset_now, winter.next_offset_change, winter.utc_offset_after) == (
        "-05:00",
        datetime(2027, 3, 14, 7, tzinfo=UTC),
        "-04:00",
    )


def test_offsets_of_zones_without_dst_and_with_half_hours() -> None:
    assert project.next_offset_change(ZoneInfo("UTC"), datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert project.format_offset(datetime(2026, 1, 1, tzinfo=ZoneInfo("Asia/Kolkata")).utcoffset()) == "+05:30"
    assert project.format_offset(datetime(2026, 1, 1, tzinfo=ZoneInfo("America/St_Johns")).utcoffset()) == "-03:30"


@pytest.mark.e2e
def test_get_project_over_mcp_reports_the_demo_clock(demo_call: Callable[..., dict[str, Any]]) -> None:
    s = structured(demo_call("get_project", {}))
    demo = Project.objects.get(slug=DEMO)
    assert s["data"]["slug"] == DEMO and s["data"]["name"] == demo.name
    # The demo utility is in Tianjin: China keeps +08:00 all year (no DST change ahead).
    assert (s["data"]["timezone"], s["data"]["utc_offset_now"], s["data"]["unit_system"]) == (
        demo.timezone,
        "+08:00",
        "SI",
    )
    assert demo.timezone == "Asia/Shanghai"
    assert s["data"]["next_offset_change"] is None and s["origin"] == "diagnostic"
