"""The network services on Net1 (imported by the real importer), with pinned query counts."""

from __future__ import annotations

from pathlib import Path

import pytest
import wntr

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.models import Project
from contexts.scope import QueryScope
from queries.importer.epanet import import_network
from queries.schemas.common import PageRequest
from queries.services import network
from tests.queries.factories import service_scope

NET1 = Path(wntr.__file__).parent / "library" / "networks" / "Net1.inp"

pytestmark = pytest.mark.django_db


def scope_for(project: Project) -> QueryScope:
    return service_scope(project, {"webgis.view"}, subject="s")


@pytest.fixture
def net1() -> QueryScope:
    project = Project.objects.create(slug="net1", name="Net1")
    import_network(project=project, inp_path=NET1, baseline_hours=0)
    return scope_for(project)


@pytest.fixture
def other_project() -> QueryScope:
    return scope_for(Project.objects.create(slug="empty", name="Empty"))


def test_get_element_properties(net1: QueryScope, django_assert_num_queries) -> None:  # noqa: ANN001
    with django_assert_num_queries(1):
        result = network.get_element_properties(scope=net1, element_type="tank", element_id="2")
    props = result.data.properties
    assert props["elevation"] == pytest.approx(850 * 0.3048)
    assert -180 <= props["longitude"] <= 180 and -90 <= props["latitude"] <= 90
    assert result.units["max_level"] == "m"


def test_lookups_are_scoped_to_the_project(net1: QueryScope, other_project: QueryScope) -> None:
    with pytest.raises(NotFound):
        network.get_element_properties(scope=other_project, element_type="tank", element_id="2")
    assert network.list_elements(scope=other_project, element_type="pipe", page=PageRequest()).data.total == 0


def test_list_elements_pages_in_sql(net1: QueryScope, django_assert_num_queries) -> None:  # noqa: ANN001
    with django_assert_num_queries(2):  # count + one page
        result = network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4, offset=4))
    assert [i.element_id for i in result.data.items] == ["21", "22", "23", "31"]
    assert (result.data.total, result.data.has_more, result.page.has_more) == (9, True, True)


def test_a_collection_above_the_exact_count_threshold_has_no_total(
    net1: QueryScope,
    settings,  # noqa: ANN001
    django_assert_num_queries,  # noqa: ANN001
) -> None:
    """R-PAGE-1 / issue 25: Net1's 9 junctions with the threshold lowered to 5 — the total is null (never
    an estimate), ``has_more`` stays exact (one extra row read), still two queries; at the threshold
    the total is exact again."""
    settings.TJWATER_EXACT_TOTAL_MAX = 5
    pages = []
    with django_assert_num_queries(2) as queries:  # the capped count + one page (one row longer)
        pages.append(network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4)))
    count_sql = queries.captured_queries[0]["sql"]
    # The count reads at most threshold + 1 rows, along the page's order (its index path, not a seq scan).
    assert "COUNT(*)" in count_sql and "LIMIT 6" in count_sql
    assert 'ORDER BY "queries_junction"."element_id" ASC' in count_sql
    pages.append(network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4, offset=4)))
    pages.append(network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4, offset=8)))
    pages.append(network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=5, offset=4)))
    assert [(p.data.total, p.page.total if p.page else "-") for p in pages] == [(None, None)] * 4
    assert [len(p.data.items) for p in pages] == [4, 4, 1, 5]
    assert [p.data.has_more for p in pages] == [True, True, False, False]
    assert [p.page.has_more for p in pages if p.page] == [True, True, False, False]
    ids = [i.element_id for p in pages[:3] for i in p.data.items]
    assert len(ids) == len(set(ids)) == 9  # the pages still walk the whole collection, once

    settings.TJWATER_EXACT_TOTAL_MAX = 9
    exact = network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4))
    assert (exact.data.total, exact.data.has_more, len(exact.data.items)) == (9, True, 4)
    settings.TJWATER_EXACT_TOTAL_MAX = 8
    assert network.list_elements(scope=net1, element_type="junction", page=PageRequest(limit=4)).data.total is None


def test_page_bounds() -> None:
    with pytest.raises(LimitExceeded):
        PageRequest(limit=501)
    with pytest.raises(LimitExceeded):
        PageRequest(offset=10001)
    with pytest.raises(LimitExceeded):
        PageRequest(limit=0)


def test_network_options(net1: QueryScope, django_assert_num_queries) -> None:  # noqa: ANN001
    with django_assert_num_queries(1):
        result = network.get_network_options(scope=net1, kind="hydraulic")
    assert result.data.values["headloss"] == "H-W"
    with pytest.raises(InvalidParameter):
        network.get_network_options(scope=net1, kind="pump_energy")
    with pytest.raises(InvalidParameter):
        network.get_network_options(scope=net1, kind="time", pump_id="9")
    with pytest.raises(NotFound):
        network.get_network_options(scope=net1, kind="pump_energy", pump_id="99")


def test_network_schema(net1: QueryScope, django_assert_num_queries) -> None:  # noqa: ANN001
    with django_assert_num_queries(1):
        result = network.get_network_schema(scope=net1, kind="valve")
    assert "valve_type" in [p.name for p in result.data.properties]
