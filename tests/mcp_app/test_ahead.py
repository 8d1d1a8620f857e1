"""A call's first tool statement sent in one round trip with its context resolution (``mcp_app.ahead``).

The real dispatch path in-process — the catalog, the Redis limiter, the query pool on PostgreSQL — with the
Net1 world's committed members. A handle this process resolved before sends the tool's first statement
with its resolution; the answer is the one the call gives without it, and nothing is decided from the
earlier scope: a context revoked meanwhile is refused, a changed scope has its plan built again, a statement
that runs out of budget or whose call is cancelled is stopped in PostgreSQL, and every slot comes back.
Which path a call took is read from ``tjwater_mcp_statements_ahead_total``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.utils import timezone
from mcp.shared.exceptions import MCPError
from prometheus_client import REGISTRY

from contexts.errors import InvalidParameter
from contexts.models import ContextEvent, Membership, Project, QueryContext
from contexts.selectors import hash_handle
from mcp_app.catalog import Catalog, build_catalog
from mcp_app.dispatch import Dispatcher
from mcp_app.limits import ConcurrencyLimiter
from mcp_app.pool import QueryDatabase
from queries.registry import all_tools
from tests.support import net1
from tests.support.net1 import SUBJECT_PREFIX, E2EProject

# No ``django_db`` mark: what the tests write must be committed for the query pool's connections to see it
# (``django_db_blocker.unblock``, as the Net1 world itself is written).

WHO = "frank"
PROPERTIES = {"element_type": "junction", "element_id": "10"}
PAGE = {"element_type": "junction", "limit": 5}


def ahead(outcome: str) -> float:
    return REGISTRY.get_sample_value("tjwater_mcp_statements_ahead_total", {"outcome": outcome}) or 0.0


def cancellations() -> float:
    return REGISTRY.get_sample_value("tjwater_mcp_statement_cancellations_total") or 0.0


@pytest.fixture
def context(e2e_project: E2EProject, django_db_blocker: Any) -> Iterator[str]:
    """A committed ordinary_chat context of ``WHO`` of its own (revoked or changed by the tests), deleted
    afterwards; the membership's permissions are restored."""
    with django_db_blocker.unblock():
        membership = Membership.objects.get(project_id=e2e_project.project_id, principal__subject=SUBJECT_PREFIX + WHO)
        permissions = list(membership.permissions)
        handle = net1.bind_context(WHO, "ahead-tests")
    yield handle
    with django_db_blocker.unblock():
        Membership.objects.filter(pk=membership.pk).update(permissions=permissions)
        context_row = QueryContext.objects.filter(handle_hash=hash_handle(handle))
        ContextEvent.objects.filter(context_id__in=context_row.values("pk")).delete()
        context_row.delete()


@asynccontextmanager
async def dispatcher(*, budget_s: float = 30, catalog: Catalog | None = None) -> AsyncIterator[Dispatcher]:
    # A long idle delay: a finished call's tenant slot stays this process's between the test's calls, as it
    # does between back-to-back calls under load (``RELEASE_DELAY_S``).
    limiter = ConcurrencyLimiter(settings.REDIS_URL, max_concurrent=4, lease_s=10, release_delay_s=30)
    db = QueryDatabase(size=4, budget_s=budget_s, checkout_timeout_s=5, connect_timeout_s=5)
    await db.open()
    try:
        yield Dispatcher(catalog or build_catalog(), limiter, db)
    finally:
        assert all([await db.take_tool_slot(wait_s=0) for _ in range(db.tool_slots)])  # every slot came back
        await limiter.aclose()
        await db.close()


async def call(d: Dispatcher, handle: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = await d.call_tool(
        token=net1.verified(WHO),
        name=name,
        arguments={"context_handle": handle, **arguments},
        session=None,
        progress=False,
    )
    if not isinstance(reply, dict):  # a refusal is a result model; a success its wire form
        reply = reply.model_dump(mode="json", by_alias=True)
    structured = dict(reply["structuredContent"])
    structured.pop("queried_at", None)
    return {"isError": reply["isError"], "structured": structured}


def test_a_handle_seen_before_sends_the_first_statement_with_its_resolution(context: str) -> None:
    async def main() -> list[dict[str, Any]]:
        async with dispatcher() as d:
            return [await call(d, context, name, args) for name, args in CALLS for _ in range(3)]

    CALLS = [("get_element_properties", PROPERTIES), ("list_elements", PAGE)]
    used, dropped = ahead("used"), ahead("dropped")
    replies = asyncio.run(main())
    # The first call of the handle has nothing to go on; every later one sends its first statement ahead
    # (list_elements' count, its page after it) and answers exactly what the first call answered.
    assert ahead("used") - used == 5 and ahead("dropped") == dropped
    assert not any(reply["isError"] for reply in replies)
    assert replies[0]["structured"]["data"]["element_id"] == "10"
    assert replies[1] == replies[0] and replies[2] == replies[0]
    assert len(replies[3]["structured"]["data"]["items"]) == 5
    assert replies[4] == replies[3] and replies[5] == replies[3]


def test_a_context_revoked_since_is_refused_and_what_was_sent_ahead_dropped(
    context: str, django_db_blocker: Any
) -> None:
    def revoke() -> None:
        with django_db_blocker.unblock():
            QueryContext.objects.filter(handle_hash=hash_handle(context)).update(revoked_at=timezone.now())

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with dispatcher() as d:
            first = await call(d, context, "get_element_properties", PROPERTIES)
            await asyncio.to_thread(revoke)
            return first, await call(d, context, "get_element_properties", PROPERTIES)

    dropped = ahead("dropped")
    first, refused = asyncio.run(main())
    assert first["isError"] is False
    assert refused["isError"] is True and refused["structured"]["code"] == "CONTEXT_REVOKED"
    assert "data" not in refused["structured"]
    assert ahead("dropped") - dropped == 1


def test_a_scope_changed_since_has_its_plan_built_again(
    context: str, e2e_project: E2EProject, django_db_blocker: Any
) -> None:
    def grant(permissions: list[str]) -> None:
        with django_db_blocker.unblock():
            Membership.objects.filter(
                project_id=e2e_project.project_id, principal__subject=SUBJECT_PREFIX + WHO
            ).update(permissions=permissions)

    def units(system: str) -> None:
        with django_db_blocker.unblock():
            Project.objects.filter(pk=e2e_project.project_id).update(unit_system=system)

    async def main() -> list[dict[str, Any]]:
        async with dispatcher() as d:
            replies = [await call(d, context, "get_element_properties", PROPERTIES)]
            await asyncio.to_thread(units, "US")  # the project's results are shown in US units now
            replies.append(await call(d, context, "get_element_properties", PROPERTIES))
            await asyncio.to_thread(units, "SI")
            await asyncio.to_thread(grant, ["scada.view"])  # the tool is no longer the caller's
            with pytest.raises(MCPError) as refused:
                await call(d, context, "get_element_properties", PROPERTIES)
            assert refused.value.error.code == -32602  # answered as an unknown tool
            await asyncio.to_thread(grant, ["webgis.view"])
            await asyncio.to_thread(units, "US")
        async with dispatcher() as fresh:  # a process that never saw the handle: nothing sent ahead
            replies.append(await call(fresh, context, "get_element_properties", PROPERTIES))
        return replies

    used, dropped = ahead("used"), ahead("dropped")
    try:
        before, changed, fresh = asyncio.run(main())
    finally:
        units("SI")
    # Answered by the plan built for the scope resolved now (US units), not the one sent ahead for SI.
    assert changed == fresh and changed != before
    assert changed["structured"]["data"]["element_id"] == before["structured"]["data"]["element_id"] == "10"
    # Both later calls of the first process sent their statement for the scope the handle had resolved to
    # before; neither used it.
    assert ahead("dropped") - dropped == 2 and ahead("used") == used


def test_a_statement_sent_ahead_is_stopped_by_the_budget_and_by_a_cancelled_call(context: str) -> None:
    async def running_sleeps() -> int:
        async with await psycopg.AsyncConnection.connect(**_dsn(), autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tjwater-mcp-query' "
                "AND state = 'active' AND query LIKE '%%pg_sleep%%'"
            )
            row = await cursor.fetchone()
            return int(row[0]) if row else 0

    async def main() -> tuple[dict[str, Any], int]:
        async with dispatcher(budget_s=1) as d:
            assert (await call(d, context, "test_slow_query", {"seconds": 0.01}))["isError"] is False
            timed_out = await call(d, context, "test_slow_query", {"seconds": 5})
            # Cancelled while its statement, sent ahead, sleeps in PostgreSQL: stopped there before the
            # cancellation goes on.
            cancelled = asyncio.ensure_future(call(d, context, "test_slow_query", {"seconds": 0.9}))
            await asyncio.sleep(0.3)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            return timed_out, await running_sleeps()

    used, dropped, stopped = ahead("used"), ahead("dropped"), cancellations()
    timed_out, still_running = asyncio.run(main())
    assert timed_out["isError"] is True and timed_out["structured"]["code"] == "QUERY_TIMEOUT"
    assert still_running == 0 and cancellations() - stopped == 1
    # The timed-out call used what it sent (its error); the cancelled one dropped it with the call.
    assert ahead("used") - used == 1 and ahead("dropped") - dropped == 1


def _dsn() -> dict[str, Any]:
    from django.db import connection

    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    return params


def test_the_pair_is_one_client_span_inside_the_resolution(context: str) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from tjwater import telemetry

    exporter = InMemorySpanExporter()
    telemetry.configure(exporter=exporter, batch=False)

    async def main() -> None:
        async with dispatcher() as d:
            for _ in range(2):
                assert (await call(d, context, "get_element_properties", PROPERTIES))["isError"] is False
            assert (await call(d, context, "list_elements", PAGE))["isError"] is False

    try:
        asyncio.run(main())
        finished = exporter.get_finished_spans()
    finally:
        telemetry.shutdown()
    resolves = [s for s in finished if s.name == "mcp.context.resolve"]
    children = [
        [c for c in finished if c.parent is not None and c.parent.span_id == r.context.span_id] for r in resolves
    ]
    # First call: the resolution alone, then the tool's statement; second call: both in one pipeline; a page
    # (its count and rows yielded together): the resolution and both.
    assert [[c.name for c in kids] for kids in children] == [["postgresql SELECT"]] + [["postgresql BATCH SELECT"]] * 2
    batch, page = children[1][0], children[2][0]
    assert batch.kind == SpanKind.CLIENT and batch.attributes["db.operation.batch.size"] == 2
    assert str(batch.attributes["db.query.text"]).count("%s") >= 2  # placeholders, never the values
    assert page.attributes["db.operation.batch.size"] == 3
    assert "COUNT(" in str(page.attributes["db.query.text"]).upper()
    # Nothing more was sent for the page: its call's only statement span is that batch.
    statements = [s for s in finished if s.kind == SpanKind.CLIENT and s.name.startswith("postgresql")]
    assert len(statements) == 1 + 1 + 1 + 1  # resolution, property; pair; triple
    assert context not in repr([dict(s.attributes) for s in finished])
    assert hash_handle(context) not in repr([dict(s.attributes) for s in finished])


def test_a_plan_that_refuses_while_being_built_is_refused_after_the_resolution(
    context: str, django_db_blocker: Any
) -> None:
    # get_element_properties as a tool whose plan refuses its arguments when it is made (before its first
    # statement): nothing is sent ahead, and the refusal comes only for a context that resolves.
    def refusing(scope: Any, arguments: Any) -> Any:
        raise InvalidParameter("element_id: refused while the plan is made")

    specs = [replace(spec, invoke=refusing) if spec.name == "get_element_properties" else spec for spec in all_tools()]

    def revoke() -> None:
        with django_db_blocker.unblock():
            QueryContext.objects.filter(handle_hash=hash_handle(context)).update(revoked_at=timezone.now())

    async def main() -> list[dict[str, Any]]:
        async with dispatcher(catalog=Catalog(specs)) as d:
            replies = [await call(d, context, "get_element_properties", PROPERTIES) for _ in range(2)]
            await asyncio.to_thread(revoke)
            replies.append(await call(d, context, "get_element_properties", PROPERTIES))
            return replies

    sent = ahead("used") + ahead("dropped")
    first, second, revoked = asyncio.run(main())
    assert first["structured"]["code"] == second["structured"]["code"] == "INVALID_PARAMETER"
    assert revoked["structured"]["code"] == "CONTEXT_REVOKED"
    assert ahead("used") + ahead("dropped") == sent
