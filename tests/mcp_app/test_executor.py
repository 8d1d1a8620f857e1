"""The MCP hot path's async plan driver (``mcp_app.executor``) against ``run_sync``, for every registry tool.

Every tool of the registry declares example arguments (``ToolSpec.examples``, refused when empty), so a new
tool cannot skip the comparison silently. Each sample runs through ``run_sync`` (Django's
connection) and through the async driver twice — the first run compiles and learns the statement
shapes, the second binds values into the cached SQL — and the three outcomes must be identical: the
same result (``queried_at`` aside, it is the clock) or the same refusal. Real PostGIS, the demo data.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings

from contexts.errors import ApplicationError
from contexts.models import Membership
from contexts.scope import QueryScope
from mcp_app.executor import Execution, run_plan
from mcp_app.pool import QueryDatabase
from mcp_app.statement_cache import CompiledFactory, StatementCompiler, _Shape
from queries.plan import Together, run_sync
from queries.registry import all_tools

pytestmark = pytest.mark.django_db

DEMO = "tianjin-demo"
DAY = {"start": "2026-11-01T06:00:00Z", "end": "2026-11-01T09:00:00Z"}

#: tool name → its example arguments (``ToolSpec.examples``: declared with the tool, against the demo data;
#: refusals among them must match too).
SAMPLES: dict[str, list[dict[str, Any]]] = {t.name: [dict(a) for a in t.examples] for t in all_tools()}


def demo_scope() -> QueryScope:
    membership = Membership.objects.select_related("principal", "project").get(
        project__slug=DEMO, principal__subject="alice"
    )
    return QueryScope(
        principal_id=membership.principal_id,
        issuer=membership.principal.issuer,
        subject=membership.principal.subject,
        client_id="tjwater-agent-mcp",
        project_id=membership.project_id,
        project_slug=DEMO,
        permissions=frozenset(membership.permissions),
        purpose="ordinary_chat",
        allowed_tools=frozenset(t.name for t in all_tools()),
    )


def outcome(run: Any) -> tuple[str, Any]:
    try:
        result = run()
    except ApplicationError as exc:
        return "refused", (type(exc).__name__, exc.code, exc.message, exc.details)
    dumped = result.model_dump(mode="json")
    dumped.pop("queried_at", None)
    return "ok", dumped


async def outcome_async(db: QueryDatabase, plan: Any) -> tuple[str, Any]:
    conn = await db.checkout()
    try:
        result = await run_plan(plan, Execution(conn), db.compiler)
    except ApplicationError as exc:
        return "refused", (type(exc).__name__, exc.code, exc.message, exc.details)
    finally:
        await db.give_back(conn)
    dumped = result.model_dump(mode="json")
    dumped.pop("queried_at", None)
    return "ok", dumped


#: The test-only family's tool (``tests/support/extra_family``) is the simplest a tool can be: a plain
#: queryset, whose shape the driver caches (compiled once) but which the service builds on every call.
PLAIN = {"test_count_elements"}


def recording(plan: Any, yielded: list[str]) -> Any:
    """``plan`` as it runs, noting the kind of each statement it yields (``Bound``: a statement factory's)."""
    try:
        statement = next(plan)
        while True:
            parts = statement.statements if isinstance(statement, Together) else (statement,)
            yielded.extend(type(part).__name__ for part in parts)
            statement = plan.send((yield statement))
    except StopIteration as stop:
        return stop.value
    finally:
        plan.close()


def test_every_tool_gives_the_same_result_on_both_drivers(demo_loaded: None) -> None:
    scope = demo_scope()
    tools = {t.name: t for t in all_tools()}
    missing = sorted(set(tools) - set(SAMPLES))
    assert not missing, f"tools without sample arguments in tests/mcp_app/test_executor.py: {missing}"

    expected: list[tuple[str, dict[str, Any], tuple[str, Any]]] = []
    for name, samples in SAMPLES.items():
        if name not in tools:
            continue  # a sample for a tool that is not registered in these settings (none today)
        for args in samples:
            spec = tools[name]
            expected.append((name, args, outcome(lambda spec=spec, args=args: run_sync(spec.invoke(scope, args)))))

    async def run_async() -> tuple[list[tuple[str, Any]], StatementCompiler, set[str]]:
        db = QueryDatabase(size=2, budget_s=30, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            outcomes, compiled_again = [], set()
            for round_ in range(2):  # 1st: compile and learn the shapes; 2nd: cached SQL, re-bound values
                for name, args, _ in expected:
                    misses, yielded = db.compiler.misses, []
                    outcomes.append(await outcome_async(db, recording(tools[name].invoke(scope, args), yielded)))
                    built = [kind for kind in yielded if kind not in ("Bound", "Raw")] if name not in PLAIN else []
                    if round_ and (db.compiler.misses > misses or built):
                        compiled_again.add(name)
            return outcomes, db.compiler, compiled_again
        finally:
            await db.close()

    outcomes, compiler, compiled_again = asyncio.run(run_async())
    for round_outcomes in (outcomes[: len(expected)], outcomes[len(expected) :]):
        for (name, args, want), got in zip(expected, round_outcomes, strict=True):
            assert got == want, f"{name}({args}): async driver differs from run_sync"
    assert sum(1 for _, _, (kind, _) in expected if kind == "ok") >= len(SAMPLES) // 2
    assert compiler.hits > 0  # the second round ran on cached shapes
    # A statement built with the ORM on every call costs its build (0.1–0.3 ms), and compiled again its
    # compile too (0.5–2.5 ms: mcp_app/README.md "Measuring", tenth session): every statement of every
    # tool's examples is a proved statement factory (or constant SQL), bound the second time, not built.
    assert compiled_again == set(), "tools whose statements are built or compiled on every call"
    # Time-window statements (aware datetimes) are among the proved factories.
    factories = [f for f in compiler._factories.values() if isinstance(f, CompiledFactory)]
    assert any(datetime in factory.kinds for factory in factories)


def _bound_not_built(tool_name: str, calls: list[dict[str, Any]], *, items: bool = True) -> StatementCompiler:
    """Run ``calls`` of a tool through ``run_sync`` and twice through the async driver: the answers must be
    the same, and the second round must compile nothing (every statement bound from a proved shape or
    factory). The driver's compiler, for what it proved."""
    scope = demo_scope()
    tool = next(t for t in all_tools() if t.name == tool_name)
    expected = [outcome(lambda args=args: run_sync(tool.invoke(scope, args))) for args in calls]
    assert all(kind == "ok" and (got["data"]["items"] or not items) for kind, got in expected), expected

    async def run_async() -> tuple[list[list[tuple[str, Any]]], list[int], StatementCompiler]:
        db = QueryDatabase(size=2, budget_s=30, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            rounds, misses = [], []
            for _round in range(2):
                rounds.append([await outcome_async(db, tool.invoke(scope, args)) for args in calls])
                misses.append(db.compiler.misses)
            return rounds, misses, db.compiler
        finally:
            await db.close()

    rounds, misses, compiler = asyncio.run(run_async())
    assert rounds == [expected, expected]
    assert misses[1] == misses[0], "the second round compiled statements again"
    return compiler


def _proved(compiler: StatementCompiler, factory: Any) -> list[tuple[Any, ...]]:
    """The static arguments of ``factory``'s shapes the compiler proved; fails if one could not be."""
    keys = [key for key in compiler._factories if key[0] is factory]
    assert keys, f"{factory} was not used"
    assert all(isinstance(compiler._factories[key], CompiledFactory) for key in keys), f"{factory} is built per call"
    return [key[1] for key in keys]


def test_rankings_in_every_kind_of_area_are_bound_not_built(demo_loaded: None) -> None:
    """``rank_model_baseline``'s instant, count and page are statement factories (its area is a subquery the
    shape cache cannot key): for the whole type, a district and a circle the driver proves each factory's
    SQL once and afterwards only binds, with ``run_sync``'s answers. A polygon's statements (its feature is
    made in this test's transaction, which the driver's connection cannot see) are proved directly."""
    from queries.services.baseline import type_instants
    from queries.services.ranking import _ranked

    at = "2026-11-01T09:00:00Z"
    circle = {"center": [117.2, 39.1], "radius_m": 2000}
    compiler = _bound_not_built(
        "rank_model_baseline",
        [
            {"element_type": "junction", "field": "pressure", "time": at, "limit": 50},
            {"element_type": "junction", "field": "pressure", "time": at, "area": {"district": "Hexi"}},
            {"element_type": "pipe", "field": "flow", "time": at, "order": "desc", "area": circle},
        ],
    )
    _proved(compiler, type_instants)
    _proved(compiler, _ranked.count)
    assert {static[3] for static in _proved(compiler, _ranked.first)} == {"all", "district", "circle"}
    when = datetime.fromisoformat(at)
    project_id = demo_scope().project_id
    shape = ("junction", "head", "asc", "polygon")
    count = CompiledFactory(lambda *values: _ranked.count.fn(*shape, 10_001, *values), project_id, when, 7)
    first = CompiledFactory(lambda *values: _ranked.first.fn(*shape, *values, 11), project_id, when, 7)
    for polygon in (count, first):
        assert "ST_Intersects" in polygon.sql and polygon.bind(project_id, when, 8).params.count(8) == 1


def test_element_pages_are_bound_not_built(demo_loaded: None) -> None:
    """``list_elements``' count and page are statement factories, the page's offset and row count bound as
    values (a slice bound: proved with far positive sentinels, negative ones refused at bind as Django
    refuses them): first and later pages, nodes and links, with ``run_sync``'s answers."""
    from queries.services.network import _elements

    compiler = _bound_not_built(
        "list_elements",
        [
            {"element_type": "junction", "limit": 500},
            {"element_type": "junction", "limit": 20, "offset": 40},
            {"element_type": "pipe", "limit": 7, "offset": 3000},
            {"element_type": "tank", "limit": 20},
        ],
    )
    assert {static[0] for static in _proved(compiler, _elements.count)} == {"junction", "pipe", "tank"}
    assert {static[0] for static in _proved(compiler, _elements.first)} == {"junction", "tank"}
    assert {static[0] for static in _proved(compiler, _elements.at)} == {"junction", "pipe"}
    at = next(c for k, c in compiler._factories.items() if k[0] is _elements.at and k[1] == ("pipe",))
    assert isinstance(at, CompiledFactory) and at.non_negative
    assert at.bind(1, 3000, 8).params[-2:] == (8, 3000)  # LIMIT rows OFFSET offset
    with pytest.raises(ValueError):
        at.bind(1, -1, 8)


def test_baseline_field_pages_are_bound_not_built(demo_loaded: None) -> None:
    """``query_model_baseline_field``'s instant, count and page are statement factories: first and later
    pages, nodes and links, with ``run_sync``'s answers, nothing compiled on the second round."""
    from queries.services.baseline import _field_values, type_instants

    at = "2026-11-01T09:00:00Z"
    compiler = _bound_not_built(
        "query_model_baseline_field",
        [
            {"element_type": "junction", "field": "pressure", "time": at, "limit": 500},
            {"element_type": "junction", "field": "head", "time": at, "limit": 20, "offset": 100},
            {"element_type": "pipe", "field": "flow", "time": "2026-11-01T09:05:00Z", "limit": 30},
        ],
    )
    assert {static[0] for static in _proved(compiler, type_instants)} == {"junction", "pipe"}
    assert {static[:2] for static in _proved(compiler, _field_values.count)} == {
        ("junction", "pressure"), ("junction", "head"), ("pipe", "flow"),
    }  # fmt: skip
    assert set(_proved(compiler, _field_values.first)) == {("junction", "pressure"), ("pipe", "flow")}
    assert set(_proved(compiler, _field_values.at)) == {("junction", "head")}


def test_every_collection_is_bound_not_built(demo_loaded: None) -> None:
    """The other paged tools' collections (``queries.paging.collection``): each tool's declared examples
    through both drivers, nothing compiled on the second round, count and rows proved."""
    from queries.services import analysis, placement, scada

    for tool_name, rows in (
        ("list_scada_devices", scada._devices),
        ("list_analysis_runs", analysis._runs_newest_first),
        ("query_analysis_values", analysis._values_at),
        ("list_sensor_placement_runs", placement._runs_newest_first),
    ):
        calls = [args for args in SAMPLES[tool_name] if "offset" not in args] + [
            {**SAMPLES[tool_name][0], "offset": 1, "limit": 2}
        ]
        compiler = _bound_not_built(tool_name, calls, items=False)
        for factory in (rows.count, rows.first, rows.at):
            _proved(compiler, factory)


def test_nearby_pages_are_bound_not_built(demo_loaded: None) -> None:
    """``query_nearby_elements``: the point and radius are bound numbers (its GIS functions were built and
    compiled on every call): a first page, a later one and one past the end (its count)."""
    from queries.services.spatial import _nearby, _within_count

    centre = [117.2, 39.1]
    compiler = _bound_not_built(
        "query_nearby_elements",
        [
            {"center": centre, "radius_m": 300, "element_type": "junction", "limit": 20},
            {"center": centre, "radius_m": 300, "limit": 5, "offset": 5},
            {"center": centre, "radius_m": 300, "limit": 5, "offset": 5000},
        ],
        items=False,
    )
    assert {static for static in _proved(compiler, _nearby.first)} == {("junction",)}
    assert {static for static in _proved(compiler, _nearby.at)} == {("pipe",)}
    _proved(compiler, _within_count)


def test_cached_shapes_rebind_values_not_sql() -> None:
    """Two statements of one shape share SQL and differ in parameters only — including the page,
    which Django inlines as literals and the driver binds."""
    from queries.models import ELEMENT_MODELS

    compiler = StatementCompiler()
    pipe = ELEMENT_MODELS["pipe"]
    first = compiler.compile(pipe.objects.filter(project_id=1, element_id="A").values("element_id")[:5])
    second = compiler.compile(pipe.objects.filter(project_id=2, element_id="B").values("element_id")[:8])
    assert compiler.hits == 1 and second.sql == first.sql
    assert first.params == ("A", 1, 5) and second.params == ("B", 2, 8)
    paged = compiler.compile(pipe.objects.filter(project_id=2, element_id="B").values("element_id")[10:30])
    assert paged.params == ("B", 2, 20, 10) and paged.sql.endswith("LIMIT %s OFFSET %s")
    # A different structure (IS NULL instead of a value) is a different shape, never a re-bind.
    null = compiler.compile(pipe.objects.filter(project_id=2, tag__isnull=True).values("element_id")[:5])
    assert "IS NULL" in null.sql and null.params == (2, 5)


def test_time_window_shapes_rebind_their_instants() -> None:
    """A plain queryset over a time window (a tool written without a statement factory) is compiled once:
    its aware datetimes are values of its shape, re-bound on the next call."""
    from queries.models import ScadaReading

    compiler = StatementCompiler()
    t0, t1, t2 = (datetime.fromisoformat(f"2026-11-01T0{h}:00:00+00:00") for h in (6, 8, 9))
    first = compiler.compile(ScadaReading.objects.filter(device_id=1, time__gte=t0, time__lt=t1).values("time")[:5])
    second = compiler.compile(ScadaReading.objects.filter(device_id=2, time__gte=t1, time__lt=t2).values("time")[:5])
    assert compiler.misses == 1 and compiler.hits == 1 and second.sql == first.sql
    assert second.params == (2, t1, t2, 5)
    cached_keys = [key for key, shape in compiler._shapes.items() if isinstance(shape, _Shape)]
    assert any(isinstance(part, tuple) and len(part) == 2 and part[1] is datetime for k in cached_keys for part in k)


def test_plain_function_annotations_share_a_shape_and_value_ones_do_not() -> None:
    """``ST_X(geom)``/``ST_Y(geom)`` (``queries.coordinates``) have no values of their own: a page that
    reads them is one cached shape, re-bound per call. An annotation carrying a value is compiled on every
    call, and a different function is a different shape."""
    from django.db.models import F, FloatField, Func, Value

    from queries.coordinates import coordinates
    from queries.models import ELEMENT_MODELS

    junction = ELEMENT_MODELS["junction"]
    compiler = StatementCompiler()
    page = junction.objects.order_by("element_id").values("element_id", **coordinates())
    first = compiler.compile(page.filter(project_id=1)[:5])
    second = compiler.compile(page.filter(project_id=2)[:8])
    assert compiler.hits == 1 and second.sql == first.sql
    assert 'ST_X("queries_junction"."geom")' in first.sql and 'ST_Y("queries_junction"."geom")' in first.sql
    assert first.params == (1, 5) and second.params == (2, 8)
    other = {"longitude": Func(F("geom"), function="ST_Z", output_field=FloatField())}
    z = compiler.compile(junction.objects.filter(project_id=3).values("element_id", **other)[:5])
    assert "ST_Z(" in z.sql and compiler.hits == 1
    valued = {"x": Func(F("geom"), Value(3), function="ST_Buffer", output_field=FloatField())}
    for project_id in (4, 5):
        compiled = compiler.compile(junction.objects.filter(project_id=project_id).values("element_id", **valued)[:5])
        assert compiled.params == (3, project_id, 5)
    assert compiler.hits == 1


def test_template_refuses_a_factory_whose_sql_depends_on_its_arguments() -> None:
    from queries.models import ELEMENT_MODELS

    pipe = ELEMENT_MODELS["pipe"]
    template = CompiledFactory(lambda eid: pipe.objects.filter(element_id=eid).values("element_id")[:1], "x")
    assert template.bind("LINK-1").params == ("LINK-1", 1)
    with pytest.raises(ValueError):
        CompiledFactory(lambda eid: pipe.objects.filter(element_id=eid or None).values("element_id")[:1], "")
    with pytest.raises(TypeError):
        template.bind(5)


def test_template_refuses_factories_that_clamp_or_branch_on_a_value() -> None:
    """Issue 17 item 5: two deliberately bad factories that the earlier proof accepted. A clamp first
    called with its bound (100) compiled ``LIMIT 100`` for the example and both (large) sentinel sets, so
    it was taken for a constant and ``bind(…, 5)`` sent ``LIMIT 100``; a factory that picks its column by
    a threshold bound the wrong column for small values."""
    from queries.models import ELEMENT_MODELS

    pipe = ELEMENT_MODELS["pipe"]

    def clamped(project_id: int, limit: int) -> Any:
        return pipe.objects.filter(project_id=project_id).values("element_id")[: min(limit, 100)]

    def by_threshold(project_id: int, value: int) -> Any:
        column = "length" if value > 1000 else "diameter"
        return pipe.objects.filter(project_id=project_id, **{f"{column}__gte": value}).values("element_id")[:5]

    for factory, example in ((clamped, (1, 100)), (clamped, (7, 250)), (by_threshold, (1, 5000))):
        with pytest.raises(ValueError):
            CompiledFactory(factory, *example)
    # A factory that follows the rules stays a template, even when a constant (LIMIT 1) equals an argument.
    honest = CompiledFactory(
        lambda pid, eid: pipe.objects.filter(project_id=pid, element_id=eid).values("element_id")[:1], 1, "L"
    )
    assert honest.bind(5, "LINK-9").params == ("LINK-9", 5, 1)


def test_a_prepared_statement_is_built_once_per_shape_and_then_only_bound() -> None:
    from queries.models import ELEMENT_MODELS
    from queries.plan import execute_sync, statement_factory

    built: list[tuple[Any, ...]] = []

    @statement_factory(static=1)
    def row(element_type: str, project_id: int, element_id: str) -> Any:
        built.append((element_type, project_id, element_id))
        return (
            ELEMENT_MODELS[element_type]
            .objects.filter(project_id=project_id, element_id=element_id)
            .values("element_id")[:1]
        )

    compiler = StatementCompiler()
    # Project 1 and the constant LIMIT 1 are the same value: still a template (two sentinel compiles tell
    # an argument from a constant).
    first = compiler.compile(row("pipe", 1, "LINK-1"))
    builds = len(built)  # the example and the two sentinel sets
    second = compiler.compile(row("pipe", 2, "LINK-7"))
    assert len(built) == builds  # no ORM work for the second call
    assert first.sql == second.sql and second.params == ("LINK-7", 2, 1)  # in the SQL's order
    other = compiler.compile(row("junction", 2, "J-1"))  # another static argument: another shape
    assert len(built) > builds and other.sql != first.sql

    # A factory that is not a template is built and compiled on every call, still correct.
    @statement_factory
    def nullable(element_id: str) -> Any:
        built.append(("nullable", element_id))
        return ELEMENT_MODELS["pipe"].objects.filter(element_id=element_id or None).values("element_id")[:1]

    before = len(built)
    assert "IS NULL" in compiler.compile(nullable("")).sql
    assert "IS NULL" not in compiler.compile(nullable("x")).sql
    assert len(built) > before + 1
    # Django's driver builds it like any queryset and runs it.
    assert execute_sync(row("pipe", -1, "none")) == []


def test_query_connections_are_read_only_with_the_budget() -> None:
    async def probe() -> list[Any]:
        db = QueryDatabase(size=1, budget_s=7, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            try:
                cur = await conn.execute("SHOW default_transaction_read_only")
                read_only = (await cur.fetchone())[0]
                cur = await conn.execute("SHOW statement_timeout")
                timeout = (await cur.fetchone())[0]
                return [read_only, timeout, conn.autocommit]
            finally:
                await db.give_back(conn)
        finally:
            await db.close()

    assert asyncio.run(probe()) == ["on", "7s", True]
    assert settings.TJWATER_MCP_DB_POOL_SIZE >= 4


def test_query_connections_load_timestamps_as_django_does_without_its_python_loader() -> None:
    """UTC timestamps load with psycopg's C loader (``pool.register_utc_timestamps``): the same instants,
    with the very ``tzinfo`` Django's loader sets, for any offset they were written with."""
    from django.db import connection
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader
    from psycopg.pq import Format

    sql = (
        "SELECT '2026-11-01T08:00:00.123456+08'::timestamptz, '1999-12-31T23:59:59-05:30'::timestamptz, "
        "'2026-03-29T01:30:00Z'::timestamptz, NULL::timestamptz"
    )

    async def probe() -> tuple[Any, type]:
        db = QueryDatabase(size=1, budget_s=7, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            try:
                loader = conn.adapters.get_loader(conn.adapters.types["timestamptz"].oid, Format.TEXT)
                cur = await conn.execute(sql)
                return await cur.fetchone(), loader
            finally:
                await db.give_back(conn)
        finally:
            await db.close()

    row, loader = asyncio.run(probe())
    assert loader is not None and not issubclass(loader, BaseTzLoader)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        django_row = cursor.fetchone()
    assert tuple(row) == django_row
    assert all(value.tzinfo is UTC for value in (*row[:3], *django_row[:3])) and row[3] is None


def test_a_cancelled_call_stops_its_statement_and_starts_no_other() -> None:
    """Issue 9 item 6: cancelling the call (as the SDK does when the client goes away: a level-triggered
    anyio cancel scope) cancels the running statement in PostgreSQL, waits until it has stopped, and
    the plan's next statement never starts."""
    import anyio

    from queries.plan import Raw

    reached_second = []

    def plan() -> Any:
        yield Raw("SELECT pg_sleep(30)")
        reached_second.append(True)
        yield Raw("SELECT 1", (), ("one",))
        return None

    async def run() -> tuple[Execution, int]:
        db = QueryDatabase(size=2, budget_s=60, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            execution = Execution(conn)
            try:
                with anyio.move_on_after(1.0):
                    await run_plan(plan(), execution, db.compiler)
            finally:
                await db.give_back(conn)
            # The statement has stopped before the cancellation finished unwinding: nothing sleeps.
            probe = await db.checkout()
            try:
                cur = await probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                    " AND query LIKE 'SELECT pg_sleep(30)%%' AND application_name = 'tjwater-mcp-query'"
                )
                active = (await cur.fetchone())[0]
            finally:
                await db.give_back(probe)
            return execution, active
        finally:
            await db.close()

    execution, active = asyncio.run(run())
    assert execution.cancelled and execution.cancel_sent
    assert reached_second == []
    assert active == 0


def deadline_stops() -> float:
    """Statements stopped in PostgreSQL because the call's budget ran out (the metric)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("tjwater_mcp_statement_deadline_stops_total") or 0.0


def _sleeps(count: int, seconds: float) -> Any:
    from queries.plan import Raw

    for _ in range(count):
        yield Raw("SELECT pg_sleep(%s)", (seconds,))
    return count


def test_the_query_budget_is_the_whole_calls_not_each_statements() -> None:
    """Issue 23 item 12: a four-statement plan may not hold the database for four budgets. Four 0.45 s
    statements under a 1 s budget: each alone fits, together they do not — the third is stopped in
    PostgreSQL when the budget runs out at 1 s (QUERY_TIMEOUT; left to run it would end at 1.35 s; the
    stop is counted), and the session's timeout was never changed (issue 25: no ``set_config``/``RESET``
    round trips)."""
    from queries.errors import QueryTimeout

    stops = deadline_stops

    async def run() -> tuple[float, str, int]:
        db = QueryDatabase(size=1, budget_s=1, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            started = time.monotonic()
            try:
                with pytest.raises(QueryTimeout):
                    await run_plan(_sleeps(4, 0.45), Execution(conn, db), db.compiler)
                elapsed = time.monotonic() - started
            finally:
                await db.give_back(conn)
            conn = await db.checkout()
            try:
                cur = await conn.execute("SHOW statement_timeout")
                restored = (await cur.fetchone())[0]
                # Within the budget the same kind of plan still runs to the end.
                done = await run_plan(_sleeps(2, 0.1), Execution(conn, db), db.compiler)
            finally:
                await db.give_back(conn)
            return elapsed, restored, done
        finally:
            await db.close()

    before = stops()
    elapsed, restored, done = asyncio.run(run())
    assert 0.95 < elapsed < 1.25
    assert restored == "1s"
    assert done == 2
    assert stops() == before + 1


def _stamps() -> Any:
    """Two statements yielded together, each reading its transaction's start time, then a third alone."""
    from queries.plan import Raw

    first, second = yield Together(
        Raw("SELECT transaction_timestamp()", (), ("at",)), Raw("SELECT transaction_timestamp(), 2", (), ("at", "n"))
    )
    (after,) = yield Raw("SELECT transaction_timestamp()", (), ("at",))
    return first[0]["at"], second[0]["at"], second[0]["n"], after["at"]


def test_statements_yielded_together_go_in_one_round_trip_on_the_mcp_driver() -> None:
    """Issue 25: a plan's ``Together`` (a page's count and rows) is one pipeline on the MCP driver — one
    implicit transaction, so both statements see the same transaction start — while ``run_sync`` runs
    them one after the other in autocommit; the plan gets a tuple in order either way, and the
    statement after it runs on its own."""

    async def run() -> tuple[Any, ...]:
        db = QueryDatabase(size=1, budget_s=30, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            try:
                return await run_plan(_stamps(), Execution(conn, db), db.compiler)  # type: ignore[no-any-return]
            finally:
                await db.give_back(conn)
        finally:
            await db.close()

    first, second, n, after = asyncio.run(run())
    assert n == 2
    assert first == second  # one transaction: sent in one round trip with one Sync
    assert after > second  # the next step is a statement of its own
    assert run_sync(_stamps())[2] == 2  # run_sync runs them one by one and gives the same tuple


def test_statements_together_are_one_statement_for_the_budget_and_the_cancel() -> None:
    """A ``Together`` is guarded as one statement: past what is left of the call's budget it is stopped
    in PostgreSQL (``QUERY_TIMEOUT``, counted), and a cancelled call cancels it and waits until it has
    stopped; a statement of it that cannot match sends no SQL and gives its empty rows."""
    import anyio

    from queries.errors import QueryTimeout
    from queries.models import Junction
    from queries.plan import Raw, count_of

    stops = deadline_stops

    def slow(seconds: float) -> Any:
        yield Raw("SELECT pg_sleep(0.3)")  # the rest runs under the 0.2 s left, before the session's 0.5 s
        yield Together(Raw("SELECT pg_sleep(%s)", (seconds,)), Raw("SELECT 2", (), ("two",)))
        return "done"

    def with_nothing_to_match() -> Any:
        nothing, two = yield Together(count_of(Junction.objects.filter(pk__in=[])), Raw("SELECT 2", (), ("two",)))
        return nothing, two

    async def run() -> tuple[float, Any, int, Any]:
        db = QueryDatabase(size=2, budget_s=0.5, checkout_timeout_s=5, connect_timeout_s=5)
        await db.pool.open(wait=True)
        try:
            conn = await db.checkout()
            started = time.monotonic()
            try:
                with pytest.raises(QueryTimeout):
                    await run_plan(slow(5), Execution(conn, db), db.compiler)
                elapsed = time.monotonic() - started
                execution = Execution(conn, db, budget_s=60)
                with anyio.move_on_after(0.5):
                    await run_plan(slow(30), execution, db.compiler)
                cur = await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                    " AND query LIKE 'SELECT pg_sleep%%' AND application_name = 'tjwater-mcp-query'"
                )
                active = (await cur.fetchone())[0]
                partly = await run_plan(with_nothing_to_match(), Execution(conn, db), db.compiler)
            finally:
                await db.give_back(conn)
            return elapsed, execution, active, partly
        finally:
            await db.close()

    before = stops()
    elapsed, execution, active, partly = asyncio.run(run())
    assert 0.45 < elapsed < 1.5  # stopped at the budget, not after the 5 s sleep
    assert stops() == before + 1
    assert execution.cancelled and execution.cancel_sent and active == 0
    assert partly == (0, [{"two": 2}])
