"""A district that matches no element of the type asked for says so in ``data_gaps`` (issue 40 item 6),
instead of answering an empty list that reads as "nothing is low" — on the seeded demo, in the
test's own transaction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contexts.models import Project
from queries.models import ElementGisProperties
from queries.services import ranking
from tests.queries.factories import service_scope
from tests.support.demo import DEMO

pytestmark = [pytest.mark.django_db]

AT = datetime(2026, 11, 1, 9, tzinfo=UTC)
BREAK, NOON = datetime(2026, 11, 1, 8, tzinfo=UTC), datetime(2026, 11, 1, 12, tzinfo=UTC)


@pytest.fixture
def midtown(demo_loaded: None) -> Project:
    """Three of the demo's pipes moved into a district "Midtown" that has no junction and no device."""
    project = Project.objects.get(slug=DEMO)
    pks = list(
        ElementGisProperties.objects.filter(project=project, element_type="pipe").order_by("element_id")
        .values_list("pk", flat=True)[:3]
    )  # fmt: skip
    ElementGisProperties.objects.filter(pk__in=pks).update(district="Midtown")
    return project


def test_a_district_without_junctions_says_so(midtown: Project) -> None:
    scope = service_scope(midtown, {"scada.view", "simulation.view"})
    call = dict(scope=scope, field="pressure", time=AT, area={"district": "Midtown"})
    result = ranking.rank_model_baseline(element_type="junction", **call)  # type: ignore[arg-type]
    assert result.data.items == [] and result.data.total == 0
    assert [g.reason for g in result.data_gaps] == ["district Midtown links 3 pipes and no junction"]
    pipes = ranking.rank_model_baseline(  # the type it has: ranked, no gap
        scope=scope, element_type="pipe", field="flow", time=AT, area={"district": "Midtown"}
    )
    assert pipes.data.total == 3 and pipes.data_gaps == []


def test_a_district_without_devices_says_so(midtown: Project) -> None:
    scope = service_scope(midtown, {"scada.view", "simulation.view"})
    result = ranking.rank_scada_deviation(
        scope=scope, start=BREAK, end=NOON, quantity="pressure", area={"district": "Midtown"}
    )
    assert result.data.items == []
    assert [g.reason for g in result.data_gaps] == ["district Midtown links 3 pipes and no pressure device"]
    hexi = ranking.rank_scada_deviation(
        scope=scope, start=BREAK, end=NOON, quantity="pressure", area={"district": "Hexi"}
    )
    assert hexi.data.items and hexi.data_gaps == []
