"""import_gis with real files GDAL wrote (a GeoPackage and a zipped Shapefile of ky4's pipes in Kentucky
state plane, US feet): transformed to WGS84 as pyproj does, attributes kept, linked to model elements,
answered by the GIS tools, replaced atomically, bad features reported by fid."""

from __future__ import annotations

import json
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wntr
from django.core.management import call_command
from django.core.management.base import CommandError
from pyproj import Geod, Transformer

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.gis import GisImportError, import_gis
from queries.models import ElementGisProperties, GisFeature, GisLayer
from queries.services.gis import get_element_gis_properties, get_source_gis_properties
from tests.queries.factories import service_scope
from tests.support.gis_files import Feature, write_layer, write_zipped_shapefile

KY4 = wntr_network_path("ky4.inp")
GEOD = Geod(ellps="WGS84")
TO_WGS = Transformer.from_crs("EPSG:3089", "EPSG:4326", always_xy=True)


def pipe_features(count: int, *, bogus: int = 0) -> list[Feature]:
    """The first ``count`` pipes of ky4 as LineStrings in EPSG:3089 (the .inp's own coordinates), with
    an asset id, material, year and district; ``bogus`` more features name no model pipe."""
    wn = wntr.network.WaterNetworkModel(str(KY4))
    out = []
    for i, name in enumerate(sorted(wn.pipe_name_list)[:count]):
        link = wn.get_link(name)
        coords = [wn.get_node(link.start_node_name).coordinates, *link.vertices,
                  wn.get_node(link.end_node_name).coordinates]  # fmt: skip
        out.append(Feature(
            {"ASSET_ID": name, "MATERIAL": "DI" if i % 2 else "PVC", "INSTALL_YEAR": 1970 + i,
             "DISTRICT": f"Zone {i % 3}", "NOTE": f"main {i}"},
            {"type": "LineString", "coordinates": [list(map(float, c)) for c in coords]},
        ))  # fmt: skip
    for j in range(bogus):
        line = {"type": "LineString", "coordinates": [[4971350.0, 3905604.0], [4971450.0, 3905704.0]]}
        attrs = {"ASSET_ID": f"GONE-{j}", "MATERIAL": "CI", "INSTALL_YEAR": 1950, "DISTRICT": "Old", "NOTE": "gone"}
        out.append(Feature(attrs, line))
    return out


@pytest.fixture
def ky4(project: Project) -> Project:
    import_network(project=project, inp_path=KY4, crs="EPSG:3089", baseline_hours=0)
    return project


def _max_error_m(feature: GisFeature, source: Feature) -> float:
    want = [TO_WGS.transform(x, y) for x, y in source.geometry["coordinates"]]
    got = feature.geom.coords
    _, _, dist = GEOD.inv(*zip(*got, strict=True), *zip(*want, strict=True))
    return float(np.max(dist))


def test_geopackage_in_state_plane_feet(ky4: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    features = pipe_features(40, bogus=1)
    gpkg = write_layer(tmp_path, "ky4_pipes", features, crs="EPSG:3089")
    call_command("import_gis", str(gpkg), "--project", ky4.slug, "--layer-key", "mains", "--element-type", "pipe",
                 "--element-field", "ASSET_ID", "--district-field", "DISTRICT")  # fmt: skip
    assert re.fullmatch(
        r"imported layer ky4_pipes of ky4_pipes.gpkg as mains into import-test \(EPSG:3089 → EPSG:4326\) in "
        r"[0-9.]+s: 41 features, 0 skipped, 40 linked to pipes, 1 naming no model element \(fids 41\), "
        r"40 districts set\n",
        capsys.readouterr().out,
    )
    layer = GisLayer.objects.get(project=ky4, layer_key="mains")
    assert (layer.name, layer.geometry_type, layer.source_crs, layer.source_name) == (
        "ky4_pipes", "LineString", "EPSG:3089", "ky4_pipes.gpkg"
    )  # fmt: skip
    rows = {f.source_fid: f for f in GisFeature.objects.filter(layer=layer)}
    assert sorted(rows, key=int) == [str(i) for i in range(1, 42)]  # GeoPackage fids start at 1
    errors = [_max_error_m(rows[str(i + 1)], f) for i, f in enumerate(features)]
    assert max(errors) <= 0.01  # exactly pyproj's transform of the file's coordinates
    first = rows["1"]
    assert first.properties == features[0].properties
    assert (first.element_type, first.element_id) == ("pipe", features[0].properties["ASSET_ID"])
    assert (rows["41"].element_type, rows["41"].element_id) == ("", "")

    scope = service_scope(ky4, {"webgis.view"})
    source = get_source_gis_properties(scope=scope, layer_key="mains", source_fid="1")
    assert source.data.properties == features[0].properties
    assert source.data.matched_element.element_id == features[0].properties["ASSET_ID"]
    assert source.data.layer.source_crs == "EPSG:3089"
    element = get_element_gis_properties(scope=scope, element_type="pipe", element_id=first.element_id)
    assert (element.data.material, element.data.install_year, element.data.district) == ("PVC", 1970, "Zone 0")
    assert element.data.properties["NOTE"] == "main 0"
    assert ElementGisProperties.objects.filter(project=ky4, element_type="pipe").count() == 40


def test_zipped_shapefile_without_prj_needs_crs(ky4: Project, tmp_path: Path) -> None:
    features = pipe_features(10)
    archive = write_zipped_shapefile(tmp_path, "pipes", features, crs=None)
    with pytest.raises(GisImportError, match=r"pipes.zip \(layer pipes\) has no CRS: give it with --crs EPSG:NNNN"):
        import_gis(project=ky4, path=archive, layer_key="shp")
    summary = import_gis(project=ky4, path=archive, layer_key="shp", crs="EPSG:3089", element_type="pipe",
                         element_field="ASSET_ID")  # fmt: skip
    assert (summary.features, summary.linked, summary.skipped) == (10, 10, [])
    rows = {f.source_fid: f for f in GisFeature.objects.filter(layer__project=ky4, layer__layer_key="shp")}
    assert sorted(rows, key=int) == [str(i) for i in range(10)]  # Shapefile fids are record numbers from 0
    assert max(_max_error_m(rows[str(i)], f) for i, f in enumerate(features)) <= 0.01
    assert rows["3"].properties["ASSET_ID"] == features[3].properties["ASSET_ID"]
    with pytest.raises(GisImportError, match="says its CRS is EPSG:3089, --crs says EPSG:32616"):
        import_gis(project=ky4, path=_with_prj(tmp_path, features), layer_key="x", crs="EPSG:32616")


def _with_prj(tmp_path: Path, features: list[Feature]) -> Path:
    folder = tmp_path / "with-prj"
    folder.mkdir()
    return write_zipped_shapefile(folder, "pipes", features, crs="EPSG:3089")


def test_reimport_replaces_atomically_and_bad_features_are_reported(ky4: Project, tmp_path: Path) -> None:
    import_gis(project=ky4, path=write_layer(tmp_path, "v1", pipe_features(5), crs="EPSG:3089"), layer_key="mains")
    # Two bad features: a line of one point (GEOS refuses it) and a point far outside Kentucky.
    bad = [
        *pipe_features(3),
        Feature({"ASSET_ID": "X"}, {"type": "LineString", "coordinates": [[4971350.0, 3905604.0]]}),
        Feature({"ASSET_ID": "Y"}, {"type": "LineString", "coordinates": [[1e8, 0.0], [1e8, 10.0]]}),
    ]
    (tmp_path / "v2").mkdir()
    v2 = write_layer(tmp_path / "v2", "v2", bad, crs="EPSG:3089")
    with pytest.raises(GisImportError) as info:
        import_gis(project=ky4, path=v2, layer_key="mains", strict=True)
    assert str(info.value) == (
        "v2.gpkg: feature fid 4: invalid Linestring geometry (e.g. a line of fewer than 2 points) "
        "(--strict: nothing imported)"
    )
    assert GisFeature.objects.filter(layer__project=ky4, layer__layer_key="mains").count() == 5  # old layer kept
    summary = import_gis(project=ky4, path=v2, layer_key="mains")
    assert summary.features == 3 and [fid for fid, _ in summary.skipped] == ["4", "5"]
    assert summary.skipped[1][1].startswith("geometry lies outside the CRS's area of use once transformed (lon ")
    layer = GisLayer.objects.get(project=ky4, layer_key="mains")
    assert layer.name == "v2" and GisFeature.objects.filter(layer=layer).count() == 3
    assert GisLayer.objects.filter(project=ky4).count() == 1


def test_command_refusals(ky4: Project, tmp_path: Path) -> None:
    gpkg = write_layer(tmp_path, "pipes", pipe_features(2), crs="EPSG:3089")
    cases = [
        ([str(tmp_path / "nope.gpkg")], "GIS file not found"),
        ([str(KY4)], "ky4.inp: not a GeoPackage, Shapefile (.shp or .zip) or GeoJSON file"),
        ([str(gpkg), "--source-layer", "valves"], "pipes.gpkg has no layer 'valves'; its layers: pipes"),
        ([str(gpkg), "--element-type", "pipe", "--element-field", "ID"], "layer pipes has no field 'ID'; its fields"),
        ([str(gpkg), "--element-type", "pipe"], "--element-type and --element-field go together"),
        ([str(gpkg), "--district-field", "DISTRICT"], "--district-field sets the district of linked elements"),
    ]
    for args, message in cases:
        with pytest.raises(CommandError) as info:
            call_command("import_gis", *args, "--project", ky4.slug, "--layer-key", "k")
        assert message in str(info.value)
    assert not GisLayer.objects.filter(project=ky4).exists()


def test_a_feature_without_geometry_is_kept(ky4: Project, tmp_path: Path) -> None:
    features = [*pipe_features(1), Feature({"ASSET_ID": "NOTE-1", "NOTE": "attributes only"}, None)]
    summary = import_gis(project=ky4, path=write_layer(tmp_path, "mixed", features, crs="EPSG:3089"), layer_key="m")
    assert (summary.features, summary.skipped) == (2, [])
    assert summary.without_geometry == ["2"]  # kept, and listed
    row = GisFeature.objects.get(layer__project=ky4, layer__layer_key="m", source_fid="2")
    assert (row.geom, row.properties["NOTE"]) == (None, "attributes only")
    with pytest.raises(GisImportError, match=r"mixed.gpkg: feature fid 2: no geometry \(--strict: nothing imported\)"):
        import_gis(project=ky4, path=tmp_path / "mixed.gpkg", layer_key="m", strict=True)
    assert GisFeature.objects.filter(layer__project=ky4, layer__layer_key="m").count() == 2


def test_geojson_is_wgs84_by_definition(ky4: Project, tmp_path: Path) -> None:
    lonlat = [list(TO_WGS.transform(*xy)) for xy in pipe_features(1)[0].geometry["coordinates"]]
    path = write_layer(tmp_path, "hydrants", [Feature({"HYD": "H-1"}, {"type": "LineString", "coordinates": lonlat})],
                       crs=None, driver="GeoJSON", suffix=".geojson")  # fmt: skip
    summary = import_gis(project=ky4, path=path, layer_key="hydrants")
    assert (summary.features, summary.source_crs) == (1, "EPSG:4326")
    feature = GisFeature.objects.get(layer__project=ky4, layer__layer_key="hydrants")
    assert feature.properties == {"HYD": "H-1"}
    assert np.allclose(np.array(feature.geom.coords), np.array(lonlat), atol=1e-9, rtol=0)


# --- bounded whatever the file (issue 41) ----------------------------------------------------------------


def test_a_layer_key_the_tools_cannot_read_is_refused(ky4: Project, tmp_path: Path) -> None:
    gpkg = write_layer(tmp_path, "pipes", pipe_features(2), crs="EPSG:3089")
    for key in ("water mains", "mains/2025", "x" * 65, ""):
        with pytest.raises(GisImportError, match=r"--layer-key must be 1 to 64 letters, digits, '_', '.' or '-'"):
            import_gis(project=ky4, path=gpkg, layer_key=key)
    assert import_gis(project=ky4, path=gpkg, layer_key="water_mains-2025.v1").features == 2
    assert not GisLayer.objects.filter(project=ky4).exclude(layer_key="water_mains-2025.v1").exists()


def test_a_register_value_longer_than_its_column_is_reported_never_cut(ky4: Project, tmp_path: Path) -> None:
    features = pipe_features(3)
    features[1].properties["DISTRICT"] = "Z" * 65
    gpkg = write_layer(tmp_path, "pipes", features, crs="EPSG:3089")
    link = {"element_type": "pipe", "element_field": "ASSET_ID", "district_field": "DISTRICT"}
    with pytest.raises(GisImportError, match=r"fid 2: district 'Z+'… is longer than 64 characters \(the register's "
                       r"district column\) \(--strict: nothing imported\)"):  # fmt: skip
        import_gis(project=ky4, path=gpkg, layer_key="mains", strict=True, **link)
    assert not GisLayer.objects.filter(project=ky4).exists()
    summary = import_gis(project=ky4, path=gpkg, layer_key="mains", **link)
    assert [fid for fid, _ in summary.skipped] == ["2"] and (summary.features, summary.linked) == (2, 2)
    districts = set(ElementGisProperties.objects.filter(project=ky4).values_list("district", flat=True))
    assert districts == {"Zone 0", "Zone 2"}  # the long one is not stored cut to 64


def test_a_huge_property_is_refused_by_fid(ky4: Project, tmp_path: Path) -> None:
    features = pipe_features(2)
    features[0].properties["NOTE"] = "n" * 900_000
    gpkg = write_layer(tmp_path, "pipes", features, crs="EPSG:3089")
    summary = import_gis(project=ky4, path=gpkg, layer_key="mains")
    assert summary.skipped == [("1", "field 'NOTE' is longer than 64 KiB (TJWATER_IMPORT_MAX_FIELD_BYTES)")]
    longest = max(len(str(v)) for f in GisFeature.objects.filter(layer__project=ky4) for v in f.properties.values())
    assert longest < 100


def test_an_invalid_polygon_is_reported(ky4: Project, tmp_path: Path) -> None:
    x, y = 4971350.0, 3905604.0
    bowtie = {"type": "Polygon", "coordinates": [[[x, y], [x + 100, y + 100], [x + 100, y], [x, y + 100], [x, y]]]}
    square = {"type": "Polygon", "coordinates": [[[x, y], [x + 100, y], [x + 100, y + 100], [x, y + 100], [x, y]]]}
    gpkg = write_layer(tmp_path, "zones", [Feature({"Z": "a"}, square), Feature({"Z": "b"}, bowtie)], crs="EPSG:3089")
    summary = import_gis(project=ky4, path=gpkg, layer_key="zones")
    assert summary.features == 1 and [fid for fid, _ in summary.skipped] == ["2"]
    assert summary.skipped[0][1].startswith("invalid Polygon geometry (Self-intersection")
    with pytest.raises(GisImportError, match=r"fid 2: invalid Polygon geometry \(Self-intersection"):
        import_gis(project=ky4, path=gpkg, layer_key="zones2", strict=True)


def test_the_feature_and_field_bounds(ky4: Project, tmp_path: Path, settings: Any) -> None:
    gpkg = write_layer(tmp_path, "pipes", pipe_features(5), crs="EPSG:3089")
    settings.TJWATER_IMPORT_MAX_FEATURES = 4
    with pytest.raises(GisImportError, match=r"pipes.gpkg \(layer 'pipes'\) has 5 features, more than 4 "
                       r"\(TJWATER_IMPORT_MAX_FEATURES\): refused"):  # fmt: skip
        import_gis(project=ky4, path=gpkg, layer_key="mains")
    settings.TJWATER_IMPORT_MAX_FEATURES = 5
    settings.TJWATER_IMPORT_MAX_COLUMNS = 4
    with pytest.raises(GisImportError, match=r"has 5 fields, more than 4 \(TJWATER_IMPORT_MAX_COLUMNS\): refused"):
        import_gis(project=ky4, path=gpkg, layer_key="mains")
    assert not GisLayer.objects.filter(project=ky4).exists()
    settings.TJWATER_IMPORT_MAX_COLUMNS = 5
    assert import_gis(project=ky4, path=gpkg, layer_key="mains").features == 5


def _hostile_zip(tmp_path: Path, name: str, member: str, *, link: bool = False) -> Path:
    """The pipes Shapefile zipped with one more member ``member`` (a symbolic link when ``link``)."""
    archive = write_zipped_shapefile(tmp_path, name, pipe_features(2), crs="EPSG:3089")
    with zipfile.ZipFile(archive, "a") as zf:
        info = zipfile.ZipInfo(member)
        if link:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd" if link else "x")
    return archive


def test_zip_members_that_escape_or_link_are_refused(ky4: Project, tmp_path: Path) -> None:
    cases = [
        (_hostile_zip(tmp_path, "dots", "../../outside.txt"), "dots.zip: member '../../outside.txt' points outside"),
        (_hostile_zip(tmp_path, "abs", "/tmp/abs.txt"), "abs.zip: member '/tmp/abs.txt' points outside the archive"),
        (_hostile_zip(tmp_path, "link", "pipes.cpg", link=True), "link.zip: member 'pipes.cpg' is a symbolic link"),
    ]
    for archive, message in cases:
        with pytest.raises(GisImportError) as info:
            import_gis(project=ky4, path=archive, layer_key="shp")
        assert str(info.value).startswith(message), str(info.value)
    assert not GisLayer.objects.filter(project=ky4).exists()
    assert not (tmp_path.parent / "outside.txt").exists()


def test_sql_in_layer_and_field_names_is_data(ky4: Project, tmp_path: Path) -> None:
    import_gis(project=ky4, path=write_layer(tmp_path, "kept", pipe_features(3), crs="EPSG:3089"), layer_key="kept")
    layer = "x'; DROP TABLE queries_gisfeature; --"
    column = 'a"); DELETE FROM queries_gisfeature; --'
    folder = tmp_path / "hostile"
    folder.mkdir()
    features = [Feature({column: "v", "ASSET_ID": "1"}, pipe_features(1)[0].geometry)]
    gpkg = write_layer(folder, layer, features, crs="EPSG:3089")
    summary = import_gis(project=ky4, path=gpkg, layer_key="hostile", source_layer=layer, element_type="pipe",
                         element_field=column)  # fmt: skip
    assert summary.features == 1
    stored = GisLayer.objects.get(project=ky4, layer_key="hostile")
    assert stored.name == layer
    assert GisFeature.objects.get(layer=stored).properties == {column: "v", "ASSET_ID": "1"}
    assert GisFeature.objects.filter(layer__project=ky4, layer__layer_key="kept").count() == 3  # tables intact


def test_a_nul_or_a_lone_surrogate_in_geojson_is_refused_by_line(ky4: Project, tmp_path: Path) -> None:
    """GDAL reads strings as C strings: it would cut 'x\\u0000y' to 'x' (a field name too) and store U+FFFD
    for a lone surrogate, without a word. Refused by line before GDAL reads the file; the text '\\\\u0000'
    (an escaped backslash, then 'u0000') is kept as written."""

    def collection(properties: dict[str, Any]) -> str:
        feature = {"type": "Feature", "properties": properties, "geometry": {"type": "Point", "coordinates": [-85, 38]}}
        return json.dumps({"type": "FeatureCollection", "features": [feature]}, indent=1)

    path = tmp_path / "h.geojson"
    for properties, what in (
        ({"NOTE": "x\0y"}, r"a NUL character \(\\u0000\)"),
        ({"N\0TE": "x"}, r"a NUL character \(\\u0000\)"),
        ({"NOTE": "x\ud800"}, r"a lone UTF-16 surrogate \(\\ud800\)"),
    ):
        text = collection(properties)
        path.write_text(text)
        line = next(n for n, row in enumerate(text.splitlines(), 1) if "NOTE" in row or "N\\u0000TE" in row)
        assert line > 1
        with pytest.raises(GisImportError, match=rf"h.geojson: line {line} holds {what}"):
            import_gis(project=ky4, path=path, layer_key="h")
    assert not GisLayer.objects.filter(project=ky4).exists()
    path.write_text(collection({"NOTE": "C:\\u0000 \U0001f600"}))
    import_gis(project=ky4, path=path, layer_key="h")
    assert GisFeature.objects.get(layer__project=ky4).properties == {"NOTE": "C:\\u0000 \U0001f600"}
