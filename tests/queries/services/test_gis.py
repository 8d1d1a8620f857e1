"""get_element_gis_properties and get_source_gis_properties over real HTTP against the seeded demo,
values checked against the rows, plus pinned query counts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from queries.models import ElementGisProperties, GisFeature
from queries.services import gis
from tests.queries.services.test_spatial import demo_scope, principal_without_webgis, refused_call
from tests.support.demo import DEMO, DEMO_B, business_error, structured
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


@pytest.fixture(scope="module")
def no_webgis_handle(demo_loaded: None, django_db_blocker: Any) -> Iterator[str]:
    with principal_without_webgis(django_db_blocker) as handle:
        yield handle


def test_element_gis_properties_match_the_register(demo_call: Callable[..., dict[str, Any]]) -> None:
    for element_type, element_id in (("pipe", "LINK-1523"), ("junction", "JUNCTION-0"), ("tank", "TANK-3326")):
        row = ElementGisProperties.objects.get(project__slug=DEMO, element_type=element_type, element_id=element_id)
        out = structured(
            demo_call("get_element_gis_properties", {"element_type": element_type, "element_id": element_id})
        )
        assert out["data"] == {
            "element_type": element_type,
            "element_id": element_id,
            "material": row.material or None,
            "install_year": row.install_year,
            "diameter_class": row.diameter_class or None,
            "district": row.district or None,
            "road": row.road or None,
            "properties": row.properties,
        }
        assert out["source"] == "gis" and out["source_ref"].endswith(f"/gis/elements/{element_type}/{element_id}")
    assert row.material == "" and out["data"]["material"] is None  # the tank: a blank register field is null


def test_element_gis_not_found_and_cross_project(demo_call: Callable[..., dict[str, Any]]) -> None:
    args = {"element_type": "pipe", "element_id": "LINK-1523"}
    assert structured(demo_call("get_element_gis_properties", args, who="bob"))["data"]["element_id"] == "LINK-1523"
    assert business_error(demo_call("get_element_gis_properties", args, who="bob", project=DEMO_B)) == "NOT_FOUND"
    wrong_type = {"element_type": "valve", "element_id": "LINK-1523"}
    assert business_error(demo_call("get_element_gis_properties", wrong_type)) == "NOT_FOUND"
    at_limit = {"element_type": "pipe", "element_id": "L" * 64}
    assert business_error(demo_call("get_element_gis_properties", at_limit)) == "NOT_FOUND"
    for bad in (
        {"element_type": "pipe", "element_id": "L" * 65},
        {"element_type": "pipe", "element_id": ""},
        {"element_type": "hydrant", "element_id": "LINK-1523"},
        {"element_type": "pipe"},
        {**args, "project": "demo-b"},
    ):
        assert demo_call("get_element_gis_properties", bad)["error"]["code"] == -32602, bad


def _feature(layer_key: str, source_fid: str) -> GisFeature:
    return GisFeature.objects.select_related("layer").get(
        layer__project__slug=DEMO, layer__layer_key=layer_key, source_fid=source_fid
    )


def test_source_feature_is_the_raw_gis_feature(demo_call: Callable[..., dict[str, Any]]) -> None:
    feature = _feature("water_mains", "WM-200003")
    out = structured(demo_call("get_source_gis_properties", {"layer_key": "water_mains", "source_fid": "WM-200003"}))
    data = out["data"]
    assert data["source_fid"] == "WM-200003" and data["properties"] == feature.properties
    assert data["matched_element"] == {"element_type": "pipe", "element_id": feature.element_id}
    assert data["properties"]["MODEL_ID"] == feature.element_id  # the GIS id differs from the model id
    assert data["geometry_type"] == "LineString"
    assert data["bbox"] == pytest.approx(list(feature.geom.extent), abs=1e-7)
    layer = feature.layer
    assert data["layer"] == {
        "layer_key": "water_mains",
        "name": layer.name,
        "geometry_type": layer.geometry_type,
        "source_crs": "EPSG:4326",
        "source_name": layer.source_name,
        "exported_at": layer.exported_at.isoformat().replace("+00:00", "Z"),
    }


def test_unmatched_source_features(demo_call: Callable[..., dict[str, Any]]) -> None:
    valve = structured(
        demo_call("get_source_gis_properties", {"layer_key": "isolation_valves", "source_fid": "IV-50000"})
    )
    assert valve["data"]["matched_element"] is None and valve["data"]["geometry_type"] == "Point"
    assert valve["data"]["properties"] == _feature("isolation_valves", "IV-50000").properties
    abandoned = structured(
        demo_call("get_source_gis_properties", {"layer_key": "water_mains", "source_fid": "WM-199999"})
    )
    assert abandoned["data"]["matched_element"] is None
    assert abandoned["data"]["properties"]["STATUS"] == "ABANDONED"


def test_source_feature_not_found_and_cross_project(demo_call: Callable[..., dict[str, Any]]) -> None:
    args = {"layer_key": "water_mains", "source_fid": "WM-200003"}
    assert business_error(demo_call("get_source_gis_properties", args, who="bob", project=DEMO_B)) == "NOT_FOUND"
    in_other_layer = {"layer_key": "isolation_valves", "source_fid": "WM-200003"}
    assert business_error(demo_call("get_source_gis_properties", in_other_layer)) == "NOT_FOUND"
    at_limit = {"layer_key": "k" * 64, "source_fid": "f" * 64}
    assert business_error(demo_call("get_source_gis_properties", at_limit)) == "NOT_FOUND"
    for bad in (
        {"layer_key": "k" * 65, "source_fid": "WM-200003"},
        {"layer_key": "water_mains", "source_fid": "f" * 65},
        {"layer_key": "water mains; drop", "source_fid": "WM-200003"},
        {"layer_key": "water_mains"},
    ):
        assert demo_call("get_source_gis_properties", bad)["error"]["code"] == -32602, bad


def test_query_counts_pinned(demo_loaded: None, django_assert_num_queries: Callable[..., Any]) -> None:
    scope = demo_scope()
    with django_assert_num_queries(1):
        gis.get_element_gis_properties(scope=scope, element_type="pipe", element_id="LINK-1523")
    with django_assert_num_queries(1):
        gis.get_source_gis_properties(scope=scope, layer_key="water_mains", source_fid="WM-200003")


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_element_gis_properties", {"element_type": "pipe", "element_id": "LINK-1523"}),
        ("get_source_gis_properties", {"layer_key": "water_mains", "source_fid": "WM-200003"}),
    ],
)
def test_refused_without_webgis_view(
    demo_server: ServerProcess, no_webgis_handle: str, tool: str, args: dict[str, Any]
) -> None:
    reply = refused_call(demo_server, no_webgis_handle, tool, args)
    assert (reply["error"]["code"], reply["error"]["message"]) == (-32602, f"Unknown tool: {tool}")


# --- issue 23 item 9: one register row larger than the inline cap is reachable ------------------------

BIG_ID = "BIG-GIS-ITEM-9"


@pytest.fixture(scope="module")
def oversized_register_row(demo_loaded: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """A committed register row (the server reads it) whose attributes alone are ≈ 60 KB: 600 ordinary
    attributes and one survey note of ≈ 30 KB of UTF-8."""
    from contexts.models import Project

    properties: dict[str, Any] = {f"attr_{n:03d}": f"value {n}" for n in range(600)}
    properties["survey_note"] = "沿道路东侧敷设，穿越河道处加套管。" * 600
    with django_db_blocker.unblock():
        row = ElementGisProperties.objects.create(
            project=Project.objects.get(slug=DEMO),
            element_type="pipe",
            element_id=BIG_ID,
            material="DI",
            properties=properties,
        )
    yield properties
    with django_db_blocker.unblock():
        ElementGisProperties.objects.filter(pk=row.pk).delete()


def _read_over_http(
    demo_call: Callable[..., dict[str, Any]], args: dict[str, Any], data_path: list[str]
) -> tuple[Any, int]:
    """The value at ``data_path`` read back whole with ``part`` calls over HTTP, reading every member a
    reply leaves out the same way; returns it and the number of calls."""
    value: Any = None
    offset, calls = 0, 0
    while True:
        out = structured(
            demo_call("get_element_gis_properties", {**args, "part": {"data_path": data_path, "offset": offset}})
        )
        calls += 1
        part = out["part"]
        chunk: Any = out
        for segment in data_path:
            chunk = chunk[segment]
        left_out = {tuple(o["data_path"]) for o in out.get("omitted", [])}
        if part["kind"] == "string":
            value = (value or "") + chunk
        else:
            value = value or {}
            for key, member in chunk.items():
                if (*data_path, key) in left_out:
                    member, more = _read_over_http(demo_call, args, [*data_path, key])
                    calls += more
                value[key] = member
        if not part["has_more"]:
            return value, calls
        offset = part["offset"] + part["limit"]


def test_an_element_whose_attributes_exceed_the_inline_cap_is_read_in_parts(
    demo_call: Callable[..., dict[str, Any]], oversized_register_row: dict[str, Any]
) -> None:
    args = {"element_type": "pipe", "element_id": BIG_ID}
    reply = demo_call("get_element_gis_properties", args)
    first = structured(reply)  # not LIMIT_EXCEEDED any more: a reply that fits, naming what it left out
    assert first["truncated"] is True and first["data"]["material"] == "DI"
    omitted = {o["path"]: o for o in first["omitted"]}
    assert omitted["$.data.properties"]["kind"] == "object" and omitted["$.data.properties"]["length"] == 601
    assert first["continue_with"]["part"]["data_path"] == ["data", "properties"]
    assert "Left out to fit inline" in reply["result"]["content"][0]["text"]
    properties, calls = _read_over_http(demo_call, args, ["data", "properties"])
    assert properties == oversized_register_row and calls > 2
    # A path that is not in the result is the caller's error, naming the field.
    bad = demo_call("get_element_gis_properties", {**args, "part": {"data_path": ["data", "geometry"]}})
    assert business_error(bad) == "INVALID_PARAMETER"
    assert "part.data_path" in bad["result"]["structuredContent"]["message"]
