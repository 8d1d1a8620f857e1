"""The floor of a ``make bench`` scenario (issue 25): what its answer costs with nothing but psycopg.

A scenario's floor is its tool's SQL executed with psycopg alone plus serialising the same JSON with the
fastest serialiser at hand. "Its tool's SQL" is taken from the tool itself, never written again here:
``capture`` runs the tool's plan once through the very driver ``/mcp`` uses (``mcp_app.executor``:
``run_plan`` and ``StatementCompiler``) with a compiler that records each compiled statement, and shapes
the answer as the dispatcher does (``fit_inline``: the inline cap of R-PAGE-5). ``measure`` then runs
exactly those statements (SQL and parameters) on one sync psycopg connection — prepared as the server's
connections prepare them, in the same round trips (statements a plan yields ``Together`` in one
pipeline, as the driver sends them) — and serialises the captured answer, ``runs`` times; the floor is the median
of (statements + serialisation). No HTTP, no authentication, no context, no limiter, no Pydantic.

A call that saves evidence (a task-purpose call, R-EVID) writes too: its receipt is claimed before the query
and the snapshot saved after it, each in its own committed transaction. Its floor (``EvidenceSteps``) runs
those statements as well — ``_CLAIM_SQL`` before the query, the RFC 8785 text of the
result and ``_SAVE_SQL`` after it, with the product's own SQL and parameter builders
(``evidence.services``), on a writable autocommit connection — with a fresh request key and snapshot id each
run, as every call of the scenario has.

Runs in the bench process (``scripts/bench.py``) against the bench database, with Django set up only
to build the plan (the ORM compiles, it never executes here).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pydantic_core

#: Serialisers the floor may use; the fastest for each answer is taken (``orjson`` is not installed in
#: this project: ``json`` and the Rust ``pydantic_core.to_json`` — the one the server itself uses).
SERIALISERS: dict[str, Callable[[Any], Any]] = {"json": json.dumps, "pydantic_core": pydantic_core.to_json}


@dataclass
class Captured:
    """The statements one call of a tool ran (in order) and the answer it gave (the wire dict)."""

    statements: list[tuple[str, tuple[Any, ...]]]
    structured: dict[str, Any]
    #: How many of ``statements``, in order, the call sent in each round trip (a plan's ``Together`` is
    #: one pipeline, ``mcp_app.executor``); the floor sends them the same way.
    round_trips: list[int]
    #: For a call that saves evidence: the writes around its query.
    evidence: EvidenceSteps | None = None


@dataclass
class EvidenceSteps:
    """What a call that saves evidence writes around its query (``evidence.services.run_with_evidence``):
    ``prepare`` (the parameters' RFC 8785 text and hash), the claim (``_CLAIM_SQL``: the run check and the
    receipt), and after the query the result's RFC 8785 text saved by ``_SAVE_SQL``. ``writer``: a writable
    autocommit connection (each statement commits, as the call's do)."""

    scope: Any
    tool: Any
    arguments: dict[str, Any]
    data: dict[str, Any]  # the result as saved (``evidence.services.saved_document``)
    writer: psycopg.Connection[Any]
    cursor: psycopg.Cursor[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.cursor = self.writer.cursor()  # one for every run, as the server keeps one per connection

    def claim(self) -> Any:
        from evidence.services import _CLAIM_SQL, REQUEST_KEY_META, claim_params, prepare

        meta = {REQUEST_KEY_META: str(uuid.uuid4())}  # each call of the scenario has its own
        call = prepare(scope=self.scope, tool=self.tool, arguments=self.arguments, meta=meta)
        self.cursor.execute(_CLAIM_SQL, claim_params(call))
        row = self.cursor.fetchone()
        if row is None or row[3] is None:
            raise RuntimeError(f"the evidence floor's receipt was not claimed: {row}")
        call.receipt_id, call.attempt = row[3], row[4]
        return call

    def save(self, call: Any) -> None:
        from evidence.services import _SAVE_SQL, canonical_json, save_params

        body = canonical_json(self.data)
        self.cursor.execute(_SAVE_SQL, save_params(call, body, uuid.uuid4()))
        saved = self.cursor.fetchone()
        if saved is None or saved[3] is None:
            raise RuntimeError(f"the evidence floor's snapshot was not saved: {saved}")


@dataclass
class Floor:
    p50_ms: float
    sql_ms: float  # median of the statements alone
    json_ms: float  # median of the serialisation alone
    serialiser: str
    statements: int
    runs: int


class _Recorder:
    """A ``StatementCompiler`` stand-in for ``run_plan``: compiles with the real one, keeps what it ran;
    ``steps`` wraps the plan to keep which statements it yielded together."""

    def __init__(self, compiler: Any) -> None:
        self.compiler = compiler
        self.compiled: list[Any] = []
        self.sizes: list[int] = []  # statements per yield

    def compile(self, statement: Any) -> Any:
        compiled = self.compiler.compile(statement)
        self.compiled.append(compiled)
        return compiled

    def steps(self, plan: Any) -> Any:
        from queries.plan import Together

        try:
            step = next(plan)
            while True:
                self.sizes.append(len(step.statements) if isinstance(step, Together) else 1)
                step = plan.send((yield step))
        except StopIteration as stop:
            return stop.value
        finally:
            plan.close()

    def round_trips(self) -> tuple[list[tuple[str, tuple[Any, ...]]], list[int]]:
        """The statements with SQL, and how many of them each round trip sent (a statement that cannot
        match sends none)."""
        statements, trips, compiled = [], [], iter(self.compiled)
        for size in self.sizes:
            sent = [(c.sql, tuple(c.params)) for c in (next(compiled) for _ in range(size)) if c.shape is not None]
            statements.extend(sent)
            if sent:
                trips.append(len(sent))
        return statements, trips


def scope_for(
    project: str, subject: str, *, issuer: str | None = None, purpose: str = "ordinary_chat", **binding: Any
) -> Any:
    """The ``QueryScope`` a call of ``subject`` (of ``issuer``, when the database knows several) in
    ``project`` resolves to (its membership's permissions, the project's units; every tool allowed — the
    floor does not check access)."""
    from contexts.models import Membership
    from contexts.scope import QueryScope
    from queries.registry import all_tools

    memberships = Membership.objects.select_related("principal", "project")
    if issuer is not None:
        memberships = memberships.filter(principal__issuer=issuer)
    membership = memberships.get(project__slug=project, principal__subject=subject)
    p = membership.project
    return QueryScope(
        principal_id=membership.principal_id,
        issuer=membership.principal.issuer,
        subject=subject,
        client_id="bench-floor",
        project_id=p.id,
        project_slug=p.slug,
        permissions=frozenset(membership.permissions),
        purpose=purpose,
        allowed_tools=frozenset(t.name for t in all_tools()),
        unit_system=p.unit_system,
        quality_type=p.quality_type,
        headloss_formula=p.headloss_formula,
        **binding,
    )


def capture(
    tool: str, scope: Any, arguments: Mapping[str, Any], writer: psycopg.Connection[Any] | None = None
) -> Captured:
    """Run ``tool`` once through the MCP driver; the statements it sent and its inline answer — and, for a
    call that saves evidence, its writes (``EvidenceSteps``, on ``writer``)."""
    from django.conf import settings
    from jsonschema import Draft202012Validator
    from referencing import Registry

    from evidence.services import saves_evidence
    from mcp_app.executor import Execution, run_plan
    from mcp_app.inline import fit_inline, json_size
    from mcp_app.pool import QueryDatabase
    from queries.fitting import InlineBudget
    from queries.registry import all_tools

    spec = {t.name: t for t in all_tools()}[tool]

    async def run() -> tuple[Any, _Recorder]:
        db = QueryDatabase(size=1, budget_s=60, checkout_timeout_s=10, connect_timeout_s=5)
        await db.pool.open(wait=True)
        conn = await db.checkout()
        recorder = _Recorder(db.compiler)
        try:
            result = await run_plan(recorder.steps(spec.plan(scope, dict(arguments))), Execution(conn), recorder)
        finally:
            await db.give_back(conn)
            await db.close()
        return result, recorder

    max_bytes = settings.TJWATER_MCP_INLINE_MAX_BYTES
    # Under the inline budget the dispatcher gives a plain call (``queries.fitting``): the statements read
    # only the rows that can fit, as the call's do. A call that saves evidence saves its whole result.
    plain = not (spec.item_parts or saves_evidence(scope, spec))
    with InlineBudget(max_bytes if plain else None) as budget:
        result, compiled = asyncio.run(run())
    if budget.build_whole(json_size(result.model_dump(mode="json"))):
        result, compiled = asyncio.run(run())  # built whole, as the dispatcher then does
    validator = Draft202012Validator(spec.input_schema, registry=Registry())
    structured = fit_inline(
        result.model_dump(mode="json"),
        arguments,
        max_bytes,
        validator,
        item_parts=spec.item_parts,
        series_start=spec.series_start,
        page_holder=spec.page_holder,
    )
    # A statement that cannot match (an empty IN list) sends no SQL: nothing to replay.
    statements, round_trips = compiled.round_trips()
    evidence = None
    if saves_evidence(scope, spec):
        if writer is None:
            raise ValueError(f"{tool} saves evidence in this scope: its floor needs a writable connection")
        from evidence.services import saved_document

        evidence = EvidenceSteps(scope, spec, dict(arguments), saved_document(structured), writer)
    return Captured(statements, structured, round_trips, evidence)


def connect() -> psycopg.Connection[Any]:
    """A psycopg connection like the server's query connections: Django's parameters and loaders, PostGIS
    as text, read-only, and the server's ``prepare_threshold`` (so its statements are prepared, and
    planned, as the server's are)."""
    from psycopg.types import TypeInfo

    from mcp_app.pool import POSTGIS_TYPES, _connection_kwargs, register_query_loaders

    conn = psycopg.connect(**_connection_kwargs(60_000, 5))
    register_query_loaders(conn, [TypeInfo.fetch(conn, name) for name in POSTGIS_TYPES])
    return conn


def connect_writer() -> psycopg.Connection[Any]:
    """A writable autocommit psycopg connection with the server's ``prepare_threshold`` (for the evidence
    writes; ``connect`` gives a read-only one)."""
    from mcp_app.pool import _connection_kwargs

    params = _connection_kwargs(60_000, 5)
    params["options"] = params["options"].replace("-c default_transaction_read_only=on ", "")
    return psycopg.connect(**params)


def fastest_serialiser(structured: dict[str, Any], rounds: int = 20) -> tuple[str, Callable[[Any], Any]]:
    """The serialiser that writes this answer fastest (best of ``rounds`` each)."""
    best: tuple[float, str] | None = None
    for name, dump in SERIALISERS.items():
        timings = []
        for _ in range(rounds):
            started = time.perf_counter()
            dump(structured)
            timings.append(time.perf_counter() - started)
        if best is None or min(timings) < best[0]:
            best = (min(timings), name)
    assert best is not None
    return best[1], SERIALISERS[best[1]]


def _replay(conn: psycopg.Connection[Any], cursors: list[psycopg.Cursor[Any]], captured: Captured) -> None:
    """The captured statements, each round trip as the call sent it: alone, or several in one pipeline."""
    statements = iter(captured.statements)
    for size in captured.round_trips:
        if size == 1:
            sql, params = next(statements)
            cursors[0].execute(sql, params)
            if cursors[0].pgresult is not None and cursors[0].description is not None:
                cursors[0].fetchall()
            continue
        used = cursors[:size]
        with conn.pipeline():
            for cursor in used:
                sql, params = next(statements)
                cursor.execute(sql, params)
        for cursor in used:
            if cursor.pgresult is not None and cursor.description is not None:
                cursor.fetchall()


def measure(
    captured: Captured, conn: psycopg.Connection[Any], runs: int, warmup: int = 5, max_s: float = 15.0
) -> Floor:
    """Median cost of running the captured statements and serialising the captured answer, ``runs`` times
    (fewer, but at least 5, when they take longer than ``max_s`` together)."""
    name, dump = fastest_serialiser(captured.structured)
    cursors = [conn.cursor() for _ in range(max(captured.round_trips, default=1))]
    totals: list[float] = []
    sqls: list[float] = []
    jsons: list[float] = []
    deadline = time.monotonic() + max_s
    for i in range(warmup + runs):
        if len(totals) >= 5 and time.monotonic() > deadline:
            break
        started = time.perf_counter()
        call = captured.evidence.claim() if captured.evidence is not None else None
        _replay(conn, cursors, captured)
        if captured.evidence is not None:
            captured.evidence.save(call)
        queried = time.perf_counter()
        dump(captured.structured)
        done = time.perf_counter()
        if i >= warmup:
            totals.append(done - started)
            sqls.append(queried - started)
            jsons.append(done - queried)
    return Floor(
        p50_ms=statistics.median(totals) * 1000,
        sql_ms=statistics.median(sqls) * 1000,
        json_ms=statistics.median(jsons) * 1000,
        serialiser=name,
        statements=len(captured.statements),
        runs=len(totals),
    )
