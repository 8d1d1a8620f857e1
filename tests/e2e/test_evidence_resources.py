"""``mcp_app.resources`` (tested here with the evidence world; the package owns the rows it needs):
evidence snapshots as MCP resources — listing newest first with a cursor, reading by URI with the
digest verified, the over-size answer, isolation — and the R-PAGE-5 reply of a saved task call."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from contexts.scope import QueryScope
from evidence.services import REQUEST_KEY_META
from evidence.task_tools import PAGE_CEILING_BYTES, describe, get_task_evidence
from mcp_app.resources import evidence_call_result, list_evidence_resources, read_evidence_resource
from queries.plan import run_sync
from queries.registry import tool_spec, tools_by_name
from tests.evidence.factories import EvidenceWorld, Investigation, run_evidence_call

HANDLE = "h" * 43


def save(scope: QueryScope, doc: dict[str, Any]) -> str:
    key = uuid.uuid4().hex
    result = run_evidence_call(
        scope=scope,
        tool=tool_spec("get_network_schema"),
        arguments={"context_handle": HANDLE, "kind": "junction", "n": key},
        meta={REQUEST_KEY_META: key},
        execute=lambda: doc,
    )
    return str(result["evidence_id"])


def small(n: int) -> dict[str, Any]:
    return {"source": "model_network", "origin": "model_network", "data": {"n": n, "name": f"第{n}"}}


@pytest.fixture(scope="module")
def inv(world: EvidenceWorld) -> Investigation:
    return world.investigation()


@pytest.fixture(scope="module")
def executor(world: EvidenceWorld, inv: Investigation) -> QueryScope:
    return world.bind("task_execution", investigation=inv)


@pytest.fixture(scope="module")
def saved_ids(executor: QueryScope) -> list[str]:
    return [save(executor, small(n)) for n in range(57)]


def test_listing_is_newest_first_paged_and_private(executor: QueryScope, saved_ids: list[str]) -> None:
    first = anyio.run(list_evidence_resources, executor, None)
    assert (first.ttl_ms, first.cache_scope) == (0, "private")
    assert len(first.resources) == 50 and first.next_cursor
    second = anyio.run(list_evidence_resources, executor, first.next_cursor)
    assert second.next_cursor is None
    uris = [r.uri for r in first.resources + second.resources]
    assert uris == [f"tjwater://evidence/{i}" for i in reversed(saved_ids)]
    assert all(r.mime_type == "application/json" and r.size and r.size > 0 for r in first.resources)
    assert HANDLE not in json.dumps([r.model_dump(mode="json") for r in first.resources])
    with pytest.raises(MCPError):
        anyio.run(list_evidence_resources, executor, "not-a-cursor")


def test_a_reader_lists_its_parent_run_and_ordinary_chat_lists_nothing(
    world: EvidenceWorld, inv: Investigation, saved_ids: list[str]
) -> None:
    reader = world.bind("task_reader", investigation=inv)
    listed = anyio.run(list_evidence_resources, reader, None)
    assert listed.resources[0].uri == f"tjwater://evidence/{saved_ids[-1]}"
    chat = world.bind("ordinary_chat", subject="svc-worker")
    assert anyio.run(list_evidence_resources, chat, None).resources == []
    other = world.bind("task_execution", investigation=world.other_task)
    assert all(r.uri not in {f"tjwater://evidence/{i}" for i in saved_ids} for r in _all(other))


def _all(scope: QueryScope) -> list[Any]:
    out: list[Any] = []
    cursor = None
    while True:
        page = anyio.run(list_evidence_resources, scope, cursor)
        out.extend(page.resources)
        cursor = page.next_cursor
        if cursor is None:
            return out


def test_reading_returns_the_canonical_document_with_a_verified_digest(
    executor: QueryScope, saved_ids: list[str]
) -> None:
    uri = f"tjwater://evidence/{saved_ids[3]}"
    result = anyio.run(read_evidence_resource, executor, uri)
    assert (result.ttl_ms, result.cache_scope) == (0, "private")
    (contents,) = result.contents
    assert contents.uri == uri and contents.mime_type == "application/json"
    meta = contents.meta["cn.tjwater/evidence"]
    assert hashlib.sha256(contents.text.encode()).hexdigest() == meta["sha256"]
    assert json.loads(contents.text) == small(3)
    assert meta["params"] == {"kind": "junction", "n": meta["params"]["n"]} and meta["origin"] == "system"


def test_unreadable_uris_are_all_resource_not_found(world: EvidenceWorld, saved_ids: list[str]) -> None:
    uri = f"tjwater://evidence/{saved_ids[0]}"
    chat = world.bind("ordinary_chat", subject="svc-worker")
    other = world.bind("task_execution", investigation=world.other_task)
    for scope, target in (
        (chat, uri),
        (other, uri),
        (other, f"tjwater://evidence/{uuid.uuid4()}"),
        (other, "tjwater://evidence/../../etc"),
        (other, "file:///etc/passwd"),
    ):
        with pytest.raises(MCPError) as refused:
            anyio.run(read_evidence_resource, scope, target)
        assert refused.value.error.code == -32602
        assert refused.value.error.message == "Resource not found"
        assert refused.value.error.data == {"uri": target}


def test_an_oversize_snapshot_is_refused_whole_and_answered_with_how_to_page_it(executor: QueryScope) -> None:
    text = "x" * (PAGE_CEILING_BYTES + 1024)
    evidence_id = save(executor, {"source": "model_network", "origin": "model_network", "data": {"text": text}})
    (contents,) = anyio.run(read_evidence_resource, executor, f"tjwater://evidence/{evidence_id}").contents
    answer = json.loads(contents.text)
    assert len(contents.text) < 10_000  # a summary, not the document
    assert answer["truncated"] is True and answer["byte_size"] > PAGE_CEILING_BYTES
    assert answer["outline"]["data"] == [{"key": "text", "kind": "string", "length": len(text)}]
    args = answer["get_task_evidence"]
    page = get_task_evidence(scope=executor, **{**args, "data_path": ["data", "text"], "limit": 10})
    assert page.data.text == "x" * 10 and page.data.total == len(text)


# --- R-PAGE-5 ----------------------------------------------------------------------------------------


def _validates(tool: str, structured: dict[str, Any]) -> None:
    Draft202012Validator(tools_by_name()[tool].output_schema).validate(structured)


def _building(spec: Any, scope: QueryScope, args: dict[str, Any], built: list[BaseModel]) -> Any:
    """The caller's ``execute``, keeping the result model it built (what the MCP edge passes on)."""

    def execute() -> dict[str, Any]:
        built.append(run_sync(spec.invoke(scope, args)))
        return built[-1].model_dump(mode="json")

    return execute


def test_a_small_saved_result_is_inline_with_a_resource_link(executor: QueryScope) -> None:
    args = {"context_handle": HANDLE, "element_type": "junction", "element_id": "JUNCTION-0"}
    spec = tools_by_name()["get_element_properties"]
    built: list[BaseModel] = []
    structured = run_evidence_call(
        scope=executor,
        tool=tool_spec(spec.name),
        arguments=args,
        meta={REQUEST_KEY_META: uuid.uuid4().hex},
        execute=_building(spec, executor, args, built),
    )
    result = evidence_call_result(spec, structured)
    # The edge passes the model it built: the same reply as from the saved document alone.
    assert evidence_call_result(spec, structured, result=built[0]) == result
    assert result.structured_content == structured and result.is_error is False
    text, link = result.content
    assert link.type == "resource_link" and link.uri == structured["evidence_uri"]
    assert structured["evidence_id"] in text.text
    _validates(spec.name, result.structured_content)


def test_a_large_saved_page_is_cut_to_fit_and_continues_from_the_evidence(executor: QueryScope) -> None:
    args = {"context_handle": HANDLE, "element_type": "junction", "limit": 500, "offset": 0}
    spec = tools_by_name()["list_elements"]
    built: list[BaseModel] = []
    structured = run_evidence_call(
        scope=executor,
        tool=tool_spec(spec.name),
        arguments=args,
        meta={REQUEST_KEY_META: uuid.uuid4().hex},
        execute=_building(spec, executor, args, built),
    )
    result = evidence_call_result(spec, structured)
    assert evidence_call_result(spec, structured, result=built[0]) == result
    cut = result.structured_content
    assert len(json.dumps(cut, separators=(",", ":"), ensure_ascii=False).encode()) <= 12000
    assert cut["truncated"] is True and 0 < len(cut["data"]["items"]) < 500
    assert cut["data"]["items"] == structured["data"]["items"][: len(cut["data"]["items"])]
    _validates(spec.name, cut)
    follow = cut["continue_with"]
    assert follow["tool"] == "get_task_evidence"
    rest = get_task_evidence(scope=executor, **follow["arguments"])
    n = len(cut["data"]["items"])
    # Evidence pages one level at a time (seed 001): each item's nested collections are path descriptions.
    expected = [
        {
            key: describe(value, ["data", "items", str(n + i), key]) if isinstance(value, list | dict) else value
            for key, value in item.items()
        }
        for i, item in enumerate(structured["data"]["items"][n : n + follow["arguments"]["limit"]])
    ]
    assert rest.data.items == expected
    assert any(isinstance(v, dict) and "data_path" in v for item in rest.data.items for v in item.values())
    assert result.content[1].uri == structured["evidence_uri"]


def test_a_large_result_that_cannot_be_cut_points_at_the_evidence(executor: QueryScope) -> None:
    spec = tools_by_name()["get_network_schema"]
    structured = run_evidence_call(
        scope=executor,
        tool=tool_spec(spec.name),
        arguments={"context_handle": HANDLE, "kind": "pipe"},
        meta={REQUEST_KEY_META: uuid.uuid4().hex},
        execute=lambda: run_sync(spec.invoke(executor, {"kind": "pipe"})).model_dump(mode="json"),
    )
    result = evidence_call_result(spec, structured, max_bytes=300)
    body = result.structured_content
    assert body["code"] == "RESULT_SAVED_AS_EVIDENCE" and body["details"]["evidence_id"] == structured["evidence_id"]
    assert result.content[1].uri == structured["evidence_uri"]
    _validates(spec.name, body)
