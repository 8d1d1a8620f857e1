"""The one window rule (``queries.services.windows``, issue 40 item 4): the 24 h cap counts local
wall-clock hours of the project's zone, so the whole 25 h fall-back day and the whole 23 h
spring-forward day of America/New_York are one call of every series tool, while 25 elapsed hours on an
ordinary day are refused with ``LIMIT_EXCEEDED`` naming the rule and the zone; and every such answer
carries the zone beside its UTC window. The services run on the seeded demo with a scope on New York
time (the scope is what the services read the zone from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from contexts.errors import InvalidParameter, LimitExceeded
from contexts.models import Project
from contexts.scope import QueryScope
from queries.schemas.common import PageRequest, TimeWindow
from queries.schemas.history import ElementKey
from queries.services import analysis, baseline, history, ranking, scada
from queries.services.windows import local_length, local_window
from tests.queries.factories import service_scope
from tests.support.demo import DEMO

NEW_YORK = "America/New_York"
#: Local midnight to local midnight in New York: 2026-11-01 (EDT → EST, 25 h) and 2026-03-08 (EST → EDT, 23 h).
FALL_BACK = (datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 2, 5, tzinfo=UTC))
SPRING_FORWARD = (datetime(2026, 3, 8, 5, tzinfo=UTC), datetime(2026, 3, 9, 4, tzinfo=UTC))
#: 25 elapsed hours on an ordinary day (EST all through): 25 local hours.
ORDINARY_25H = (datetime(2026, 11, 2, 5, tzinfo=UTC), datetime(2026, 11, 3, 6, tzinfo=UTC))
BURST = "burst-20261101-0800"


# --- the rule itself ----------------------------------------------------------------------------------


def test_local_days_are_24_local_hours_across_dst() -> None:
    zone = ZoneInfo(NEW_YORK)
    for start, end in (FALL_BACK, SPRING_FORWARD):
        assert local_length(start, end, zone) == timedelta(hours=24)
    assert FALL_BACK[1] - FALL_BACK[0] == timedelta(hours=25)
    assert SPRING_FORWARD[1] - SPRING_FORWARD[0] == timedelta(hours=23)
    assert local_length(*ORDINARY_25H, zone) == timedelta(hours=25)


def test_local_window_accepts_the_dst_days_and_tags_the_zone() -> None:
    window = local_window(*FALL_BACK, timezone=NEW_YORK)
    assert window == TimeWindow(start=FALL_BACK[0], end=FALL_BACK[1], timezone=NEW_YORK)
    assert window.start.tzinfo is UTC
    assert local_window(*SPRING_FORWARD, timezone=NEW_YORK).timezone == NEW_YORK
    # On UTC the same 25 elapsed hours are 25 local hours: refused.
    with pytest.raises(LimitExceeded, match="24 h long in local hours .* UTC"):
        local_window(*FALL_BACK, timezone="UTC")


def test_local_window_refuses_25_hours_on_an_ordinary_day_naming_the_rule() -> None:
    with pytest.raises(LimitExceeded) as refused:
        local_window(*ORDINARY_25H, timezone=NEW_YORK)
    assert refused.value.code == "LIMIT_EXCEEDED"
    assert "at most 24 h long in local hours" in refused.value.message and NEW_YORK in refused.value.message
    assert refused.value.details == {"max_local_hours": 24, "timezone": NEW_YORK}


def test_local_window_bad_input() -> None:
    with pytest.raises(InvalidParameter, match="timezone offset"):
        local_window(datetime(2026, 11, 1), datetime(2026, 11, 2, tzinfo=UTC), timezone=NEW_YORK)
    with pytest.raises(InvalidParameter, match="later than start"):
        local_window(FALL_BACK[1], FALL_BACK[0], timezone=NEW_YORK)


# --- every series tool: one call per DST day ------------------------------------------------------------


def new_york_scope() -> QueryScope:
    project = Project.objects.get(slug=DEMO)
    scope = service_scope(project, {"scada.view", "simulation.view", "webgis.view"})
    return dataclasses.replace(scope, timezone=NEW_YORK)


def call_scada(scope: QueryScope, start: datetime, end: datetime) -> TimeWindow | None:
    return scada.query_scada_readings(
        scope=scope, device_ids=["PT-001"], start=start, end=end, field="cleaned_value"
    ).window


def call_baseline(scope: QueryScope, start: datetime, end: datetime) -> TimeWindow | None:
    return baseline.query_model_baseline_series(
        scope=scope, element_type="pipe", element_ids=["LINK-1523"], fields=["flow"], start=start, end=end
    ).window


def call_history(scope: QueryScope, start: datetime, end: datetime) -> TimeWindow | None:
    return history.query_element_history(
        scope=scope,
        elements=[ElementKey(element_type="pipe", element_id="LINK-1523")],
        start=start,
        end=end,
        mode="observed",
        page=PageRequest(limit=50, max_limit=500),
    ).window


def call_analysis(scope: QueryScope, start: datetime, end: datetime) -> TimeWindow | None:
    return analysis.query_analysis_series(
        scope=scope, run_id=BURST, element_type="pipe", element_id="LINK-1523", field="flow", start=start, end=end
    ).window


def call_ranking(scope: QueryScope, start: datetime, end: datetime) -> TimeWindow | None:
    return ranking.rank_scada_deviation(scope=scope, start=start, end=end, quantity="pressure").window


SERIES = [call_scada, call_baseline, call_history, call_analysis, call_ranking]
Call = Callable[[QueryScope, datetime, datetime], TimeWindow | None]


@pytest.mark.django_db
@pytest.mark.parametrize("call", SERIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("day", [FALL_BACK, SPRING_FORWARD], ids=["fall-back-25h", "spring-forward-23h"])
def test_a_whole_local_dst_day_is_one_call(demo_loaded: None, call: Call, day: tuple[datetime, datetime]) -> None:
    window = call(new_york_scope(), *day)
    assert window is not None
    assert (window.start, window.timezone) == (day[0], NEW_YORK)
    assert window.end <= day[1]  # SCADA may end its window where its readings end (``covered_end``)


@pytest.mark.django_db
@pytest.mark.parametrize("call", SERIES, ids=lambda c: c.__name__)
def test_25_elapsed_hours_on_an_ordinary_day_are_refused(demo_loaded: None, call: Call) -> None:
    with pytest.raises(LimitExceeded, match=f"at most 24 h long in local hours .* {NEW_YORK}"):
        call(new_york_scope(), *ORDINARY_25H)
