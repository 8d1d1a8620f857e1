"""The one dispatch path every tool call goes through (STYLE "thin edges"), all on the event loop.

authenticate (done by the HTTP layer) → find the tool in the catalog → validate the arguments against
its wire schema (and as text: no lone surrogates, no NUL) → resolve the ``QueryScope`` from the context
handle (one statement on the MCP query pool, then ``contexts.selectors.check_context``; R-CTX-3, never
cached) → check the caller may use the tool → take a process query slot (``QueryDatabase.tool_slots``;
full → ``RATE_LIMITED`` at once) → take the tenant's in-flight slot in Redis (``limits``; over →
``RATE_LIMITED`` at once) → check out a pooled connection → run the service's plan with the async driver
(``executor``; cancellable down to PostgreSQL, statement timeout = the query budget) → give back the
connection, then the slot (both shielded: a cancelled call keeps its slot until its statement has
really stopped) → shape the result (envelope, inline size cap) → one log line. A task-purpose call of a
tool that saves evidence runs its plan inside ``evidence.services.run_with_evidence`` instead (R-EVID-1..3:
the receipt claimed before the query, keyed by ``_meta["cn.tjwater/requestKey"]``; the snapshot saved
before the result is returned; its reply is ``evidence_call_result``).

No worker thread and no Django connection handling per call: 2 PostgreSQL statements (resolve, query) —
in one round trip when the tool's first statement is sent with the resolution (``mcp_app.ahead``) — and at
most 1 Redis round trip (the acquire; none when the tenant's idle slot is reused) per one-statement tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from jsonschema.exceptions import ValidationError as SchemaValidationError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from referencing.exceptions import Unresolvable

from contexts import access
from contexts.errors import ApplicationError, ContextInvalid, InvalidParameter, RateLimited, ToolNotInContext
from contexts.scope import QueryScope
from contexts.tokens import VerifiedToken
from evidence.errors import RequestKeyRequired
from evidence.services import run_with_evidence, saves_evidence
from mcp_app.actions import call_action
from mcp_app.ahead import Ahead, plan_ahead
from mcp_app.catalog import Catalog, CatalogEntry
from mcp_app.errors import (
    application_error_result,
    internal_error_result,
    invalid_arguments,
    request_key_required,
    resource_internal_error,
    resource_refused,
    unknown_tool,
)
from mcp_app.executor import Execution, run_plan
from mcp_app.inline import as_returned, cut_summary, fit_inline, json_size
from mcp_app.limits import ConcurrencyLimiter
from mcp_app.pool import CallConnection, QueryDatabase
from mcp_app.resolver import RESOURCE_HANDLE_META_KEY, RESOURCE_HANDLE_MISSING, handle_key, resolve_scope_async
from mcp_app.resources import (
    check_cursor,
    evidence_call_result,
    list_evidence_resources,
    read_evidence_resource,
)
from mcp_app.task_records import JobTools
from mcp_app.tenant_slots import EarlySlot, TenantHints
from queries.arguments import bad_text_path
from queries.fitting import InlineBudget

logger = logging.getLogger("tjwater.mcp")
audit = logging.getLogger("tjwater.audit")


def _schema_error_detail(error: SchemaValidationError) -> str:
    """Where and which rule failed — never the offending value (it may be sensitive)."""
    path = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    if error.validator == "additionalProperties":
        return f"{path}: unexpected property"
    if error.validator == "required":
        return f"{path}: missing required property"
    return f"{path}: fails '{error.validator}'"


def validate_arguments(entry: CatalogEntry, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The wire check every tool's arguments pass (-32602 on failure): valid text first (issue 9 item 2:
    invalid text is the client's error, never a retryable server fault), then the input schema."""
    args = dict(arguments or {})
    bad = bad_text_path(args)
    if bad is not None:
        raise invalid_arguments(f"{bad or '(arguments)'}: not valid text")
    if entry.fast_check is not None and entry.fast_check(args):
        return args  # the compiled predicate accepts only what jsonschema accepts (mcp_app.schema_check)
    try:
        error = next(iter(sorted(entry.validator.iter_errors(args), key=lambda e: list(e.absolute_path))), None)
    except Unresolvable:
        raise invalid_arguments("schema reference cannot be resolved") from None
    if error is not None:
        raise invalid_arguments(_schema_error_detail(error))
    return args


def caller_may_use(entry: CatalogEntry, scope: QueryScope) -> bool:
    """R-TOOL-1: catalog ∩ the principal's permissions (now) ∩ the context's tools, decided by
    ``contexts.access`` (shared with every other edge). A binding with no tools allows none."""
    spec = entry.spec
    return access.may_call(scope, tool=spec.name, permissions=spec.permissions)


def _summary(entry: CatalogEntry, result: BaseModel, structured: dict[str, Any]) -> str:
    """The reply's text: the tool's summary of what the reply returns (``as_returned``), then the cut's."""
    spec = entry.spec
    returned = as_returned(result, structured, spec.page_holder, spec.series_start)
    return spec.summarize(returned) + cut_summary(structured)


def _row_count(structured: dict[str, Any]) -> int:
    data = structured.get("data")
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return len(data["items"])
    return 1


class _NotCallable(Exception):
    """The resolved caller may not use this tool (answered as an unknown tool)."""


class ServerBusy(RateLimited):
    """Every query slot of this process is taken: refused at once (R-PAGE-7), retryable."""


class Dispatcher:
    """Serves ``tools/call`` and ``resources/read`` for one process (catalog, limiter, query pool)."""

    def __init__(self, catalog: Catalog, limiter: ConcurrencyLimiter, db: QueryDatabase) -> None:
        self.catalog = catalog
        self.limiter = limiter
        self.db = db
        self.tenants = TenantHints()
        self.jobs = JobTools(catalog)  # the job-backed tools (MCP tasks: mcp_app.tasks_extension)

    async def call_tool(
        self,
        *,
        token: VerifiedToken,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: Any,
        progress: bool,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult | dict[str, Any]:
        entry = self.catalog.get(name)
        if entry is None:
            raise unknown_tool(name)
        args = validate_arguments(entry, arguments)
        if entry.spec.effect != "read":  # starts or stops a job: its own path (mcp_app.actions)
            job = self.jobs.offer(entry, meta)  # answered as an MCP task when the client declared them
            return await call_action(self.db, token=token, entry=entry, name=name, args=args, job=job)
        started = time.monotonic()
        call = _Call()
        outcome = "ok"
        rows = 0
        call_conn = self.db.call_connection()
        handle = args.get("context_handle")
        key = handle_key(handle)  # hashed once: the hints and the resolution both look it up by it
        # The tenant's Redis slot is asked for while PostgreSQL resolves the context (one round trip off
        # the critical path), when an earlier call of this handle *with this token identity* named the
        # tenant (``TenantHints``).
        early = self.tenants.early_acquire(self.limiter, key, token) if self.db.tool_slot_free() else None
        budget = InlineBudget(None if entry.spec.item_parts else settings.TJWATER_MCP_INLINE_MAX_BYTES)
        # With the tenant's slot already held, the tool's first statement goes with the resolution (one
        # round trip; its rows are used only if the scope resolved now is the one it was built for).
        ahead = None if progress else await plan_ahead(self.db, call_conn, entry, args, early, budget)
        try:
            try:
                scope = await resolve_scope_async(
                    token=token, handle=handle, fetch=call_conn.fetch if ahead is None else ahead.fetch, key=key
                )
            except BaseException:
                if early is not None:
                    await self._discard_slot(early)
                raise
            self.tenants.learn(key, scope)
            if ahead is not None and not ahead.serves(scope):
                ahead.close()
                ahead = None
            evidence = saves_evidence(scope, entry.spec)
            if early is not None and not early.serves(scope, evidence):
                await self._discard_slot(early)
                early = None
            call.scope = scope
            if not caller_may_use(entry, scope):
                if early is not None:
                    await self._discard_slot(early)
                raise _NotCallable
            needs = entry.spec.permissions_for(args)
            if needs is not entry.spec.permissions:
                access.require_permissions(scope, needs)  # what the arguments add: a business refusal
            if evidence:
                if "part" in args:
                    # The whole result is saved as evidence and read on with get_task_evidence.
                    raise InvalidParameter(
                        "part: an investigation saves the whole result as evidence; page it with get_task_evidence."
                    )
                # R-EVID-1..3: the receipt is claimed before the query, the snapshot saved before the
                # result is returned (an identical retry gets the saved snapshot, no new query).
                await call_conn.release()  # the evidence step runs in worker threads: no connection held meanwhile

                ran: list[BaseModel] = []  # the result as built, for the reply's summary (no re-validation)

                async def execute() -> dict[str, Any]:
                    ran.append(await self._run(call, entry, scope, args, session if progress else None))
                    return ran[-1].model_dump(mode="json")

                saved = await run_with_evidence(
                    scope=scope,
                    tool=entry.spec,
                    arguments=args,
                    meta=meta or {},
                    execute=execute,
                    required_permissions=needs,
                )
                reply = evidence_call_result(entry.spec, saved, result=ran[-1] if ran else None)
                rows = _row_count(reply.structured_content or {})
                return reply
            max_bytes = settings.TJWATER_MCP_INLINE_MAX_BYTES
            # A plain call's page is built only as far as it can be returned (``queries.fitting``); tools
            # whose items are read on with ``part`` need the whole page for that.
            with budget:
                result = await self._run(
                    call, entry, scope, args, session if progress else None, call_conn, early, ahead
                )
            dumped = result.model_dump(mode="json")
            size = json_size(dumped)  # measured once: the cut starts from it
            if budget.build_whole(size):
                # Presented, the items built fit after all (unit scaling shortened numbers): the page
                # has more than was built, so build it whole (rare; never a short page as if whole).
                result = await self._run(call, entry, scope, args, session if progress else None)
                dumped = result.model_dump(mode="json")
                size = json_size(dumped)
            structured = fit_inline(
                dumped,
                args,
                max_bytes,
                entry.checker,
                item_parts=entry.spec.item_parts,
                series_start=entry.spec.series_start,
                page_holder=entry.spec.page_holder,
                size=size,
            )
            rows = _row_count(structured)
            # The wire form of a CallToolResult, built once: the SDK's kernel validates it against the
            # protocol's result schema and dumps it (a model here would be validated and dumped twice more).
            return {
                "content": [{"type": "text", "text": _summary(entry, result, structured)}],
                "structuredContent": structured,
                "isError": False,
                "resultType": "complete",
            }
        except MCPError:
            raise
        except (_NotCallable, ToolNotInContext):
            outcome = "unknown_tool"
            raise unknown_tool(name) from None
        except RequestKeyRequired as exc:  # a protocol-level client error (R-EVID-2), not a result
            outcome = exc.code
            raise request_key_required(exc) from None
        except ApplicationError as exc:
            outcome = exc.code
            return application_error_result(exc)
        except asyncio.CancelledError:
            outcome = "cancelled"
            bound = call.scope
            audit.info(
                "mcp call cancelled backend_cancel_sent=%s principal=%s project=%s task=%s run=%s tool=%s",
                bool(call.execution and call.execution.cancel_sent),
                bound.principal_id if bound else "-",
                bound.project_id if bound else "-",
                _task_id(bound),
                _run_id(bound),
                name,
            )
            raise
        except Exception:
            outcome = "internal_error"
            # The traceback goes to the server log only (operators); the client gets a generic answer.
            logger.exception("mcp tool failed tool=%s", name)
            return internal_error_result()
        finally:
            if ahead is not None:
                ahead.close()  # a call refused after its resolution (no-op for one that ran it)
            if early is not None:
                await self._discard_slot(early)  # a path that neither used nor gave it back (no-op otherwise)
            await call_conn.release()
            bound = call.scope
            logger.info(
                "mcp call principal=%s project=%s task=%s run=%s tool=%s duration_ms=%.1f rows=%d outcome=%s",
                bound.principal_id if bound else "-",
                bound.project_slug if bound else "-",
                _task_id(bound),
                _run_id(bound),
                name,
                (time.monotonic() - started) * 1000,
                rows,
                outcome,
            )

    async def _run(
        self,
        call: _Call,
        entry: CatalogEntry,
        scope: QueryScope,
        args: dict[str, Any],
        session: Any | None,
        held: CallConnection | None = None,
        early: EarlySlot | None = None,
        ahead: Ahead | None = None,
    ) -> BaseModel:
        db = self.db
        if ahead is not None:
            # Sent with the resolution: the tool slot, the tenant's slot and the connection are held since.
            assert early is not None and held is not None
            early.settled = True
            conn, slot = held.take(), early.task.result()
            execution: Execution | None = ahead.hand_over()
        else:
            conn, slot = await self._take_slots(scope, held, early)
            execution = None
        try:
            try:
                if conn is None:
                    conn = await db.checkout()
                call.execution = execution = execution or Execution(conn, db)
                try:
                    if session is not None:
                        await session.report_progress(0, 1, "query started")
                    result: BaseModel
                    if ahead is not None:
                        result = await ahead.finish(execution, db.compiler)
                    else:
                        result = await run_plan(entry.spec.plan(scope, args), execution, db.compiler)
                    if session is not None:
                        await session.report_progress(1, 1, "query finished")
                    return result
                finally:
                    await db.give_back(execution.conn)  # a replacement if the first was found broken
            finally:
                # The statement has stopped and the connection is back: the slot goes now. A finished
                # call writes the release without waiting for the reply; a cancelled one waits for it.
                if call.execution is None or call.execution.cancelled or not self.limiter.release_soon(slot):
                    await self.limiter.release(slot)
        finally:
            db.give_tool_slot()

    async def _take_slots(
        self, scope: QueryScope, held: CallConnection | None, early: EarlySlot | None
    ) -> tuple[Any, Any]:
        """One of the process's tool slots (``ServerBusy`` when none frees in time), then the tenant's
        slot; returns the call's held connection when it could be kept (else None) and the tenant slot.
        On failure nothing is left held."""
        db = self.db
        conn = held.take() if held is not None and db.tool_slot_free() else None
        if conn is None and held is not None:
            await held.release()  # waiting for a slot holds no connection
        if not await db.take_tool_slot():
            if conn is not None:
                await db.give_back(conn)
            if early is not None:
                await self._discard_slot(early)
            raise ServerBusy("The server is at its query capacity; retry shortly.")
        try:
            if early is not None:
                early.settled = True
                slot = await early.task  # RateLimited / DataSourceUnavailable as from acquire
            else:
                slot = await self.limiter.acquire(scope.principal_id, scope.project_id)
        except BaseException:
            if conn is not None:
                await db.give_back(conn)
            db.give_tool_slot()
            raise
        return conn, slot

    async def _discard_slot(self, early: EarlySlot) -> None:
        """Give back a slot asked for early that the call will not use (waits for the answer, shielded)."""
        if early.settled:
            return
        early.settled = True
        with anyio.CancelScope(shield=True):
            try:
                slot = await early.task
            except BaseException:  # noqa: BLE001 - refused or failed: there is nothing to give back
                return
            if not self.limiter.release_soon(slot):
                await self.limiter.release(slot)

    async def resource_scope(self, *, token: VerifiedToken, meta: Mapping[str, Any] | None) -> QueryScope:
        """The scope of a resources request: the handle from ``_meta["cn.tjwater/contextHandle"]``,
        resolved like a call's (no tool)."""
        handle = (meta or {}).get(RESOURCE_HANDLE_META_KEY)
        if isinstance(handle, str) and bad_text_path(handle) is not None:
            raise ContextInvalid()  # invalid text can be no handle of ours
        return await resolve_scope_async(
            token=token, handle=handle, fetch=self.db.fetch, missing=RESOURCE_HANDLE_MISSING
        )

    async def list_resources(
        self, *, token: VerifiedToken, cursor: str | None, meta: Mapping[str, Any] | None
    ) -> types.ListResourcesResult:
        """``resources/list`` (R-EVID-4): the bound task's evidence, newest first. Without a context handle
        there is nothing to list (an empty, private page: generic clients list resources unprompted); a
        handle that fails is refused like a read (-32602 with the business code)."""
        if not (meta or {}).get(RESOURCE_HANDLE_META_KEY):
            return types.ListResourcesResult(resources=[], ttl_ms=0, cache_scope="private")
        check_cursor(cursor)  # the client's error before anything is held
        try:
            scope = await self.resource_scope(token=token, meta=meta)
            async with self.slots(scope):
                return await list_evidence_resources(scope, cursor)
        except ApplicationError as exc:
            raise resource_refused("", exc) from None

    @contextlib.asynccontextmanager
    async def slots(self, scope: QueryScope) -> AsyncIterator[None]:
        """The limits a ``tools/call`` runs under, for the resources methods (issue 17 item 8, R-PAGE-7):
        one of the process's tool slots (full → ``RATE_LIMITED`` after the same short wait), then the
        tenant's Redis slot (over → ``RATE_LIMITED``; Redis down → ``DATA_SOURCE_UNAVAILABLE``), held
        while the evidence is read and parsed in a worker thread (a thread that was started finishes
        before the slots go: anyio does not abandon it on cancellation)."""
        if not await self.db.take_tool_slot():
            raise ServerBusy("The server is at its query capacity; retry shortly.")
        try:
            slot = await self.limiter.acquire(scope.principal_id, scope.project_id)
            try:
                yield
            finally:
                if not self.limiter.release_soon(slot):
                    await self.limiter.release(slot)
        finally:
            self.db.give_tool_slot()

    async def read_resource(
        self, *, token: VerifiedToken, uri: str, meta: Mapping[str, Any] | None
    ) -> types.ReadResourceResult:
        """``resources/read`` (R-EVID-4, R-CTX-6): the context handle from
        ``_meta["cn.tjwater/contextHandle"]`` is resolved first (no tool); without a valid one the
        caller learns nothing about the resource. Then the evidence snapshot the URI names, if this
        context may read it (``mcp_app.resources``); anything else is "not found" (-32602, SEP-2164)."""
        started = time.monotonic()
        scope: QueryScope | None = None
        outcome = "not_found"
        try:
            scope = await self.resource_scope(token=token, meta=meta)
            async with self.slots(scope):
                read = await read_evidence_resource(scope, uri)
            outcome = "ok"
            return read
        except MCPError:
            raise
        except ApplicationError as exc:
            outcome = exc.code
            raise resource_refused(uri, exc) from None
        except Exception:
            outcome = "internal_error"
            logger.exception("mcp resource read failed")
            raise resource_internal_error() from None
        finally:
            logger.info(
                "mcp resource read principal=%s project=%s task=%s run=%s duration_ms=%.1f outcome=%s",
                scope.principal_id if scope else "-",
                scope.project_slug if scope else "-",
                _task_id(scope),
                _run_id(scope),
                (time.monotonic() - started) * 1000,
                outcome,
            )


def _task_id(scope: QueryScope | None) -> int | str:
    """The bound task of a call's log line (seed 001: logs keep principal, project, task, run, …); "-"
    for an unresolved call or a context without a task."""
    return scope.task_id if scope is not None and scope.task_id is not None else "-"


def _run_id(scope: QueryScope | None) -> int | str:
    return scope.run_id if scope is not None and scope.run_id is not None else "-"


class _Call:
    """What the event-loop side learns about a call while it runs (for the log and audit lines)."""

    __slots__ = ("scope", "execution")

    def __init__(self) -> None:
        self.scope: QueryScope | None = None
        self.execution: Execution | None = None
