"""The task tools: ``get_task_evidence`` paging inside PostgreSQL equals the slice of the whole
document (arrays by index, objects by key in C collation, strings by Unicode character), the 8 MiB
ceiling, reader isolation (R-CTX-4), and ``get_task_context`` with bound and pinned report revisions."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from contexts.errors import InvalidParameter, LimitExceeded, NotFound
from contexts.models import TaskReport
from contexts.scope import QueryScope
from evidence.demo import sample_document
from evidence.models import EvidenceSnapshot
from evidence.services import REQUEST_KEY_META, canonical_json
from evidence.task_tools import (
    DEMO_SAMPLE_SOURCE,
    PAGE_CEILING_BYTES,
    EvidenceIntegrityError,
    get_task_context,
    get_task_evidence,
)
from queries.plan import run_sync
from queries.registry import tool_spec, tools_by_name
from tests.evidence.factories import EvidenceWorld, Investigation, run_evidence_call

HANDLE = "h" * 43
KEYS = ["b", "B", "a", "Z", "10", "9", "é", "中文", "z", "_", "A-1", "😀", "ä", "a a"]
TEXT = "水管破裂，压力下降。" * 700 + "😀𝄞 end"  # CJK (3 bytes), astral characters (4 bytes, one character each)


def document(n_items: int = 1234, text: str = TEXT) -> dict[str, Any]:
    """A result envelope whose data has a long array, an object with awkward keys and a long string."""
    return {
        "source": "model_network",
        "source_ref": "project:tianjin-demo/test",
        "queried_at": datetime(2026, 11, 1, 8, 0, tzinfo=UTC).isoformat(),
        "origin": "model_network",
        "data": {
            "items": [{"i": i, "name": f"元素-{i}", "v": i / 7} for i in range(n_items)],
            "members": {key: {"rank": n} for n, key in enumerate(KEYS)},
            "text": text,
            "flag": True,
        },
        "truncated": False,
        "evidence_id": None,
    }


def save(scope: QueryScope, doc: dict[str, Any], key: str | None = None) -> str:
    result = run_evidence_call(
        scope=scope,
        tool=tool_spec("list_elements"),
        arguments={"context_handle": HANDLE, "element_type": "junction", "key": key or uuid.uuid4().hex},
        meta={REQUEST_KEY_META: key or uuid.uuid4().hex},
        execute=lambda: doc,
    )
    return str(result["evidence_id"])


@pytest.fixture(scope="module")
def saved(executor: QueryScope) -> str:
    return save(executor, document())


def page(scope: QueryScope, evidence_id: str, path: list[str], **kw: Any) -> Any:
    return get_task_evidence(scope=scope, evidence_id=evidence_id, data_path=path, **kw).data


# --- paging equals the whole document's slice ---------------------------------------------------------


def test_array_pages_equal_slices_in_index_order(executor: QueryScope, saved: str) -> None:
    items = document()["data"]["items"]
    seen: list[Any] = []
    offset = 0
    while True:
        p = page(executor, saved, ["data", "items"], limit=500, offset=offset)
        assert p.kind == "array" and p.total == len(items)
        assert p.items == items[offset : offset + 500]
        seen.extend(p.items)
        offset += 500
        if not p.has_more:
            break
    assert seen == items
    single = page(executor, saved, ["data", "items", "77"], limit=10)
    assert single.kind == "object" and [e["key"] for e in single.items] == ["i", "name", "v"]
    assert page(executor, saved, ["data", "items", "77", "name"]).text == "元素-77"


def test_object_pages_follow_c_collation_of_keys(executor: QueryScope, saved: str) -> None:
    members = document()["data"]["members"]
    ordered = sorted(members)  # code point order == C collation of UTF-8
    assert ordered[:3] == ["10", "9", "A-1"]
    first = page(executor, saved, ["data", "members"], limit=5)
    rest = page(executor, saved, ["data", "members"], limit=500, offset=5)
    entries = first.items + rest.items
    assert [e["key"] for e in entries] == ordered
    assert all(e["value"] == members[e["key"]] for e in entries)
    assert first.total == len(members) and first.has_more and not rest.has_more


def test_string_pages_count_unicode_characters(executor: QueryScope, saved: str) -> None:
    text = document()["data"]["text"]
    chunks = []
    offset = 0
    while offset < len(text):
        p = page(executor, saved, ["data", "text"], limit=997, offset=offset)
        assert p.kind == "string" and p.total == len(text)
        assert p.text == text[offset : offset + 997]
        chunks.append(p.text)
        offset += 997
    assert "".join(chunks) == text
    tail = page(executor, saved, ["data", "text"], limit=5, offset=len(text) - 6)
    assert tail.text == "😀𝄞 en" and tail.has_more


def test_the_whole_document_and_scalars(executor: QueryScope, saved: str) -> None:
    top = page(executor, saved, [], limit=50)
    # The saved document is the result without the keys the server adds (evidence_id, evidence_uri).
    assert [e["key"] for e in top.items] == sorted(k for k in document() if k != "evidence_id")
    flag = page(executor, saved, ["data", "flag"])
    assert flag.kind == "boolean" and flag.value is True and flag.total is None
    result = get_task_evidence(scope=executor, evidence_id=saved, data_path=["data", "items"], limit=3)
    assert result.origin == "model_network" and result.truncated is True  # a page is never the whole answer
    assert result.data.byte_size > 0 and len(result.data.sha256) == 64
    assert result.data.evidence_uri == f"tjwater://evidence/{saved}"


def test_missing_paths_and_bad_limits_are_clear_errors(executor: QueryScope, saved: str) -> None:
    with pytest.raises(NotFound):
        page(executor, saved, ["data", "nope"])
    with pytest.raises(NotFound):
        page(executor, saved, ["data", "items", "99999"])
    with pytest.raises(LimitExceeded):
        page(executor, saved, ["data", "items"], limit=501)
    with pytest.raises(LimitExceeded):
        page(executor, saved, ["x"] * 33)
    with pytest.raises(InvalidParameter):
        page(executor, saved, ["data", "a\x00b"])


def test_a_page_over_the_ceiling_never_leaves_the_database(executor: QueryScope) -> None:
    # Issue 23 item 9 changed what this page carries: a nested value over NESTED_INLINE_BYTES comes back
    # as a path description, so a page of the document with its 9 MiB string no longer carries the string
    # (the test used to expect these pages refused). A page whose elements are many small members still
    # goes over the ceiling, and is refused before it leaves the database.
    big_text = "管" * (3 * 1024 * 1024)  # 9 MiB of UTF-8 in one string; the document is > 8 MiB
    evidence_id = save(executor, document(n_items=3, text=big_text))
    top = page(executor, evidence_id, [], limit=50)
    data = next(e["value"] for e in top.items if e["key"] == "data")
    assert data["text"] == {
        "path": "$.data.text",
        "data_path": ["data", "text"],
        "kind": "string",
        "length": 3 * 1024 * 1024,
    }
    assert data["flag"] is True
    small = page(executor, evidence_id, ["data", "text"], limit=1000, offset=2_000_000)
    assert small.text == "管" * 1000 and small.total == 3 * 1024 * 1024
    wide = {f"k{n:06d}": "x" * 240 for n in range(36_000)}  # 36 000 small members: ≈ 9 MiB
    wide_id = save(executor, {**document(n_items=1), "data": {"wide": wide}})
    with pytest.raises(LimitExceeded) as refused:
        page(executor, wide_id, ["data"], limit=10)  # one element: the object of small members, kept whole
    assert refused.value.details["page_bytes"] > PAGE_CEILING_BYTES


def nested_document() -> dict[str, Any]:
    """Items with a long nested series each, one small item, a long string and a big free-form object."""
    items: list[Any] = [
        {"element_id": f"P-{i}", "points": [{"t": n, "v": n / 3} for n in range(900)]} for i in range(4)
    ]
    items.append({"element_id": "P-small", "points": [1, 2]})
    return {
        **document(n_items=1),
        "data": {"items": items, "note": "长" * 3000, "table": [[n, n * 2] for n in range(2000)]},
    }


NESTED_EXPECTED = [
    {
        "element_id": f"P-{i}",
        "points": {
            "path": f"$.data.items[{i}].points",
            "data_path": ["data", "items", str(i), "points"],
            "kind": "array",
            "length": 900,
        },
    }
    for i in range(4)
] + [
    {
        "element_id": "P-small",
        "points": {
            "path": "$.data.items[4].points",
            "data_path": ["data", "items", "4", "points"],
            "kind": "array",
            "length": 2,
        },
    }
]


def test_nested_collections_come_back_as_path_descriptions(executor: QueryScope) -> None:
    """Seed 001 / issue 23 item 9: a page never carries a nested collection whole, however small — it names
    where it is (``path``, ``data_path``), its kind and length; ``data_path`` then pages into it. Scalars stay,
    a string only over ``NESTED_MEMBER_BYTES`` (in an object) or ``NESTED_INLINE_BYTES`` (an element) is
    described."""
    doc = nested_document()
    evidence_id = save(executor, doc)
    items = page(executor, evidence_id, ["data", "items"], limit=10)
    assert items.items == NESTED_EXPECTED
    inner = page(executor, evidence_id, items.items[2]["points"]["data_path"], offset=100, limit=5)
    assert inner.kind == "array" and inner.total == 900
    assert inner.items == doc["data"]["items"][2]["points"][100:105]
    top = page(executor, evidence_id, ["data"])
    members = {e["key"]: e["value"] for e in top.items}
    assert members["note"] == {"path": "$.data.note", "data_path": ["data", "note"], "kind": "string", "length": 3000}
    assert members["table"]["kind"] == "array" and members["table"]["length"] == 2000
    assert members["items"]["length"] == 5  # the whole items array, over the bound, is described too


def test_a_demo_sample_describes_nested_values_as_the_sql_pager_does(world: EvidenceWorld) -> None:
    inv = world.investigation()
    scope = world.bind("task_execution", investigation=inv)
    doc = nested_document()
    sample = _copy_of_sample(scope, inv, source=DEMO_SAMPLE_SOURCE, doc=doc)
    ordinary = _copy_of_sample(scope, inv, source="scada", doc=doc)
    for path in (["data", "items"], ["data"], []):
        assert page(scope, sample, path, limit=10).items == page(scope, ordinary, path, limit=10).items
    assert page(scope, sample, ["data", "items"], limit=10).items == NESTED_EXPECTED


# --- isolation ---------------------------------------------------------------------------------------


def test_a_reader_reads_its_parent_runs_evidence_and_nothing_else(
    world: EvidenceWorld, executor: QueryScope, saved: str
) -> None:
    inv_reader = world.bind("task_reader", investigation=_inv_of(world, executor))
    assert page(inv_reader, saved, ["data", "flag"]).value is True
    other_exec = world.bind("task_execution", investigation=world.other_task)
    other_evidence = save(other_exec, document(n_items=2))
    for refused in (
        lambda: page(inv_reader, other_evidence, []),  # another task's evidence
        lambda: page(other_exec, saved, []),  # and the other way round
        lambda: page(inv_reader, str(uuid.uuid4()), []),  # does not exist: the same answer
        lambda: page(inv_reader, "not-a-uuid", []),
    ):
        with pytest.raises(NotFound):
            refused()


def _inv_of(world: EvidenceWorld, scope: QueryScope) -> Investigation:
    from contexts.models import Task, TaskRun

    task = Task.objects.get(pk=scope.task_id)
    run = TaskRun.objects.get(pk=scope.run_id)
    return Investigation(task=task, run=run, session_id=scope.session_id, execution_request_id="")


def test_ordinary_chat_and_other_projects_read_no_evidence(world: EvidenceWorld, saved: str) -> None:
    chat = world.bind("ordinary_chat", subject="svc-worker")
    with pytest.raises(NotFound):
        page(chat, saved, [])
    from contexts.models import TaskRun

    demo_b_run = TaskRun.objects.get(task=world.demo_b_task, superseded_at__isnull=True)
    bob_reader = world.bind(
        "task_reader",
        subject="bob",
        project=world.demo_b,
        investigation=Investigation(
            task=world.demo_b_task, run=demo_b_run, session_id=demo_b_run.lease_holder, execution_request_id=""
        ),
    )
    with pytest.raises(NotFound):
        page(bob_reader, saved, [])


def test_after_supersession_the_new_runs_reader_sees_only_the_new_run(world: EvidenceWorld) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from contexts.models import TaskRun

    inv = world.investigation()
    old_exec = world.bind("task_execution", investigation=inv)
    old_evidence = save(old_exec, document(n_items=2))
    TaskRun.objects.filter(pk=inv.run.pk).update(superseded_at=timezone.now(), status="superseded")
    new_run = TaskRun.objects.create(
        task=inv.task,
        sequence=2,
        owner_id=inv.run.owner_id,
        lease_holder="evid-next",
        lease_expires_at=timezone.now() + timedelta(hours=1),
    )
    from contexts.models import ExecutionRequest

    request = ExecutionRequest.objects.create(run=new_run, request_id=f"evid-next-{uuid.uuid4().hex[:8]}")
    nxt = Investigation(task=inv.task, run=new_run, session_id="evid-next", execution_request_id=request.request_id)
    new_exec = world.bind("task_execution", investigation=nxt)
    new_reader = world.bind("task_reader", investigation=nxt)
    assert page(new_exec, old_evidence, ["data", "flag"]).value is True  # the executor reads the task's history
    with pytest.raises(NotFound):
        page(new_reader, old_evidence, [])  # a reader only its parent run


# --- the catalog -------------------------------------------------------------------------------------


def test_task_tools_are_never_in_an_ordinary_chat_binding(world: EvidenceWorld) -> None:
    chat = world.bind("ordinary_chat", subject="alice")
    reader = world.bind("task_reader", investigation=world.demo_task)
    assert {"get_task_context", "get_task_evidence"}.isdisjoint(chat.allowed_tools)
    assert {"get_task_context", "get_task_evidence"} <= reader.allowed_tools
    specs = tools_by_name()
    assert specs["get_task_evidence"].task_scope == "bound_task" and not specs["get_task_evidence"].evidence_allowed


# --- get_task_context --------------------------------------------------------------------------------


def test_task_context_reads_the_revision_bound_to_the_context(world: EvidenceWorld) -> None:
    scope = world.bind("task_execution", investigation=world.demo_task)
    result = run_sync(
        tools_by_name()["get_task_context"].invoke(scope, {"context_handle": HANDLE, "section": "findings"})
    )
    data = result.data
    assert data.title.startswith("Investigate low pressure in Hexi")
    assert data.current_run is not None and data.current_run.run_id == world.demo_task.run.pk
    assert [r.revision for r in data.report_revisions] == [2, 1]
    assert (data.report_revision, data.revision_source) == (2, "bound_to_context")
    assert data.sections == ["evidence", "findings", "recommendations", "summary"]
    assert data.page is not None and data.page.items[0].startswith("Modelled leak peaks")
    assert data.is_full_report is False and "not the full report" in data.note
    pinned = get_task_context(scope=scope, section="findings", report_revision=1)
    assert pinned.data.report_revision == 1 and pinned.data.revision_source == "pinned"
    assert pinned.data.page.items == [
        "Calls cluster around JUNCTION-1304",
        "SCADA pressure transmitters not yet reviewed",
    ]
    with pytest.raises(NotFound):
        get_task_context(scope=scope, section="findings", report_revision=9)


def test_a_revision_written_after_binding_is_read_only_when_pinned(world: EvidenceWorld) -> None:
    inv = world.investigation()
    TaskReport.objects.create(task=inv.task, revision=1, sections={"summary": "first"})
    scope = world.bind("task_execution", investigation=inv)
    TaskReport.objects.create(task=inv.task, revision=2, sections={"summary": "second — newer than the binding"})
    default = get_task_context(scope=scope, section="summary")
    assert default.data.report_revision == 1 and default.data.page.text == "first"
    latest = get_task_context(scope=scope, section="summary", report_revision=2)
    assert latest.data.page.text.startswith("second")
    summary_only = get_task_context(scope=scope)
    assert summary_only.data.page is None and summary_only.data.report_revisions_total == 2


def test_a_renewed_binding_keeps_its_pinned_revision(world: EvidenceWorld) -> None:
    """Issue 23 item 8: the binding's pinned revision is what ``get_task_context`` reads by default, so a
    context renewed with the revision its session was working on stays on it after newer revisions
    were written; a binding that names none pins the newest at bind time."""
    inv = world.investigation()
    TaskReport.objects.create(task=inv.task, revision=1, sections={"summary": "first"})
    TaskReport.objects.create(task=inv.task, revision=2, sections={"summary": "second"})
    first = world.bind("task_execution", investigation=inv, report_revision=1)
    TaskReport.objects.create(task=inv.task, revision=3, sections={"summary": "third"})
    renewed = world.bind("task_execution", investigation=inv, report_revision=1)
    for scope in (first, renewed):
        data = get_task_context(scope=scope, section="summary").data
        assert (data.report_revision, data.revision_source, data.page.text) == (1, "bound_to_context", "first")
    reader = world.bind("task_reader", investigation=inv, report_revision=2)
    assert get_task_context(scope=reader, section="summary").data.page.text == "second"
    fresh = world.bind("task_execution", investigation=inv)
    assert get_task_context(scope=fresh, section="summary").data.report_revision == 3


def test_task_context_is_only_for_task_contexts(world: EvidenceWorld) -> None:
    with pytest.raises(NotFound):
        get_task_context(scope=world.bind("ordinary_chat", subject="alice"))


@pytest.mark.django_db
def test_an_unknown_evidence_id_in_an_ordinary_chat_is_not_found_without_a_lookup() -> None:
    # (also makes pytest-django set up the test database for this module; see test_models.py)
    from contexts.scope import QueryScope as Scope

    chat = Scope(
        principal_id=1, issuer="i", subject="s", client_id="c", project_id=1, project_slug="p",
        permissions=frozenset(), purpose="ordinary_chat",
    )  # fmt: skip
    with pytest.raises(NotFound):
        get_task_evidence(scope=chat, evidence_id=str(uuid.uuid4()))


# --- DEMO samples (issue 23 item 10) -------------------------------------------------------------------


def _copy_of_sample(
    scope: QueryScope, inv: Investigation, *, source: str, sha256: str | None = None, doc: dict[str, Any] | None = None
) -> str:
    """The demo's sample document (or ``doc``) saved again under another investigation: as a sample
    (``source`` demo_sample) or as ordinary evidence, with its true digest or another."""
    document = doc or sample_document()
    canonical = canonical_json(document)
    snapshot = EvidenceSnapshot.objects.create(
        project=world_project(scope),
        task=inv.task,
        run=inv.run,
        tool="query_scada_readings",
        source=source,
        principal=inv.run.owner,
        required_permissions=["scada.view"],
        data=document,
        byte_size=len(canonical),
        sha256=sha256 or hashlib.sha256(canonical).hexdigest(),
    )
    return str(snapshot.pk)


def world_project(scope: QueryScope) -> Any:
    from contexts.models import Project

    return Project.objects.get(pk=scope.project_id)


def test_the_demo_ships_a_sample_that_pages_after_a_whole_document_check(world: EvidenceWorld) -> None:
    """The seeded DEMO sample of the demo investigation pages like any evidence (index order, keys in C
    order) — after the whole document was read and its digest verified."""
    scope = world.bind("task_execution", investigation=world.demo_task)
    sample = EvidenceSnapshot.objects.get(task=world.demo_task.task, source=DEMO_SAMPLE_SOURCE)
    document = sample_document()
    assert sample.sha256 == hashlib.sha256(canonical_json(document)).hexdigest()
    items = page(scope, str(sample.pk), ["data", "items"], offset=2, limit=3)
    assert (items.kind, items.total, items.items) == ("array", 8, document["data"]["items"][2:5])
    device = page(scope, str(sample.pk), ["data", "device"])
    assert [e["key"] for e in device.items] == sorted(document["data"]["device"])
    note = page(scope, str(sample.pk), ["data", "note"], offset=5, limit=6)
    assert note.text == document["data"]["note"][5:11]
    assert page(scope, str(sample.pk), ["data", "items", "0", "value"]).value == 31.5
    with pytest.raises(NotFound):
        page(scope, str(sample.pk), ["data", "nothing"])


def test_a_sample_that_fails_its_digest_gives_no_page(world: EvidenceWorld) -> None:
    """Only the selected page would look fine: the sample's whole document is verified first. The same
    document saved as ordinary evidence (paged in SQL, no whole read) still pages."""
    inv = world.investigation()
    scope = world.bind("task_execution", investigation=inv)
    tampered = _copy_of_sample(scope, inv, source=DEMO_SAMPLE_SOURCE, sha256="0" * 64)
    with pytest.raises(EvidenceIntegrityError):
        page(scope, tampered, ["data", "items"], limit=1)
    intact = _copy_of_sample(scope, inv, source=DEMO_SAMPLE_SOURCE)
    assert len(page(scope, intact, ["data", "items"], limit=1).items) == 1


def test_a_sample_over_the_ceiling_is_refused_whatever_the_page(
    world: EvidenceWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 8 MiB ceiling of a sample is on the whole document, checked in the database: a one-item page
    of a sample over it is refused (the source must split the sample), while ordinary evidence's page
    of the same size passes (its ceiling is per page)."""
    from evidence import task_tools

    inv = world.investigation()
    scope = world.bind("task_execution", investigation=inv)
    sample = _copy_of_sample(scope, inv, source=DEMO_SAMPLE_SOURCE)
    ordinary = _copy_of_sample(scope, inv, source="scada")
    monkeypatch.setattr(task_tools, "PAGE_CEILING_BYTES", 500)
    with pytest.raises(LimitExceeded) as refused:
        page(scope, sample, ["data", "items"], limit=1)
    assert refused.value.details["document_bytes"] > 500
    assert len(page(scope, ordinary, ["data", "items"], limit=1).items) == 1
