"""The one inline cut (``mcp_app.inline``, R-PAGE-5, issue 23 item 9): every result is reachable inline.

Each test builds the result a tool would return, cuts it as ``mcp_app.dispatch`` does (with the tool's
real input validator from the catalog), then follows what the reply offers — ``continue_with`` and the
``omitted`` path descriptions — as a caller would, re-cutting the same full result for each call (the
call is re-run; nothing is stored between calls), until it has read everything back."""

from __future__ import annotations

import copy
import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from contexts.errors import InvalidParameter, LimitExceeded
from mcp_app.catalog import Catalog, build_catalog
from mcp_app.inline import cut_summary, fit_inline, json_size
from queries.registry import tools_by_name

HANDLE = "h" * 43
CAP = 12000


@functools.cache
def catalog() -> Catalog:
    """Built once: building it generates and checks every tool's schemas (≈ 0.1 s), and a ``read_all``
    loop cuts hundreds of times."""
    return build_catalog()


def cut(tool: str, full: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """One call of ``tool`` answering ``full``: the reply's structured content, checked to fit the cap,
    to validate against the tool's outputSchema, and to offer only valid calls."""
    entry = catalog().get(tool)
    assert entry is not None
    spec = entry.spec
    reply = fit_inline(
        copy.deepcopy(full),
        {**args, "context_handle": HANDLE},
        CAP,
        entry.validator,
        item_parts=spec.item_parts,
        series_start=spec.series_start,
        page_holder=spec.page_holder,
    )
    assert json_size(reply) <= CAP
    Draft202012Validator(spec.output_schema).validate(reply)
    if reply.get("continue_with") is not None:
        assert entry.validator.is_valid({**reply["continue_with"], "context_handle": HANDLE})
        assert HANDLE not in json.dumps(reply)
    return reply


def at(document: Any, data_path: list[str]) -> Any:
    for segment in data_path:
        document = document[int(segment)] if isinstance(document, list) else document[segment]
    return document


def read_all(tool: str, full: dict[str, Any], args: dict[str, Any], data_path: list[str]) -> Any:
    """The value at ``data_path`` read back whole with ``part`` calls only, following ``continue_with``
    and, for every member the cut left out, reading that member the same way."""
    value: Any = None
    offset = 0
    while True:
        reply = cut(tool, full, {**args, "part": {"data_path": data_path, "offset": offset}})
        part = reply["part"]
        assert part["data_path"] == data_path and part["offset"] == offset
        chunk = at(reply, data_path)
        left_out = {tuple(o["data_path"]) for o in reply.get("omitted", [])}
        if part["kind"] == "string":
            value = (value or "") + chunk
        elif part["kind"] == "array":
            value = (value or []) + [
                read_all(tool, full, args, [*data_path, str(offset + i)])
                if (*data_path, str(offset + i)) in left_out
                else v
                for i, v in enumerate(chunk)
            ]
        else:
            value = value or {}
            for k, v in chunk.items():
                value[k] = read_all(tool, full, args, [*data_path, k]) if (*data_path, k) in left_out else v
        if not part["has_more"]:
            return value
        offset = part["offset"] + part["limit"]
        nxt = reply["continue_with"]
        assert nxt["part"] == {"data_path": data_path, "offset": offset, "limit": part["limit"]}


def envelope(data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "source": "gis",
        "source_ref": "project:tianjin-demo/x",
        "queried_at": "2026-11-01T08:00:00Z",
        "origin": "model_network",
        "data": data,
        "window": None,
        "units": {},
        "page": None,
        "truncated": False,
        "continue_with": None,
        "data_gaps": [],
        "evidence_id": None,
        **extra,
    }


def gis_feature(properties: dict[str, Any]) -> dict[str, Any]:
    layer = {
        "layer_key": "water_mains",
        "name": "Water mains",
        "geometry_type": "LineString",
        "source_crs": "EPSG:4326",
        "source_name": None,
        "exported_at": None,
    }
    return envelope(
        {
            "layer": layer,
            "source_fid": "WM-1",
            "properties": properties,
            "geometry_type": "LineString",
            "bbox": [117.1, 39.1, 117.2, 39.2],
            "matched_element": None,
        }
    )


GIS_ARGS = {"layer_key": "water_mains", "source_fid": "WM-1"}


def test_only_tools_whose_one_item_can_exceed_the_cap_take_part() -> None:
    """The argument is where it is needed and nowhere else (the earlier attempt put it on every tool)."""
    with_part = {name for name, spec in tools_by_name().items() if "part" in spec.input_schema["properties"]}
    assert with_part == {
        "get_element_gis_properties",
        "get_source_gis_properties",
        "get_analysis_run",
        "list_analysis_results",
        "list_sensor_placement_runs",
        "get_sensor_placement_run",
        "query_peripheral_data",
        "trace_flow_path",
        "get_workbench_runtime",
    }
    assert all(spec.item_parts == (name in with_part) for name, spec in tools_by_name().items())


def test_a_result_that_fits_gains_no_fields() -> None:
    full = gis_feature({"material": "DI", "note": "x" * 100})
    assert cut("get_source_gis_properties", full, GIS_ARGS) == full
    assert cut_summary(full) == ""


def test_one_feature_with_many_attributes_is_read_back_whole() -> None:
    properties = {f"attr_{n:04d}": f"value {n} " + "v" * 20 for n in range(900)}
    full = gis_feature(properties)
    reply = cut("get_source_gis_properties", full, GIS_ARGS)
    assert reply["truncated"] is True
    [omitted] = reply["omitted"]
    shown = omitted["shown"]
    assert omitted == {
        "path": "$.data.properties",
        "data_path": ["data", "properties"],
        "kind": "object",
        "length": 900,
        "shown": shown,
    }
    assert 0 < shown < 900 and reply["data"]["properties"] == {k: properties[k] for k in sorted(properties)[:shown]}
    assert reply["continue_with"] == {**GIS_ARGS, "part": {"data_path": ["data", "properties"], "offset": shown}}
    assert reply["data"]["layer"] == full["data"]["layer"]  # the rest of the item is whole
    assert "$.data.properties (object, 900)" in cut_summary(reply)
    assert read_all("get_source_gis_properties", full, GIS_ARGS, ["data", "properties"]) == properties


def test_an_attribute_larger_than_the_cap_is_read_back_by_character() -> None:
    """A single value over the cap (a long text attribute) is left out and named; its characters page."""
    big = "管线走向说明 " * 4000  # ≈ 84 KB of UTF-8 in one attribute
    properties = {"a": 1, "description": big, "z": [1, 2, 3]}
    full = gis_feature(properties)
    reply = cut("get_source_gis_properties", full, GIS_ARGS)
    paths = [o["path"] for o in reply["omitted"]]
    assert paths == ["$.data.properties.description"]
    assert reply["data"]["properties"]["a"] == 1 and reply["data"]["properties"]["z"] == [1, 2, 3]
    assert read_all("get_source_gis_properties", full, GIS_ARGS, ["data", "properties"]) == properties


def test_a_long_attribute_among_many_small_ones_is_read_back() -> None:
    """Reading the long attribute with ``part``, its many small siblings do not fit beside it: the object
    holding it keeps only that member, named in ``omitted`` as shown in part."""
    properties: dict[str, Any] = {f"attr_{n:03d}": f"value {n}" for n in range(600)}
    properties["survey_note"] = "沿道路东侧敷设，穿越河道处加套管。" * 600
    full = gis_feature(properties)
    note = cut(
        "get_source_gis_properties", full, {**GIS_ARGS, "part": {"data_path": ["data", "properties", "survey_note"]}}
    )
    shown = note["part"]["limit"]  # 4000 characters by default, fewer when they do not fit (3 bytes each)
    assert 1000 < shown < 4000 and note["part"]["has_more"] is True
    assert note["data"]["properties"] == {"survey_note": properties["survey_note"][:shown]}
    [holder] = note["omitted"]
    assert holder["path"] == "$.data.properties" and holder["length"] == 601 and holder["shown"] == 1
    assert read_all("get_source_gis_properties", full, GIS_ARGS, ["data", "properties"]) == properties


def analysis_results(payload_sizes: list[int]) -> dict[str, Any]:
    items = [
        {
            "sequence": n + 1,
            "result_type": "affected_nodes",
            "payload": {
                "nodes": [{"node_id": f"JUNCTION-{i}", "pressure_drop": 1.5} for i in range(size)],
                "count": size,
                "threshold": 1.0,
                "units": {"pressure_drop": "m", "threshold": "m"},
            },
            "element_refs": [{"element_type": "junction", "element_id": f"JUNCTION-{i}"} for i in range(min(size, 3))],
        }
        for n, size in enumerate(payload_sizes)
    ]
    page = {"total": len(items) + 10, "limit": len(items), "offset": 0, "has_more": True}
    data = {"items": items, **page, "run_id": "burst-1", "kind": "burst", "result_type": None}
    return envelope(data, source="analysis", origin="analysis_run", page=page)


def test_a_page_whose_first_item_is_over_the_cap_reads_into_that_item() -> None:
    full = analysis_results([3000, 5])
    args = {"run_id": "burst-1", "limit": 2, "offset": 0}
    reply = cut("list_analysis_results", full, args)
    assert len(reply["data"]["items"]) == 1 and reply["data"]["has_more"] and reply["page"]["has_more"]
    assert [o["path"] for o in reply["omitted"]] == ["$.data.items[0].payload.nodes"]
    follow = reply["continue_with"]
    assert follow["offset"] == 0 and follow["limit"] == 1
    assert follow["part"]["data_path"] == ["data", "items", "0", "payload", "nodes"]
    one = analysis_results([3000])  # what the continuation's call (offset 0, limit 1) answers
    nodes = read_all(
        "list_analysis_results", one, {"run_id": "burst-1", "limit": 1, "offset": 0}, follow["part"]["data_path"]
    )
    assert nodes == full["data"]["items"][0]["payload"]["nodes"]


def test_a_page_of_small_items_is_cut_as_before() -> None:
    full = analysis_results([40] * 30)
    reply = cut("list_analysis_results", full, {"run_id": "burst-1", "limit": 30, "offset": 0})
    kept = len(reply["data"]["items"])
    assert 0 < kept < 30 and "omitted" not in reply and "part" not in reply
    assert reply["continue_with"] == {"run_id": "burst-1", "limit": kept, "offset": kept}


def test_a_flow_trace_over_the_cap_continues_inside_the_result() -> None:
    """``trace_flow_path`` has no offset to page with: the rest of its elements is read with ``part``."""
    items = [
        {"element_type": "pipe", "element_id": f"LINK-{n}", "hop": n, "dominant": n < 10, "flow": 0.01 * n,
         "from_node": f"J-{n}", "to_node": f"J-{n + 1}"}
        for n in range(500)
    ]  # fmt: skip
    end = {"element_type": "reservoir", "element_id": "R-1", "reason": "source_reached"}
    data = {
        "element_type": "junction",
        "element_id": "J-0",
        "direction": "upstream",
        "requested_time": "2026-11-01T08:00:00Z",
        "time": "2026-11-01T08:00:00Z",
        "max_elements": 500,
        "items": items,
        "complete": True,
        "stop_reason": "source_reached",
        "dominant_path_end": end,
        "ends": [end],
        "ends_total": 1,
    }
    full = envelope(data, source="model_baseline", origin="model_baseline")
    args = {"element_type": "junction", "element_id": "J-0", "direction": "upstream", "max_elements": 500}
    args["time"] = "2026-11-01T08:00:00Z"
    reply = cut("trace_flow_path", full, args)
    kept = len(reply["data"]["items"])
    assert 0 < kept < 500 and reply["truncated"] is True
    assert reply["continue_with"]["part"] == {"data_path": ["data", "items"], "offset": kept, "limit": kept}
    assert read_all("trace_flow_path", full, args, ["data", "items"]) == items


def test_a_workbench_with_many_data_sources_is_read_in_parts() -> None:
    """Not a page and no bound on how many sources a workbench reports: the list is read with part."""
    sources = [
        {"name": f"source-{n:04d}", "last_sync": "2026-11-01T08:00:00Z", "freshness_s": n, "status": "fresh"}
        for n in range(400)
    ]
    data = {"simulation_clock": "2026-11-01T08:00:00Z", "active_scenario": None, "mode": "realtime",
            "captured_at": "2026-11-01T08:00:00Z", "data_sources": sources}  # fmt: skip
    full = envelope(data, source="workbench", origin="diagnostic")
    reply = cut("get_workbench_runtime", full, {})
    assert [o["path"] for o in reply["omitted"]] == ["$.data.data_sources"]
    assert reply["continue_with"]["part"]["data_path"] == ["data", "data_sources"]
    assert read_all("get_workbench_runtime", full, {}, ["data", "data_sources"]) == sources


def test_a_long_analysis_series_continues_from_the_first_point_left_out() -> None:
    """A series is not a page: it is cut by time, and continues with ``start`` (no new argument)."""
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    points = [
        {"time": (t0 + timedelta(minutes=n)).isoformat().replace("+00:00", "Z"), "value": n / 7} for n in range(1440)
    ]
    data = {"run_id": "burst-1", "run_status": "succeeded", "element_type": "junction", "element_id": "J-1",
            "field": "pressure", "points": points}  # fmt: skip
    args = {"run_id": "burst-1", "element_type": "junction", "element_id": "J-1", "field": "pressure",
            "start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}  # fmt: skip
    assert "part" not in tools_by_name()["query_analysis_series"].input_schema["properties"]
    read: list[dict[str, Any]] = []
    call = args
    while True:
        rest = [p for p in points if p["time"] >= call["start"]]  # what the service answers from `start`
        reply = cut("query_analysis_series", envelope({**data, "points": rest}), call)
        read += reply["data"]["points"]
        if reply["continue_with"] is None:
            break
        assert reply["truncated"] is True
        call = reply["continue_with"]
        assert call["start"] == rest[len(reply["data"]["points"])]["time"] and call["end"] == args["end"]
    assert read == points


def test_tools_whose_items_are_bounded_still_refuse_an_uncuttable_result() -> None:
    with pytest.raises(LimitExceeded):
        fit_inline(envelope({"values": {f"k{n}": "x" * 50 for n in range(500)}}), {}, CAP)


def test_a_part_that_names_nothing_is_a_clear_error_naming_the_field() -> None:
    full = gis_feature({f"k{n}": "x" * 50 for n in range(500)})
    for path, message in (
        (["data", "nothing"], "part.data_path: nothing at that path"),
        (["source"], "part.data_path: must start with 'data'"),
        (["data", "source_fid"], "part.data_path"),  # a string pages by character: not an error
        (["data", "bbox", "0"], "part.data_path: names a single value"),
    ):
        args = {**GIS_ARGS, "part": {"data_path": path}, "context_handle": HANDLE}
        if path == ["data", "source_fid"]:
            assert fit_inline(copy.deepcopy(full), args, CAP, item_parts=True)["data"]["source_fid"] == "WM-1"
            continue
        with pytest.raises(InvalidParameter, match=message.replace("(", r"\(")):
            fit_inline(copy.deepcopy(full), args, CAP, item_parts=True)


def test_a_report_section_page_is_cut_like_any_page() -> None:
    """``get_task_context`` has its page at ``data.page``: a page of 20 large elements (each under the
    evidence pager's bound) is cut to what fits and continues with offset, instead of LIMIT_EXCEEDED."""
    from evidence.schemas import JsonPage, TaskContextData, TaskContextResult

    elements = [{"finding": n, "text": "压力下降" * 150} for n in range(20)]  # ≈ 1.9 KB each
    page = JsonPage(
        data_path=["findings"], kind="array", total=60, offset=20, limit=20, has_more=True, page_bytes=1, items=elements
    )
    data = TaskContextData(
        task_id=1, title="Burst", status="open", bound_run_id=1, current_run=None, report_revisions=[],
        report_revisions_total=0, report_revision=1, revision_source="pinned", sections=["main"],
        section="main", page=page, note="Preview.",
    )  # fmt: skip
    full = TaskContextResult(
        source="task_context", source_ref="project:p/task/1/report/1", queried_at=datetime(2026, 11, 1, tzinfo=UTC),
        origin="diagnostic", data=data, truncated=True,
    ).model_dump(mode="json")  # fmt: skip
    args = {"section": "main", "data_path": ["findings"], "limit": 20, "offset": 20}
    reply = cut("get_task_context", full, args)
    kept = len(reply["data"]["page"]["items"])
    assert 0 < kept < 20 and reply["data"]["page"]["items"] == elements[:kept]
    assert reply["data"]["page"]["has_more"] is True and reply["truncated"] is True
    assert reply["continue_with"] == {**args, "offset": 20 + kept, "limit": kept}


def test_a_prefix_sized_from_its_items_is_the_size_of_the_reply() -> None:
    """``cut_prefix(pure=True)`` sizes a list's prefixes from each item's size measured once: exactly what
    serialising the reply gives, for every prefix and continuation (non-ASCII text and nesting included)."""
    from mcp_app.inline_prefix import _list_sizes

    items: list[Any] = [{"id": f"J-{i}", "name": "水厂" * (i % 3), "v": i / 7, "n": None} for i in range(12)]
    items += [[1, 2, {"x": "é"}], "text", 3.5, None]
    for holder_key in ("items", "points"):
        reply: dict[str, Any] = {"data": {holder_key: list(items), "offset": 0}, "truncated": False}
        size = _list_sizes(reply, reply["data"], holder_key, items)
        for n in range(len(items) + 1):
            for continuation in (None, {"offset": n, "limit": n or 1}, {"start": "2026-11-01T00:00:00Z"}):
                reply["data"][holder_key] = items[:n]
                reply["continue_with"] = continuation
                assert size(n, continuation) == json_size(reply)


class CountingValidity:
    """A tool's input check that counts its calls and refuses a continuation past ``max_offset`` (as a
    schema's ``maximum`` on ``offset`` does) or for a series start in ``refused``."""

    def __init__(self, max_offset: int, refused: frozenset[str] = frozenset()) -> None:
        self.max_offset, self.refused, self.calls = max_offset, refused, 0

    def is_valid(self, instance: Any) -> bool:
        self.calls += 1
        return instance.get("offset", 0) <= self.max_offset and instance.get("start") not in self.refused


def test_a_series_cut_checks_a_continuation_only_where_it_decides_the_fit() -> None:
    """A series (``data.points``) cut the same way: the same points and continuation as checking at every
    step of the search (``cut_prefix`` without ``unchecked``), about one check per cut — also when the
    continuation from the first point left out is refused."""
    from mcp_app.inline_prefix import cut_prefix
    from mcp_app.inline_prefix import valid_continuation as _valid

    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    points = [{"time": (t0 + timedelta(minutes=5 * i)).isoformat(), "value": i / 3} for i in range(400)]
    args = {"context_handle": HANDLE, "device_ids": ["P-1"], "start": points[0]["time"]}
    rest = {k: v for k, v in args.items() if k != "context_handle"}
    for refused in (frozenset(), frozenset(p["time"] for p in points[50:200])):
        check = CountingValidity(0, refused)
        reply = fit_inline(
            {"data": {"points": list(points)}, "truncated": False, "continue_with": None},
            args,
            3000,
            check,
            series_start="start",
        )
        reference = {"data": {"points": list(points)}, "truncated": False, "continue_with": None}
        every = CountingValidity(0, refused)
        kept = cut_prefix(
            reference,
            ("data", "points"),
            3000,
            lambda n, every=every: (
                _valid({**rest, "start": points[n]["time"]}, args, every) if n < len(points) else None
            ),
            pure=True,
        )
        assert (len(reply["data"]["points"]), reply["continue_with"]) == (kept, reference["continue_with"])
        assert 0 < kept < len(points) and json_size(reply) <= 3000
        assert check.calls <= 3 < every.calls


def cut_checking_every_step(full: dict[str, Any], args: dict[str, Any], limit: int, check: CountingValidity) -> Any:
    """The reference: the longest prefix that fits with the continuation the reply would carry (checked)."""
    items = full["data"]["items"]
    offset = full["data"]["offset"]
    best: Any = None
    for n in range(1, len(items) + 1):
        more = {**{k: v for k, v in args.items() if k != "context_handle"}, "offset": offset + n, "limit": n}
        offered = more if check.is_valid({**more, "context_handle": HANDLE}) else None
        reply = copy.deepcopy(full)
        reply["data"]["items"] = items[:n]
        reply["continue_with"] = offered
        if json_size(reply) <= limit:
            best = (n, offered)
    return best


def test_the_cut_checks_a_continuation_only_where_it_decides_the_fit() -> None:
    """The search sizes each prefix with the continuation unchecked and checks it only where checking
    changes whether the prefix fits (``cut_prefix(unchecked=…)``): the same prefix and continuation as
    checking at every step, with about one check per cut instead of one per step — including where only
    a refused continuation (``null``, shorter) lets one more item fit."""
    items = [{"element_id": f"J-{i}", "blob": "x" * (40 + i % 7)} for i in range(300)]
    for offset, max_offset in ((0, 10_000), (40, 10_000), (9_700, 9_800), (9_950, 9_990), (0, 0)):
        for limit in (1500, 3000, 6000):
            full = {
                "data": {"items": items, "offset": offset, "has_more": True},
                "truncated": False,
                "continue_with": None,
            }
            args = {"context_handle": HANDLE, "element_type": "junction", "limit": 300, "offset": offset}
            check = CountingValidity(max_offset)
            reply = fit_inline(copy.deepcopy(full), args, limit, check)
            kept = len(reply["data"]["items"])
            assert (kept, reply["continue_with"]) == cut_checking_every_step(
                full, args, limit, CountingValidity(max_offset)
            )
            assert json_size(reply) <= limit
            assert check.calls <= 3  # the search's steps (≈ 9 for 300 items) are not each checked

    # The band where the refused continuation decides: a prefix that fits only with ``continue_with: null``.
    full = {"data": {"items": items, "offset": 0, "has_more": True}, "truncated": False, "continue_with": None}
    args = {"context_handle": HANDLE, "element_type": "junction", "limit": 300, "offset": 0}
    free = fit_inline(copy.deepcopy(full), args, 3000, CountingValidity(10_000))
    n = len(free["data"]["items"])
    check = CountingValidity(n)  # the continuation after n + 1 items is refused: is n + 1 kept, with null?
    reply = fit_inline(copy.deepcopy(full), args, 3000, check)
    assert len(reply["data"]["items"]) == n + 1 and reply["continue_with"] is None  # fits only with null
    assert (len(reply["data"]["items"]), reply["continue_with"]) == cut_checking_every_step(
        full, args, 3000, CountingValidity(n)
    )
