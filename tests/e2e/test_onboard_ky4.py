"""Issue 20's "done when": a utility onboarded in its own coordinates — WNTR's ky4.inp imported with
``--crs EPSG:3089`` (Kentucky state plane, US feet) and a GeoPackage layer of its pipes written by GDAL in
EPSG:3089 — then, over MCP against a real server: a junction found by ``query_nearby_elements`` at its
pyproj-transformed position within 1 m, a GIS feature linked to a pipe, and pump power and pressure read
in both unit systems with the right labels (REST answering the same). Rows are committed: the server is
another process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import wntr
from django.core.management import call_command
from pyproj import Transformer

from contexts import dev_issuer
from contexts.grants import tool_catalog
from contexts.models import Principal, Project
from contexts.services import context_create
from queries.importer.epanet import local_day_start, wntr_network_path
from tests.contexts import factories
from tests.support.gis_files import Feature, write_layer
from tests.support.net1 import call_tool_raw
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

SLUG, SUB = "ky4-onboarded", "ky4-engineer"
KY4 = wntr_network_path("ky4.inp")
HP_W = 745.69987158227022
PSI_PER_M = 1.4223343307  # pint's m_H2O


def _pipes_layer(tmp: Path) -> Path:
    wn = wntr.network.WaterNetworkModel(str(KY4))
    features = []
    for i, name in enumerate(sorted(wn.pipe_name_list)):
        link = wn.get_link(name)
        coords = [wn.get_node(link.start_node_name).coordinates, *link.vertices,
                  wn.get_node(link.end_node_name).coordinates]  # fmt: skip
        features.append(
            Feature(
                {"ASSET_ID": name, "MATERIAL": "DI" if i % 2 else "PVC", "DISTRICT": f"Zone {i % 4}"},
                {"type": "LineString", "coordinates": [[float(x), float(y)] for x, y in coords]},
            )
        )
    return write_layer(tmp, "ky4_pipes", features, crs="EPSG:3089")


@pytest.fixture
def onboarded(django_db_blocker: Any, tmp_path: Path) -> Iterator[str]:
    """The project onboarded through the commands a utility runs; yields a context handle of its engineer."""
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        call_command("project_create", SLUG, "--timezone", "America/New_York")
        call_command("import_network", str(KY4), "--project", SLUG, "--crs", "EPSG:3089", "--baseline-hours", "1")
        link = ["--element-type", "pipe", "--element-field", "ASSET_ID", "--district-field", "DISTRICT"]
        call_command("import_gis", str(_pipes_layer(tmp_path)), "--project", SLUG, "--layer-key", "pipes", *link)
        call_command("membership_grant", "--project", SLUG, "--sub", SUB, "--permissions",
                     "webgis.view simulation.view")  # fmt: skip
        token = factories.token(Principal.objects.get(subject=SUB))
        catalog, task_scoped = tool_catalog()
        created = context_create(token=token, project_slug=SLUG, session_id="ky4-1", purpose="ordinary_chat",
                                 catalog=catalog, task_scoped=task_scoped)  # fmt: skip
    try:
        yield created.handle
    finally:
        with django_db_blocker.unblock():
            call_command("project_delete", SLUG, "--reason", "test over")
            Principal.objects.filter(subject=SUB).delete()


def _units(django_db_blocker: Any, system: str) -> None:
    with django_db_blocker.unblock():
        call_command("project_set_units", SLUG, "--units", system)


def test_ky4_onboarded_in_its_own_crs(
    start_server: Callable[..., ServerProcess], onboarded: str, django_db_blocker: Any
) -> None:
    server = start_server()
    bearer = dev_issuer.mint_token(subject=SUB, client_id=factories.HOST_CLIENT, scopes=["mcp.query"], ttl_s=600)

    def call(tool: str, **args: Any) -> dict[str, Any]:
        reply = call_tool_raw(server, tool, args, bearer=bearer, context_handle=onboarded)
        assert reply["result"].get("isError") is not True, reply
        return reply["result"]["structuredContent"]

    # 1. A junction at its true position: pyproj's transform of its .inp coordinates.
    wn = wntr.network.WaterNetworkModel(str(KY4))
    to_wgs = Transformer.from_crs("EPSG:3089", "EPSG:4326", always_xy=True)
    for name in ("J-1", "J-500", wn.junction_name_list[-1]):
        lon, lat = to_wgs.transform(*wn.get_node(name).coordinates)
        out = call("query_nearby_elements", center=[lon, lat], element_type="junction", radius_m=1, limit=5)
        nearest = out["data"]["items"][0]  # (a pump's inlet and outlet junctions share one position)
        assert (nearest["element_id"], nearest["distance_m"] < 0.01) == (name, True)

    # 2. A GIS feature of the imported layer, linked to its pipe; the pipe's register from the feature.
    feature = call("get_source_gis_properties", layer_key="pipes", source_fid="1")
    pipe = feature["data"]["properties"]["ASSET_ID"]
    assert feature["data"]["matched_element"] == {"element_type": "pipe", "element_id": pipe}
    assert feature["data"]["layer"]["source_crs"] == "EPSG:3089"
    register = call("get_element_gis_properties", element_type="pipe", element_id=pipe)
    assert (register["data"]["material"], register["data"]["district"]) == ("PVC", "Zone 0")

    # 3. Pump power and pressure in SI, then in US units, with their labels; REST answers the same.
    pump = "~@Pump-1"
    with django_db_blocker.unblock():  # the baseline simulates the project's current local day
        at = local_day_start(Project.objects.get(slug=SLUG)).isoformat()
    power = call("get_element_properties", element_type="pump", element_id=pump)
    assert (power["data"]["properties"]["power"], power["units"]["power"]) == (pytest.approx(150 * HP_W), "W")
    pressure = call("get_model_baseline_at_time", element_type="junction", element_id="J-1", time=at)
    assert pressure["units"]["pressure"] == "m"
    pressure_m = pressure["data"]["values"]["pressure"]
    assert pressure_m == pytest.approx(51.758366, abs=1e-3)

    _units(django_db_blocker, "US")
    power = call("get_element_properties", element_type="pump", element_id=pump)
    assert (power["data"]["properties"]["power"], power["units"]["power"]) == (pytest.approx(150.0), "hp")
    pressure = call("get_model_baseline_at_time", element_type="junction", element_id="J-1", time=at)
    assert (pressure["data"]["values"]["pressure"], pressure["units"]["pressure"]) == (
        pytest.approx(pressure_m * PSI_PER_M), "psi")  # fmt: skip
    assert pressure["units"]["head"] == "ft" and pressure["units"]["quality"] == "%"  # ky4 runs a TRACE

    api = dev_issuer.mint_token(subject=SUB, client_id=factories.HOST_CLIENT, scopes=["api.read"], ttl_s=600,
                                audience="tjwater-api")  # fmt: skip
    rest = httpx2.get(f"{server.url}/api/v1/projects/{SLUG}/pumps/properties", params={"element_id": pump},
                      headers={"Authorization": f"Bearer {api}"}, timeout=30).json()  # fmt: skip
    assert (rest["data"], rest["units"]) == (power["data"], power["units"])
    _units(django_db_blocker, "SI")
    power = call("get_element_properties", element_type="pump", element_id=pump)
    assert power["units"]["power"] == "W"
