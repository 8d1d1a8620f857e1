"""Valve segments (issue 42 item 2): a valve layer imported with ``import_gis --as-valves`` cuts the
project's current model version into the segments ``wntr.metrics.valve_segments`` computes for the same
layer; bad valves are reported by fid; no valve layer is CAPABILITY_NOT_AVAILABLE; computed once per
(model version, valve layer)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
import wntr
from django.core.management import call_command
from django.core.management.base import CommandError

from contexts.errors import InvalidParameter
from contexts.models import Project
from queries.errors import CapabilityGap
from queries.importer.epanet import import_network, wntr_network_path
from queries.models import IsolationValve, ValveSegments
from queries.runs.segments import valve_segments

NET3 = wntr_network_path("Net3.inp")


def _valve_file(tmp: Path, rows: list[tuple[str, str]], name: str = "valves.geojson") -> Path:
    """A GeoJSON of valve points (WGS84), one per (link, node), with the link and node as attributes."""
    features = [
        {"type": "Feature", "properties": {"VALVE_ID": f"V-{i}", "PIPE": link, "NODE": node},
         "geometry": {"type": "Point", "coordinates": [-85.5 + i * 1e-5, 38.0]}}
        for i, (link, node) in enumerate(rows)
    ]  # fmt: skip
    path = tmp / name
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return path


def _import(path: Path, project: Project, *extra: str) -> str:
    out = StringIO()
    call_command("import_gis", str(path), "--project", project.slug, "--layer-key", "valves", "--as-valves",
                 "--link-field", "PIPE", "--node-field", "NODE", *extra, stdout=out, stderr=out)  # fmt: skip
    return out.getvalue()


@pytest.fixture
def net3(project: Project) -> Project:
    import_network(project=project, inp_path=NET3, center=(-85.5, 38.0), scale=30.0, baseline_hours=0)
    return project


def test_net3_segments_equal_wntr_for_the_same_layer(net3: Project, tmp_path: Path) -> None:
    wn = wntr.network.WaterNetworkModel(str(NET3))
    layer = wntr.network.layer.generate_valve_layer(wn, "strategic", 2, seed=123)
    out = _import(_valve_file(tmp_path, list(zip(layer["link"], layer["node"], strict=True))), net3)
    assert f"{len(layer)} isolation valves" in out
    expected_nodes, expected_links, _ = wntr.metrics.valve_segments(wn.to_graph(), layer)
    got = valve_segments(net3)
    assert got.node_segments == {str(k): int(v) for k, v in expected_nodes.items()}
    assert got.link_segments == {str(k): int(v) for k, v in expected_links.items()}
    assert len(set(got.link_segments.values())) > 10 and got.stale_valves == [] and got.model_version == 1
    # Computed once: the second answer is read back, not recomputed.
    ours = ValveSegments.objects.filter(layer__project=net3)
    stored = ours.get()
    assert valve_segments(net3) == got and ours.get().computed_at == stored.computed_at


def test_bad_valves_are_reported_by_fid_and_strict_refuses(net3: Project, tmp_path: Path) -> None:
    pipe10 = wntr.network.WaterNetworkModel(str(NET3)).get_link("10")
    rows = [("10", pipe10.start_node_name), ("NOPE", "10"), ("10", "not-an-end")]
    path = _valve_file(tmp_path, rows)
    with pytest.raises(
        CommandError, match=r"feature fid 1: valve names link 'NOPE' \(PIPE\), which is not in the model"
    ):
        _import(path, net3, "--strict")
    ours = IsolationValve.objects.filter(layer__project=net3)  # the demo, when loaded, has valves of its own
    assert not ours.exists()
    out = _import(path, net3)
    assert "skipped feature fid 2: valve names node 'not-an-end' (NODE), which is not an end of link '10'" in out
    assert list(ours.values_list("source_fid", "link_id", "node_id")) == [("0", "10", pipe10.start_node_name)]
    assert "1 isolation valves" in out


def test_without_a_valve_layer_the_capability_is_missing(net3: Project, tmp_path: Path) -> None:
    with pytest.raises(CapabilityGap, match=r"has no valve layer: valve isolation needs the isolation valves") as info:
        valve_segments(net3)
    assert info.value.code == "CAPABILITY_NOT_AVAILABLE"
    with pytest.raises(CommandError, match=r"--as-valves needs --link-field and --node-field"):
        call_command("import_gis", str(_valve_file(tmp_path, [])), "--project", net3.slug, "--layer-key", "v",
                     "--as-valves")  # fmt: skip
    _import(_valve_file(tmp_path, [("10", "10")]), net3)
    call_command("import_gis", str(_valve_file(tmp_path, [("20", "20")], "b.geojson")), "--project", net3.slug,
                 "--layer-key", "valves-b", "--as-valves", "--link-field", "PIPE", "--node-field", "NODE",
                 stdout=StringIO(), stderr=StringIO())  # fmt: skip
    with pytest.raises(InvalidParameter, match=r"has 2 valve layers \(valves, valves-b\): name one"):
        valve_segments(net3)
    assert valve_segments(net3, "valves-b").layer_key == "valves-b"


def test_a_new_model_version_is_cut_again_and_names_valves_it_lacks(net3: Project, tmp_path: Path) -> None:
    """Pipe 103 is in a loop and under no control: Net3 without it is still one connected network."""
    wn = wntr.network.WaterNetworkModel(str(NET3))
    valves = [("103", wn.get_link("103").start_node_name), ("20", wn.get_link("20").start_node_name)]
    _import(_valve_file(tmp_path, valves), net3)
    first = valve_segments(net3)
    wn.remove_link("103")
    smaller = tmp_path / "net3-without-103.inp"
    wntr.network.write_inpfile(wn, str(smaller))
    import_network(project=net3, inp_path=smaller, center=(-85.5, 38.0), scale=30.0, baseline_hours=0)
    second = valve_segments(net3)
    assert (first.model_version, second.model_version) == (1, 2)
    assert ValveSegments.objects.filter(layer__project=net3).count() == 2
    assert "103" in first.link_segments and "103" not in second.link_segments
    assert second.stale_valves == ["0"]
    layer = pd.DataFrame({"link": [v[0] for v in valves], "node": [v[1] for v in valves]})
    expected_nodes, _, _ = wntr.metrics.valve_segments(wn.to_graph(), layer)
    assert second.node_segments == {str(k): int(v) for k, v in expected_nodes.items()}
