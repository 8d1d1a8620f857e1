"""A call's first tool statement sent in one round trip with its context resolution (issue 25).

R-CTX-3 re-reads the context binding on every call, so a one-statement tool makes two statements per call
where the bare SDK makes one, and waits for two round trips. When this process has resolved the call's
handle before, for the same token identity (``mcp_app.tenant_slots.TenantHints``), the tool's first
statement is built for the scope the handle resolved to then and sent in one pipeline right after the
resolution (``Execution.run_ahead``; a first step of statements ``Together`` — a page's count and rows —
all of them): one round trip instead of two, ≈ 90 µs less wall time and ≈ 27 µs
less CPU per call on this VM (``mcp_app/README.md`` "Measuring", eleventh session).

Nothing is decided from that earlier scope. The resolution's row is checked as on every call
(``check_context``, then the tool, permission and evidence checks), and the statement's rows are used only
when the scope resolved *now* equals the one the statement was built for — then the plan built from it is
the plan the call would build. Otherwise they are dropped and the call goes on as if none had been sent:
refused, or its plan built again for the resolved scope.

A statement is sent ahead only where it could have run at that point anyway:

- the tenant's in-flight slot is already this process's (an idle slot reused, no Redis round trip), and
  one of the process's tool slots is free — it is taken for the statement (R-PAGE-7 counts it);
- with the earlier scope the tool is callable (``contexts.access``), its arguments need no permission
  beyond it, and it saves no evidence (a task-purpose call claims its receipt before its query, R-EVID-1);
- the caller asked for no progress ("query started" is reported before the query starts);
- building the plan's first statement raised nothing, and it has SQL.

A statement sent for a context that turns out revoked (or changed) ran read-only, under that tenant's
slots, and its rows are dropped unreturned: a revoke refuses the very call that sees it, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contexts import access
from evidence.services import saves_evidence
from mcp_app.executor import NOT_STARTED, Execution, run_plan
from queries.fitting import InlineBudget
from queries.plan import Together
from tjwater import metrics

if TYPE_CHECKING:
    from contexts.scope import QueryScope
    from mcp_app.catalog import CatalogEntry
    from mcp_app.pool import CallConnection, QueryDatabase
    from mcp_app.statement_cache import Compiled, StatementCompiler
    from mcp_app.tenant_slots import EarlySlot
    from queries.plan import Plan


class Ahead:
    """A tool's first statement built for a handle's earlier scope, to be sent with the resolution.

    Holds one of the process's tool slots from its making until ``close`` or until the call takes it
    over (``hand_over``)."""

    __slots__ = ("db", "held", "scope", "plan", "first", "execution", "rows", "holds_tool_slot")

    def __init__(
        self,
        db: QueryDatabase,
        held: CallConnection,
        scope: QueryScope,
        plan: Plan[Any],
        first: list[Compiled],
    ) -> None:
        self.db = db
        self.held = held
        self.scope = scope
        self.plan = plan
        self.first = first  # the first step's statements: one, or those of a ``Together`` (two or more)
        self.execution: Execution | None = None
        self.rows: Any = NOT_STARTED  # the first statement's rows, or the error it met
        self.holds_tool_slot = True

    async def fetch(self, resolution: Compiled) -> Any:
        """The resolver's ``fetch``: the resolution and the first statement in one pipeline on the call's
        connection; returns the resolution's rows and keeps the statement's."""
        held = self.held
        if held.conn is None:
            held.conn = await self.db.checkout()
        self.execution = execution = Execution(held.conn, self.db)
        try:
            rows, rest = await execution.run_ahead(resolution, self.first)
            self.rows = rest if isinstance(rest, Exception) else tuple(rest) if len(rest) > 1 else rest[0]
        finally:
            held.conn = execution.conn  # the replacement, if the first one was found broken
        return rows

    def serves(self, scope: QueryScope) -> bool:
        """Whether the rows sent ahead are this call's: they came, for the scope resolved now."""
        return self.rows is not NOT_STARTED and scope == self.scope

    def hand_over(self) -> Execution:
        """The call takes over the tool slot and the execution (its connection is the call's held one)."""
        assert self.execution is not None
        self.holds_tool_slot = False
        metrics.STATEMENTS_AHEAD_USED.inc()
        return self.execution

    async def finish(self, execution: Execution, compiler: StatementCompiler) -> Any:
        """The plan, on from its first statement's rows (or that statement's error, raised now)."""
        rows = self.rows
        if isinstance(rows, Exception):
            self.plan.close()
            raise rows
        return await run_plan(self.plan, execution, compiler, first_rows=rows)

    def close(self) -> None:
        """Drop what was sent ahead (idempotent): the plan, and the tool slot unless the call took it."""
        self.plan.close()
        if self.holds_tool_slot:
            self.holds_tool_slot = False
            self.db.give_tool_slot()
            if self.execution is not None:  # it was sent
                metrics.STATEMENTS_AHEAD_DROPPED.inc()


async def plan_ahead(
    db: QueryDatabase,
    held: CallConnection,
    entry: CatalogEntry,
    args: dict[str, Any],
    early: EarlySlot | None,
    budget: InlineBudget,
) -> Ahead | None:
    """The call's first statement to send with its resolution, or None where it may not be (see the
    module). Takes a tool slot for it (free: without waiting)."""
    if early is None or early.scope is None or not early.ready() or not db.tool_slot_free():
        return None
    scope, spec = early.scope, entry.spec
    if saves_evidence(scope, spec) or not access.may_call(scope, tool=spec.name, permissions=spec.permissions):
        return None
    needs = spec.permissions_for(args)
    if needs is not spec.permissions and not access.holds_permissions(scope, needs):
        return None
    plan: Plan[Any] | None = None
    try:
        with budget:
            plan = spec.plan(scope, args)
            step = next(plan)
            first = [db.compiler.compile(s) for s in (step.statements if isinstance(step, Together) else (step,))]
    except Exception:  # noqa: BLE001 - the call builds its plan again after the resolution, and meets it there
        if plan is not None:
            plan.close()
        return None
    if any(compiled.shape is None for compiled in first):  # one sends no SQL: the plan runs as usual
        plan.close()
        return None
    await db.take_tool_slot()  # free (checked above, nothing awaited since): returns at once
    return Ahead(db, held, scope, plan, first)
