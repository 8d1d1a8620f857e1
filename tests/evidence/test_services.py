"""The evidence flow of task-purpose calls (R-EVID-1..3), on committed rows with real threads, asyncio
tasks and database connections: exactly once under concurrency, key reuse, supersession mid-query,
a failure at commit, cancellation, ordinary chat, and the stale-receipt sweep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import anyio
import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from contexts.errors import RunNotCurrent, RunSuperseded
from contexts.models import TaskRun
from contexts.scope import QueryScope
from evidence.errors import EvidenceNotSaved, RequestKeyRequired, RequestKeyReused
from evidence.models import EvidenceSnapshot, QueryReceipt
from evidence.services import (
    _CLAIM_SQL,
    REQUEST_KEY_META,
    canonical_json,
    claim,
    claim_params,
    prepare,
    receipts_fail_stale,
    run_with_evidence,
)
from evidence.task_tools import DEMO_SAMPLE_SOURCE
from queries.plan import run_sync
from queries.registry import tool_spec, tools_by_name
from tests.evidence.factories import EvidenceWorld, Investigation, in_thread, run_evidence_call

HANDLE = "h" * 43  # never saved or hashed: only its presence in the arguments matters here
ELEMENT = {"context_handle": HANDLE, "element_type": "junction", "element_id": "JUNCTION-0"}


def query(
    scope: QueryScope, tool: str, arguments: dict[str, Any], *, runs: list[int], sleep_s: float = 0.0
) -> Callable[[], dict[str, Any]]:
    """The caller's ``execute``: the real registry service in a read-only transaction on this thread's
    connection (as the MCP worker runs it), optionally after ``pg_sleep``. ``runs`` counts executions."""

    def execute() -> dict[str, Any]:
        runs.append(1)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION READ ONLY")
                if sleep_s:
                    cursor.execute("SELECT pg_sleep(%s)", [sleep_s])
            result = run_sync(tools_by_name()[tool].invoke(scope, arguments))
        return result.model_dump(mode="json")

    return execute


def receipts(inv: Investigation) -> list[dict[str, Any]]:
    return list(QueryReceipt.objects.filter(task=inv.task).values("state", "attempt", "snapshot_id", "request_key"))


def snapshots(inv: Investigation) -> list[EvidenceSnapshot]:
    """The snapshots the test's calls saved (the demo task also holds the seeded DEMO sample)."""
    return list(EvidenceSnapshot.objects.filter(task=inv.task).exclude(source=DEMO_SAMPLE_SOURCE))


@pytest.fixture
def fresh(world: EvidenceWorld) -> Investigation:
    """An investigation of its own (committed; removed with the module's world)."""
    return world.investigation()


# --- exactly once ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_demo_evidence")
def test_fifty_concurrent_identical_calls_in_threads_save_once(world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=world.demo_task)
    runs: list[int] = []
    execute = query(scope, "get_element_properties", ELEMENT, runs=runs, sleep_s=0.3)
    start = threading.Barrier(50)

    def one(_: int) -> dict[str, Any]:
        start.wait()
        try:
            return run_evidence_call(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta={REQUEST_KEY_META: "threads-50"},
                execute=execute,
            )
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))

    assert len(runs) == 1  # one query; 49 callers got the saved snapshot
    (receipt,) = receipts(world.demo_task)
    (snapshot,) = snapshots(world.demo_task)
    assert receipt["state"] == "complete" and receipt["snapshot_id"] == snapshot.pk
    assert all(result == results[0] for result in results)
    assert results[0]["evidence_id"] == str(snapshot.pk)
    assert results[0]["evidence_uri"] == f"tjwater://evidence/{snapshot.pk}"
    assert results[0]["data"]["element_id"] == "JUNCTION-0"


@pytest.mark.usefixtures("clean_demo_evidence")
def test_fifty_concurrent_identical_async_calls_save_once(world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=world.demo_task)
    runs: list[int] = []
    execute = in_thread(query(scope, "get_element_properties", ELEMENT, runs=runs, sleep_s=0.3))
    results: list[dict[str, Any]] = []

    async def one() -> None:
        results.append(
            await run_with_evidence(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta={REQUEST_KEY_META: "async-50"},
                execute=execute,
            )
        )

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(one)

    anyio.run(main)
    assert len(runs) == 1
    assert len(results) == 50 and all(r == results[0] for r in results)
    (snapshot,) = snapshots(world.demo_task)
    assert [r["state"] for r in receipts(world.demo_task)] == ["complete"]
    assert results[0]["evidence_id"] == str(snapshot.pk)


def test_a_retry_with_the_same_key_returns_the_saved_snapshot_without_a_query(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []
    first = run_evidence_call(
        scope=scope,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta={REQUEST_KEY_META: "k1"},
        execute=query(scope, "get_element_properties", ELEMENT, runs=runs),
    )

    def must_not_run() -> dict[str, Any]:
        raise AssertionError("a retry with a saved receipt must not query again")

    # The retry carries a new context handle (contexts expire) but the same key and parameters.
    again = run_evidence_call(
        scope=scope,
        tool=tool_spec("get_element_properties"),
        arguments={**ELEMENT, "context_handle": "another-handle-0123456789"},
        meta={REQUEST_KEY_META: "k1"},
        execute=must_not_run,
    )
    assert again == first
    assert len(runs) == 1
    assert len(receipts(fresh)) == 1 and len(snapshots(fresh)) == 1


def test_the_same_key_with_other_parameters_or_tool_is_refused(fresh: Investigation, world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []
    meta = {REQUEST_KEY_META: "k-reuse"}
    run_evidence_call(
        scope=scope,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta=meta,
        execute=query(scope, "get_element_properties", ELEMENT, runs=runs),
    )
    other = {**ELEMENT, "element_id": "JUNCTION-1"}
    with pytest.raises(RequestKeyReused):
        run_evidence_call(
            scope=scope,
            tool=tool_spec("get_element_properties"),
            arguments=other,
            meta=meta,
            execute=query(scope, "get_element_properties", other, runs=runs),
        )
    schema_args = {"context_handle": HANDLE, "kind": "junction"}
    with pytest.raises(RequestKeyReused):
        run_evidence_call(
            scope=scope,
            tool=tool_spec("get_network_schema"),
            arguments=schema_args,
            meta=meta,
            execute=query(scope, "get_network_schema", schema_args, runs=runs),
        )
    assert len(runs) == 1
    assert [(r["state"], r["attempt"]) for r in receipts(fresh)] == [("complete", 1)]


def test_a_task_call_without_a_request_key_is_refused_before_anything_runs(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []
    for meta in (
        None,
        {},
        {REQUEST_KEY_META: ""},
        {REQUEST_KEY_META: 7},
        {REQUEST_KEY_META: "x" * 201},
        {REQUEST_KEY_META: "a\x00b"},
    ):
        with pytest.raises(RequestKeyRequired) as refused:
            run_evidence_call(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta=meta,
                execute=query(scope, "get_element_properties", ELEMENT, runs=runs),
            )
        assert refused.value.meta_key == "cn.tjwater/requestKey"
    assert runs == [] and receipts(fresh) == []


def test_parameters_are_saved_canonically_without_the_handle(fresh: Investigation, world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    result = run_evidence_call(
        scope=scope,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta={REQUEST_KEY_META: "k-canon"},
        execute=query(scope, "get_element_properties", ELEMENT, runs=[]),
    )
    snapshot = EvidenceSnapshot.objects.get(pk=result["evidence_id"])
    assert snapshot.params == {"element_type": "junction", "element_id": "JUNCTION-0"}
    assert HANDLE not in str(snapshot.params) and HANDLE not in str(snapshot.data)
    assert snapshot.origin == "system" and snapshot.source == "model_network"
    assert (snapshot.project_id, snapshot.task_id, snapshot.run_id) == (scope.project_id, fresh.task.pk, fresh.run.pk)
    # The digest is the SHA-256 of the RFC 8785 form of the stored document, as read back.
    import hashlib

    body = canonical_json(snapshot.data)
    assert snapshot.byte_size == len(body) and snapshot.sha256 == hashlib.sha256(body).hexdigest()
    assert "evidence_id" not in snapshot.data


def test_ordinary_chat_results_and_task_tools_are_never_saved(world: EvidenceWorld) -> None:
    chat = world.bind("ordinary_chat", subject="alice")
    before = EvidenceSnapshot.objects.count()
    runs: list[int] = []
    result = run_evidence_call(
        scope=chat,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta={REQUEST_KEY_META: "chat-key"},  # a client cannot make it evidence by sending a key
        execute=query(chat, "get_element_properties", ELEMENT, runs=runs),
    )
    assert result["evidence_id"] is None and len(runs) == 1
    task = world.bind("task_execution", investigation=world.demo_task)
    context = run_evidence_call(
        scope=task,
        tool=tool_spec("get_task_context"),
        arguments={"context_handle": HANDLE},
        meta=None,  # no key needed: the task tools save nothing
        execute=query(task, "get_task_context", {"context_handle": HANDLE}, runs=runs),
    )
    assert context["evidence_id"] is None
    assert EvidenceSnapshot.objects.count() == before


def test_a_reader_saves_evidence_to_its_parent_run(fresh: Investigation, world: EvidenceWorld) -> None:
    reader = world.bind("task_reader", investigation=fresh)
    result = run_evidence_call(
        scope=reader,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta={REQUEST_KEY_META: "reader-1"},
        execute=query(reader, "get_element_properties", ELEMENT, runs=[]),
    )
    snapshot = EvidenceSnapshot.objects.get(pk=result["evidence_id"])
    assert snapshot.run_id == fresh.run.pk
    assert QueryReceipt.objects.get(snapshot=snapshot).session_id == reader.session_id != fresh.session_id


# --- supersession, commit failure, cancellation -------------------------------------------------------


def _supersede(run: TaskRun) -> None:
    TaskRun.objects.filter(pk=run.pk).update(superseded_at=timezone.now(), status=TaskRun.Status.SUPERSEDED)
    TaskRun.objects.create(
        task_id=run.task_id,
        sequence=run.sequence + 1,
        owner_id=run.owner_id,
        lease_holder="evid-new-session",
        lease_expires_at=timezone.now() + timedelta(hours=1),
    )


def test_a_run_superseded_while_a_slow_query_runs_gets_nothing_written(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []

    def supersede_soon() -> None:
        try:
            time.sleep(0.4)  # the query below sleeps 1.5 s in PostgreSQL: this lands mid-query
            _supersede(fresh.run)
        finally:
            connection.close()

    other = threading.Thread(target=supersede_soon)
    other.start()
    try:
        with pytest.raises(RunSuperseded) as refused:
            run_evidence_call(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta={REQUEST_KEY_META: "slow"},
                execute=query(scope, "get_element_properties", ELEMENT, runs=runs, sleep_s=1.5),
            )
    finally:
        other.join()
    assert refused.value.code == "RUN_SUPERSEDED"
    assert len(runs) == 1  # the query did run
    assert snapshots(fresh) == []  # nothing for the old run, nothing for the new one
    assert [r["state"] for r in receipts(fresh)] == ["failed"]
    old = TaskRun.objects.get(pk=fresh.run.pk)
    assert old.superseded_at is not None and old.status == TaskRun.Status.SUPERSEDED  # not revived
    assert TaskRun.objects.filter(task=fresh.task, superseded_at__isnull=True).exclude(pk=old.pk).count() == 1


@pytest.mark.parametrize("change", ["superseded", "lease lapsed", "lease held by another session", "none"])
def test_the_claim_checks_the_run_and_takes_a_receipt_only_for_a_current_one(
    change: str, fresh: Investigation, world: EvidenceWorld
) -> None:
    """The claim is one statement: the run checks of ``check_context`` and the receipt, taken only
    when they pass — refused with the same errors, and nothing written."""
    scope = world.bind("task_execution", investigation=fresh)
    run = TaskRun.objects.filter(pk=fresh.run.pk)
    if change == "superseded":
        _supersede(fresh.run)
    elif change == "lease lapsed":
        run.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    elif change == "lease held by another session":
        run.update(lease_holder="evid-another-session")
    call = prepare(
        scope=scope, tool=tool_spec("get_element_properties"), arguments=ELEMENT, meta={REQUEST_KEY_META: change}
    )
    if change == "none":
        assert claim(call).kind == "run" and call.receipt_id is not None and call.attempt == 1
        assert [(r["state"], r["request_key"]) for r in receipts(fresh)] == [("pending", "none")]
        return
    with pytest.raises(RunSuperseded if change == "superseded" else RunNotCurrent):
        claim(call)
    assert receipts(fresh) == [] and call.receipt_id is None


def test_the_claims_commit_is_asynchronous_for_its_own_transaction_only(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    """``synchronous_commit`` is off inside the claim's transaction (its commit does not wait for the WAL
    flush) and as it was after it: the save on the same pooled connection commits synchronously."""
    scope = world.bind("task_execution", investigation=fresh)

    def setting() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    with connection.cursor() as cursor:  # whatever the server's default: on for this session
        cursor.execute("SET synchronous_commit = on")
    session_value = setting()
    assert session_value == "on"
    call = prepare(
        scope=scope, tool=tool_spec("get_element_properties"), arguments=ELEMENT, meta={REQUEST_KEY_META: "async"}
    )
    with transaction.atomic():  # the claim's statement, inside a transaction the test can look into
        with connection.cursor() as cursor:
            cursor.execute(_CLAIM_SQL, claim_params(call))
        assert setting() == "off"
        transaction.set_rollback(True)
    assert setting() == session_value
    try:
        assert claim(call).kind == "run"
        assert setting() == session_value
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")


@pytest.fixture
def fail_at_commit(fresh: Investigation) -> Iterator[Investigation]:
    """A deferred constraint trigger that fails the COMMIT of any snapshot of ``fresh``'s task: a real
    commit-time failure in PostgreSQL (the INSERT itself succeeds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION evid_test_fail_commit() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'refused at commit (test)' USING ERRCODE = 'check_violation'; END; $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE CONSTRAINT TRIGGER evid_test_fail_commit AFTER INSERT ON evidence_evidencesnapshot "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.task_id = {int(fresh.task.pk)}) "
            "EXECUTE FUNCTION evid_test_fail_commit()"
        )
    try:
        yield fresh
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS evid_test_fail_commit ON evidence_evidencesnapshot")
            cursor.execute("DROP FUNCTION IF EXISTS evid_test_fail_commit()")


def test_a_failure_at_commit_fails_the_call_and_a_retry_can_proceed(
    fail_at_commit: Investigation, world: EvidenceWorld
) -> None:
    inv = fail_at_commit
    scope = world.bind("task_execution", investigation=inv)
    runs: list[int] = []
    call = {
        "scope": scope,
        "tool": tool_spec("get_element_properties"),
        "arguments": ELEMENT,
        "meta": {REQUEST_KEY_META: "commit"},
        "execute": query(scope, "get_element_properties", ELEMENT, runs=runs),
    }
    with pytest.raises(EvidenceNotSaved) as failed:
        run_evidence_call(**call)
    assert failed.value.retryable is True
    assert snapshots(inv) == []
    assert [r["state"] for r in receipts(inv)] == ["failed"]

    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER evid_test_fail_commit ON evidence_evidencesnapshot")
    result = run_evidence_call(**call)  # the failed receipt is claimed again by the retry
    (snapshot,) = snapshots(inv)
    assert result["evidence_id"] == str(snapshot.pk) and len(runs) == 2
    assert [(r["state"], r["attempt"]) for r in receipts(inv)] == [("complete", 2)]


def test_a_call_cancelled_during_its_query_saves_nothing(fresh: Investigation, world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []

    async def never_finishes() -> dict[str, Any]:
        await anyio.sleep(30)
        raise AssertionError("cancelled before this")

    async def main() -> None:
        with anyio.move_on_after(0.3):  # the client went away mid-query
            await run_with_evidence(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta={REQUEST_KEY_META: "cancel"},
                execute=never_finishes,
            )
            raise AssertionError("the call must have been cancelled")

    anyio.run(main)
    assert snapshots(fresh) == []
    assert [r["state"] for r in receipts(fresh)] == ["failed"]
    retry = anyio.run(
        lambda: run_with_evidence(
            scope=scope,
            tool=tool_spec("get_element_properties"),
            arguments=ELEMENT,
            meta={REQUEST_KEY_META: "cancel"},
            execute=in_thread(query(scope, "get_element_properties", ELEMENT, runs=runs)),
        )
    )
    assert retry["evidence_id"] == str(snapshots(fresh)[0].pk) and len(runs) == 1


@pytest.fixture
def slow_commit(fresh: Investigation) -> Iterator[Investigation]:
    """A deferred constraint trigger that makes the COMMIT of ``fresh``'s snapshots take 0.6 s, so a
    cancellation can arrive while the evidence is being saved."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION evid_test_slow_commit() RETURNS trigger AS $$ BEGIN "
            "PERFORM pg_sleep(0.6); RETURN NULL; END; $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE CONSTRAINT TRIGGER evid_test_slow_commit AFTER INSERT ON evidence_evidencesnapshot "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.task_id = {int(fresh.task.pk)}) "
            "EXECUTE FUNCTION evid_test_slow_commit()"
        )
    try:
        yield fresh
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS evid_test_slow_commit ON evidence_evidencesnapshot")
            cursor.execute("DROP FUNCTION IF EXISTS evid_test_slow_commit()")


def test_a_disconnect_during_the_save_keeps_the_evidence_and_the_retry_gets_the_same_id(
    slow_commit: Investigation, world: EvidenceWorld
) -> None:
    inv = slow_commit
    scope = world.bind("task_execution", investigation=inv)
    runs: list[int] = []
    execute = in_thread(query(scope, "get_element_properties", ELEMENT, runs=runs))
    delivered: list[dict[str, Any]] = []

    async def first_call() -> None:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                delivered.append(
                    await run_with_evidence(
                        scope=scope,
                        tool=tool_spec("get_element_properties"),
                        arguments=ELEMENT,
                        meta={REQUEST_KEY_META: "disconnect"},
                        execute=execute,
                    )
                )

            group.start_soon(call)
            await anyio.sleep(0.4)  # the query is done; the save's commit is sleeping in PostgreSQL
            group.cancel_scope.cancel()  # the client disconnects: its response is lost

    anyio.run(first_call)
    (snapshot,) = snapshots(inv)  # saved: once the save started it was finished
    retry = run_evidence_call(
        scope=scope,
        tool=tool_spec("get_element_properties"),
        arguments=ELEMENT,
        meta={REQUEST_KEY_META: "disconnect"},
        execute=query(scope, "get_element_properties", ELEMENT, runs=runs),
    )
    assert retry["evidence_id"] == str(snapshot.pk)
    assert len(runs) == 1 and len(receipts(inv)) == 1


def test_a_query_error_releases_the_receipt(fresh: Investigation, world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=fresh)

    def broken() -> dict[str, Any]:
        raise RuntimeError("the query failed")

    with pytest.raises(RuntimeError):
        run_evidence_call(
            scope=scope,
            tool=tool_spec("get_element_properties"),
            arguments=ELEMENT,
            meta={REQUEST_KEY_META: "e"},
            execute=broken,
        )
    assert [r["state"] for r in receipts(fresh)] == ["failed"] and snapshots(fresh) == []


# --- stale receipts ---------------------------------------------------------------------------------


def test_stale_pending_receipts_are_failed_once_and_fresh_ones_are_left(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    base = {
        "principal_id": scope.principal_id,
        "project_id": scope.project_id,
        "session_id": scope.session_id,
        "task_id": fresh.task.pk,
        "run_id": fresh.run.pk,
        "tool": "get_element_properties",
        "params_hash": "0" * 64,
    }
    stale = QueryReceipt.objects.create(**base, request_key="crashed")
    live = QueryReceipt.objects.create(**base, request_key="running")
    QueryReceipt.objects.filter(pk=stale.pk).update(updated_at=timezone.now() - timedelta(minutes=5))

    assert receipts_fail_stale() >= 1
    assert QueryReceipt.objects.get(pk=stale.pk).state == "failed"
    assert QueryReceipt.objects.get(pk=live.pk).state == "pending"
    assert QueryReceipt.objects.filter(pk=stale.pk, state="pending").count() == 0
    assert receipts_fail_stale(now=timezone.now()) == 0  # idempotent


def test_a_receipt_left_pending_by_a_crashed_process_is_taken_over_by_the_retry(
    fresh: Investigation, world: EvidenceWorld
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []
    call = {
        "scope": scope,
        "tool": tool_spec("get_element_properties"),
        "arguments": ELEMENT,
        "meta": {REQUEST_KEY_META: "orphan"},
        "execute": query(scope, "get_element_properties", ELEMENT, runs=runs),
    }
    run_evidence_call(**call)
    # Make it look like a crash mid-query: pending, no snapshot, last touched long ago.
    QueryReceipt.objects.filter(task=fresh.task).update(
        state="pending", snapshot=None, updated_at=timezone.now() - timedelta(minutes=5)
    )
    EvidenceSnapshot.objects.filter(task=fresh.task).delete()
    result = run_evidence_call(**call)
    assert len(runs) == 2
    assert [(r["state"], r["attempt"]) for r in receipts(fresh)] == [("complete", 2)]
    assert result["evidence_id"] == str(snapshots(fresh)[0].pk)


@pytest.mark.django_db
def test_the_stale_sweep_fails_only_old_pending_receipts() -> None:
    # In a rolled-back transaction (this also makes pytest-django set up the test database for this
    # module; see test_models.py).
    from tests.contexts import factories

    leased = factories.leased_run(factories.project())
    who = factories.principal()
    base = {"principal": who, "project_id": leased.task.project_id, "session_id": "s", "task": leased.task}
    make = lambda key, state: QueryReceipt.objects.create(  # noqa: E731
        **base, run=leased.run, request_key=key, tool="t", params_hash="a" * 64, state=state
    )
    old_pending, old_failed = make("p", "pending"), make("f", "failed")
    QueryReceipt.objects.filter(pk__in=[old_pending.pk, old_failed.pk]).update(
        updated_at=timezone.now() - timedelta(hours=1)
    )
    assert receipts_fail_stale() >= 1
    states = dict(QueryReceipt.objects.filter(task=leased.task).values_list("request_key", "state"))
    assert states == {"p": "failed", "f": "failed"}


def test_a_running_call_keeps_its_receipt_fresh_past_the_stale_cutoff(
    fresh: Investigation, world: EvidenceWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 item 7: the stale cutoff is one budget plus a grace, but a plan may run longer (several
    statements, slot waits). A live call heartbeats its receipt, so the sweep (or a retry) never takes it
    over while it runs, and the call saves its evidence. Budget 1 s and grace 0.5 s: cutoff 1.5 s, beats
    every 0.5 s; the query takes 3 s and the sweep runs at 2.2 s."""
    from evidence import services as evidence_services

    monkeypatch.setattr(evidence_services, "STALE_GRACE_S", 0.5)
    scope = world.bind("task_execution", investigation=fresh)
    swept: list[int] = []

    async def slow() -> dict[str, Any]:
        await anyio.sleep(2.2)
        await anyio.to_thread.run_sync(lambda: _closing_sweep())  # the sweep sees every receipt of the database
        swept.extend(r["state"] for r in await anyio.to_thread.run_sync(lambda: _closing(receipts, fresh)))
        await anyio.sleep(0.8)
        return await in_thread(query(scope, "get_element_properties", ELEMENT, runs=[]))()

    with override_settings(TJWATER_MCP_QUERY_BUDGET_S=1):
        result = anyio.run(
            lambda: run_with_evidence(
                scope=scope,
                tool=tool_spec("get_element_properties"),
                arguments=ELEMENT,
                meta={REQUEST_KEY_META: "beat"},
                execute=slow,
            )
        )
    assert swept == ["pending"]  # ours was not stale: the sweep left it to its call
    assert result["evidence_id"] == str(snapshots(fresh)[0].pk)
    assert [(r["state"], r["attempt"]) for r in receipts(fresh)] == [("complete", 1)]


def _closing_sweep() -> int:
    return _closing(receipts_fail_stale)


def _closing(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    finally:
        connection.close()
