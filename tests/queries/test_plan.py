"""``queries.plan`` with the sync driver on the test database: statements of every kind, the refusal of
an unbounded queryset, a call's budget spread over its statements, and statement factories. The MCP
driver runs the same plans (tests/mcp_app/test_executor.py compares both for every registry tool)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import transaction

from contexts.models import Project
from queries.errors import QueryTimeout
from queries.plan import (
    Bound,
    Plan,
    Raw,
    Together,
    count_of,
    raw_rows,
    remaining_ms,
    run_sync,
    service,
    statement_factory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def projects() -> list[Project]:
    return [Project.objects.create(slug=f"plan-{n}", name=f"Plan {n}") for n in range(3)]


def test_a_plan_gets_the_rows_of_each_kind_of_statement(projects: list[Project]) -> None:
    slugs = [p.slug for p in projects]

    def plan() -> Plan[tuple[Any, ...]]:
        counted = yield count_of(Project.objects.filter(slug__in=slugs))
        page = yield Project.objects.filter(slug__in=slugs).order_by("slug").values("slug")[:2]
        raw = yield Raw("SELECT slug FROM contexts_project WHERE slug = %s", [slugs[2]], columns=["slug"])
        return counted, [row["slug"] for row in page], raw

    assert run_sync(plan()) == (3, slugs[:2], [{"slug": slugs[2]}])


def test_an_unbounded_queryset_is_refused() -> None:
    def plan() -> Plan[Any]:
        return (yield Project.objects.all())

    with pytest.raises(ValueError, match="unbounded queryset"):
        run_sync(plan())


def test_raw_rows_without_columns_are_empty_dicts() -> None:
    assert raw_rows(Raw("SELECT pg_sleep(0)"), [("",), ("",)]) == [{}, {}]
    assert raw_rows(Raw("SELECT 1, 2", columns=["a", "b"]), [(1, 2)]) == [{"a": 1, "b": 2}]


def test_the_budget_is_the_whole_calls() -> None:
    """Every statement after the first runs with what is left of the budget: the second sleep, longer
    than what is left, is cancelled by PostgreSQL and answered ``QUERY_TIMEOUT``."""

    def plan() -> Plan[None]:
        yield Raw("SELECT pg_sleep(0.3)")
        yield Raw("SELECT pg_sleep(5)")

    started = time.monotonic()
    with pytest.raises(QueryTimeout), transaction.atomic():  # the failed statement aborts the transaction
        run_sync(plan(), budget_s=0.6)
    assert time.monotonic() - started < 3  # not the second sleep's 5 s


def test_statements_together_each_run_under_what_is_left() -> None:
    """``run_sync`` runs a ``Together`` one statement after the other, each under what is left of the budget
    (the second sleep of the pair is cancelled), and gives the plan a tuple in order."""

    def plan(second: float) -> Plan[Any]:
        return (yield Together(Raw("SELECT pg_sleep(0.3), 1", columns=["_", "one"]), Raw(f"SELECT pg_sleep({second})")))

    with transaction.atomic():
        assert run_sync(plan(0), budget_s=5) == ([{"_": "", "one": 1}], [{}])
    started = time.monotonic()
    with pytest.raises(QueryTimeout), transaction.atomic():
        run_sync(plan(5), budget_s=0.6)
    assert time.monotonic() - started < 3


def test_together_takes_two_or_more_plain_statements() -> None:
    with pytest.raises(TypeError):
        Together(Raw("SELECT 1"))
    with pytest.raises(TypeError):
        Together(Raw("SELECT 1"), Together(Raw("SELECT 2"), Raw("SELECT 3")))


def test_remaining_ms_is_at_least_one_and_refuses_when_nothing_is_left() -> None:
    assert 1 <= remaining_ms(time.monotonic() + 0.0005) <= 1
    assert 900 <= remaining_ms(time.monotonic() + 1) <= 1000
    with pytest.raises(QueryTimeout):
        remaining_ms(time.monotonic() - 0.001)


def test_a_statement_factory_binds_shape_and_values(projects: list[Project]) -> None:
    @statement_factory(static=1)
    def by_slug(field: str, slug: str) -> Any:
        return Project.objects.filter(slug=slug).values(field)[:1]

    bound = by_slug("name", projects[1].slug)
    assert isinstance(bound, Bound) and bound.args == ("name", projects[1].slug)
    assert list(bound.build()) == [{"name": "Plan 1"}]
    with pytest.raises(TypeError, match="shape argument"):
        by_slug()

    def plan() -> Plan[list[dict[str, Any]]]:
        return (yield by_slug("slug", projects[0].slug))

    assert run_sync(plan()) == [{"slug": projects[0].slug}]


def test_a_service_is_a_plain_function_and_a_plan(projects: list[Project]) -> None:
    @service
    def count_plans(*, prefix: str) -> Plan[int]:
        return (yield count_of(Project.objects.filter(slug__startswith=prefix)))

    assert count_plans(prefix="plan-") == 3
    assert run_sync(count_plans.plan(prefix="plan-1")) == 1
