"""Unit-level pieces of the dispatch path: wire-schema validation (no remote $ref ever fetched), the
inline size cap (R-PAGE-5) and the catalog."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from contexts.scope import QueryScope
from mcp_app.catalog import Catalog, build_catalog
from mcp_app.dispatch import caller_may_use, validate_arguments
from mcp_app.inline import fit_inline
from queries.registry import ToolSpec, all_tools, input_object
from queries.schemas.network import ElementPropertiesResult


def spec_with(input_schema: dict[str, Any]) -> ToolSpec:
    base = all_tools()[0]
    return ToolSpec(
        name="probe",
        title="Probe",
        description="probe",
        input_schema=input_schema,
        output_model=ElementPropertiesResult,
        permissions=("webgis.view",),
        source="x",
        semantics="model_network",
        invoke=base.invoke,
        summarize=base.summarize,
        not_on_rest="a unit test's probe",
        examples=({"x": 1},),
    )


def test_remote_ref_is_never_fetched() -> None:
    schema = input_object({"x": {"$ref": "http://127.0.0.1:9/never-served.json"}}, ["x"])
    entry = Catalog([spec_with(schema)]).get("probe")
    assert entry is not None
    with pytest.raises(MCPError) as err:
        validate_arguments(entry, {"context_handle": "h" * 20, "x": 1})
    assert err.value.error.code == -32602


def test_local_defs_resolve() -> None:
    schema = input_object({"x": {"$ref": "#/$defs/small"}}, ["x"])
    schema["$defs"] = {"small": {"type": "integer", "maximum": 3}}
    entry = Catalog([spec_with(schema)]).get("probe")
    assert entry is not None
    assert validate_arguments(entry, {"context_handle": "h" * 20, "x": 2})["x"] == 2
    with pytest.raises(MCPError):
        validate_arguments(entry, {"context_handle": "h" * 20, "x": 4})


def test_catalog_is_sorted_and_honours_the_allowlist(settings: Any) -> None:
    names = [tool.name for tool in build_catalog().tools]
    assert names == sorted(names)
    settings.TJWATER_MCP_EXPOSED_TOOLS = ["list_elements"]
    assert [tool.name for tool in build_catalog().tools] == ["list_elements"]


def page_result(n: int, item_bytes: int = 300) -> dict[str, Any]:
    items = [{"element_id": str(i), "blob": "x" * item_bytes} for i in range(n)]
    return {
        "source": "model_network",
        "data": {"items": items, "total": 1000, "limit": n, "offset": 40, "has_more": True},
        "page": {"total": 1000, "limit": n, "offset": 40, "has_more": True},
        "truncated": False,
        "continue_with": None,
    }


def test_small_results_pass_unchanged() -> None:
    result = page_result(5)
    assert fit_inline(json.loads(json.dumps(result)), {}, 12000) == result


def test_large_page_is_cut_with_continuation() -> None:
    args = {"context_handle": "secret-handle", "element_type": "pipe", "limit": 100, "offset": 40}
    result = fit_inline(page_result(100), args, 12000)
    size = len(json.dumps(result, separators=(",", ":")).encode())
    assert size <= 12000
    kept = len(result["data"]["items"])
    assert 20 < kept < 100
    assert result["truncated"] is True and result["data"]["has_more"] is True and result["page"]["has_more"] is True
    assert result["continue_with"] == {"element_type": "pipe", "limit": kept, "offset": 40 + kept}
    assert "secret-handle" not in json.dumps(result)


def test_the_cut_keeps_the_most_items_that_fit() -> None:
    """Items of uneven sizes (multi-byte text, numbers): the page keeps the longest prefix with which the
    whole reply, its continuation included, fits — no more, no fewer (``mcp_app.inline.cut_prefix``)."""
    import pydantic_core

    def item(i: int) -> dict[str, Any]:
        return {"element_id": f"管线-{i}", "blob": "水" * (i * 37 % 211), "value": i / 7, "flag": i % 3 == 0}

    result = page_result(0)
    result["data"]["items"] = [item(i) for i in range(120)]
    for limit in (3000, 6000, 12000):
        cut = fit_inline(json.loads(json.dumps(result)), {"limit": 120}, limit)
        kept = len(cut["data"]["items"])
        assert cut["data"]["items"] == [item(i) for i in range(kept)]
        assert 0 < kept < 120
        assert cut["continue_with"] == {"limit": kept, "offset": 40 + kept}
        assert len(pydantic_core.to_json(cut)) <= limit
        # The same reply with one item more (and its continuation) would not fit.
        more = json.loads(json.dumps(cut))
        more["data"]["items"] = [item(i) for i in range(kept + 1)]
        more["continue_with"] = {"limit": kept + 1, "offset": 40 + kept + 1}
        assert len(pydantic_core.to_json(more)) > limit


def element_page(n: int, *, total: int) -> Any:
    from datetime import UTC, datetime

    from queries.schemas.common import PageInfo
    from queries.schemas.network import ElementListResult, ElementPage, ElementProperties

    items = [
        ElementProperties(element_type="junction", element_id=f"J-{i}", properties={"tag": "x" * 200, "elevation": i})
        for i in range(n)
    ]
    more = n < total
    return ElementListResult(
        source="model_network",
        source_ref="project:p/junction",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=ElementPage(items=items, total=total, limit=500, offset=0, has_more=more),
        page=PageInfo(total=total, limit=500, offset=0, has_more=more),
    )


def test_the_reply_text_counts_the_items_the_cut_returned() -> None:
    """A page built past what fits (80 items here; under the inline budget one item past the budget) is
    cut; the reply's text counts the items returned and says more are available — never the items built."""
    from mcp_app.dispatch import _summary

    entry = build_catalog().get("list_elements")
    assert entry is not None
    args = {"context_handle": "h" * 20, "element_type": "junction", "limit": 500}
    for total in (80, 3323):
        result = element_page(80, total=total)
        dumped = result.model_dump(mode="json")
        structured = fit_inline(dumped, args, 12000, entry.checker, page_holder=entry.spec.page_holder)
        kept = len(structured["data"]["items"])
        assert 0 < kept < 80 and structured["truncated"] is True
        text = _summary(entry, result, structured)
        assert text.startswith(f"{kept} of {total} elements from offset 0; more available. Truncated to fit inline")
        assert f'"limit":{kept},"offset":{kept}' in text

    whole = element_page(5, total=5)
    structured = fit_inline(whole.model_dump(mode="json"), args, 12000, entry.checker)
    assert _summary(entry, whole, structured) == "5 of 5 elements from offset 0."


def test_uncuttable_large_result_is_limit_exceeded() -> None:
    from contexts.errors import LimitExceeded

    with pytest.raises(LimitExceeded):
        fit_inline({"data": {"blob": "x" * 20000}}, {}, 12000)


def test_system_checks(settings: Any) -> None:
    from mcp_app.checks import check_mcp_settings

    assert check_mcp_settings() == []
    settings.TJWATER_MCP_QUERY_BUDGET_S = 0
    settings.TJWATER_MCP_EXPOSED_TOOLS = ["no_such_tool"]
    settings.TJWATER_MCP_RESOURCE_URI = "/mcp"
    ids = sorted(e.id for e in check_mcp_settings())
    assert ids == ["mcp_app.E001", "mcp_app.E004", "mcp_app.E007"]


def scope_with(permissions: set[str], allowed_tools: set[str]) -> QueryScope:
    return QueryScope(
        principal_id=1,
        issuer="i",
        subject="s",
        client_id="c",
        project_id=1,
        project_slug="p",
        permissions=frozenset(permissions),
        purpose="ordinary_chat",
        allowed_tools=frozenset(allowed_tools),
    )


def test_caller_may_use_needs_the_permission_and_the_binding() -> None:
    entry = build_catalog().get("list_elements")
    assert entry is not None
    assert caller_may_use(entry, scope_with({"webgis.view"}, {"list_elements"})) is True
    # An empty tool list means no tools — never "any tool".
    assert caller_may_use(entry, scope_with({"webgis.view"}, set())) is False
    assert caller_may_use(entry, scope_with({"webgis.view"}, {"get_network_schema"})) is False
    # The permission must hold now, whatever the binding listed when it was made.
    assert caller_may_use(entry, scope_with({"scada.view"}, {"list_elements"})) is False


def test_a_continuation_is_itself_a_valid_call() -> None:
    entry = build_catalog().get("list_elements")
    assert entry is not None
    handle_ = "h" * 20
    args = {"context_handle": handle_, "element_type": "pipe", "limit": 100, "offset": 40}
    cut = fit_inline(page_result(100), args, 12000, entry.validator)
    assert cut["continue_with"]["offset"] == 40 + len(cut["data"]["items"])
    assert entry.validator.is_valid({**cut["continue_with"], "context_handle": handle_})
    # Near the end of what may be paged (offset ≤ 10000) no continuation can be valid: none is offered.
    deep = page_result(100)
    deep["data"]["offset"] = 9990
    cut = fit_inline(deep, {**args, "offset": 9990}, 12000, entry.validator)
    assert cut["truncated"] is True and cut["continue_with"] is None
    assert 0 < len(cut["data"]["items"]) < 100


def test_invalid_text_is_refused_at_wire_validation() -> None:
    entry = build_catalog().get("get_element_properties")
    assert entry is not None
    good = {"context_handle": "h" * 20, "element_type": "pipe", "element_id": "LINK-1"}
    assert validate_arguments(entry, good) == good
    for bad in (
        {**good, "element_id": "\ud800x"},
        {**good, "context_handle": "\udfff" + "h" * 20},
        {**good, "element_id": "a\x00"},
    ):
        with pytest.raises(MCPError) as err:
            validate_arguments(entry, bad)
        assert err.value.error.code == -32602 and "not valid text" in err.value.error.message


def test_hash_handle_never_raises() -> None:
    from contexts.selectors import context_handle_acceptable, hash_handle

    assert len(hash_handle("\ud800abc")) == 64
    assert not context_handle_acceptable("\ud800" + "a" * 30)
