"""EPANET import fidelity against WNTR, georeferencing of a to-scale network, atomic re-import, and
the command's answers to bad input."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import wntr
from django.core.management import call_command
from django.core.management.base import CommandError
from pyproj import Geod, Transformer

from contexts.models import Project
from queries.importer.epanet import (
    BASELINE_START,
    NetworkImportError,
    import_network,
    read_inp,
    simulate,
    wntr_network_path,
)
from queries.models import (
    NETWORK_SCHEMAS,
    Curve,
    Junction,
    LinkBaseline,
    NetworkOptions,
    NetworkSchema,
    NodeBaseline,
    Pattern,
    Pipe,
    Pump,
    Reservoir,
    Tank,
    Valve,
)
from tests.support.servers import ROOT, subprocess_database_url

GEOD = Geod(ellps="WGS84")


def _counts(project: Project) -> dict[str, int]:
    return {
        model.element_type: model.objects.filter(project=project).count()
        for model in (Junction, Reservoir, Tank, Pipe, Pump, Valve)
    }


@pytest.fixture
def net6(project: Project) -> wntr.network.WaterNetworkModel:
    import_network(project=project, inp_path=wntr_network_path("Net6.inp"), scale=70.0, baseline_hours=0)
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net6.inp")))


def test_net6_element_counts_and_properties_match_wntr(project: Project, net6: wntr.network.WaterNetworkModel) -> None:
    wn = net6
    assert _counts(project) == {
        "junction": wn.num_junctions,
        "reservoir": wn.num_reservoirs,
        "tank": wn.num_tanks,
        "pipe": wn.num_pipes,
        "pump": wn.num_pumps,
        "valve": wn.num_valves,
    }
    assert _counts(project) == {"junction": 3323, "reservoir": 1, "tank": 32, "pipe": 3829, "pump": 61, "valve": 2}

    for name, j in list(wn.junctions())[::250]:
        row = Junction.objects.get(project=project, element_id=name)
        assert row.elevation == pytest.approx(j.elevation)
        assert row.base_demand == pytest.approx(j.base_demand)
        assert row.demand_pattern == (j.demand_timeseries_list[0].pattern_name or "")
    for name, t in wn.tanks():
        row = Tank.objects.get(project=project, element_id=name)
        assert (row.elevation, row.init_level, row.min_level, row.max_level, row.diameter) == pytest.approx(
            (t.elevation, t.init_level, t.min_level, t.max_level, t.diameter)
        )
    for name, r in wn.reservoirs():
        assert Reservoir.objects.get(project=project, element_id=name).base_head == pytest.approx(r.base_head)
    for name, p in list(wn.pipes())[::200]:
        row = Pipe.objects.get(project=project, element_id=name)
        assert (row.start_node_id, row.end_node_id) == (p.start_node_name, p.end_node_name)
        assert (row.length, row.diameter, row.roughness, row.minor_loss) == pytest.approx(
            (p.length, p.diameter, p.roughness, p.minor_loss)
        )
        assert row.check_valve == p.check_valve
        assert row.initial_status == ("CV" if p.check_valve else str(p.initial_status).upper())
    head_pumps = [(n, p) for n, p in wn.pumps() if p.pump_type == "HEAD"]
    power_pumps = [(n, p) for n, p in wn.pumps() if p.pump_type == "POWER"]
    assert Pump.objects.filter(project=project, pump_type="HEAD").count() == len(head_pumps)
    assert Pump.objects.filter(project=project, pump_type="POWER").count() == len(power_pumps)
    for name, p in head_pumps:
        row = Pump.objects.get(project=project, element_id=name)
        assert row.pump_curve == p.pump_curve_name
        curve = Curve.objects.get(project=project, curve_id=row.pump_curve)
        assert curve.points == [list(x) for x in p.get_pump_curve().points]
    for name, p in power_pumps:
        assert Pump.objects.get(project=project, element_id=name).power == pytest.approx(p.power)
    for name, v in wn.valves():
        row = Valve.objects.get(project=project, element_id=name)
        assert (row.valve_type, row.diameter, row.setting) == (v.valve_type, pytest.approx(v.diameter),
                                                                pytest.approx(v.initial_setting))  # fmt: skip
    assert Pattern.objects.filter(project=project).count() == len(wn.pattern_name_list)


def test_net6_options_schemas_and_geometry(project: Project, net6: wntr.network.WaterNetworkModel) -> None:
    wn = net6
    hydraulic = NetworkOptions.objects.get(project=project, kind="hydraulic").values
    assert hydraulic["headloss"] == wn.options.hydraulic.headloss == "H-W"
    assert hydraulic["inpfile_units"] == "GPM"
    time_opts = NetworkOptions.objects.get(project=project, kind="time").values
    assert time_opts["hydraulic_timestep"] == wn.options.time.hydraulic_timestep
    assert NetworkOptions.objects.filter(project=project, kind="pump_energy").count() == wn.num_pumps
    assert set(NetworkSchema.objects.filter(project=project).values_list("kind", flat=True)) == set(NETWORK_SCHEMAS)

    # Geometry: nodes are points around the centre; a link runs from its start node to its end node.
    junctions = Junction.objects.filter(project=project)
    lons = [j.geom.x for j in junctions]
    lats = [j.geom.y for j in junctions]
    assert (min(lons) + max(lons)) / 2 == pytest.approx(117.2, abs=0.01)
    assert (min(lats) + max(lats)) / 2 == pytest.approx(39.1, abs=0.01)
    pipe = Pipe.objects.get(project=project, element_id="LINK-0")
    start = Junction.objects.get(project=project, element_id=pipe.start_node_id)
    assert pipe.geom.coords[0] == pytest.approx(start.geom.coords)
    assert pipe.geog is not None and pipe.geog.srid == 4326


def test_ky4_pipe_lengths_match_geodesic_length_of_geometry(project: Project) -> None:
    """ky4 is drawn to scale in US feet: with 0.3048 m per drawn unit, the geodesic (WGS84) length of
    every stored pipe geometry must equal its drawn length, and the network's pipe lengths must agree
    with their geometry within 1 %."""
    path = wntr_network_path("ky4.inp")
    import_network(project=project, inp_path=path, scale=0.3048, baseline_hours=0)
    wn = wntr.network.WaterNetworkModel(str(path))
    ratios_to_length, ratios_to_drawing, lengths = [], [], []
    for pipe in Pipe.objects.filter(project=project):
        lons, lats = zip(*pipe.geom.coords, strict=True)
        geodesic = GEOD.line_length(lons, lats)
        link = wn.get_link(pipe.element_id)
        pts = [
            wn.get_node(link.start_node_name).coordinates,
            *link.vertices,
            wn.get_node(link.end_node_name).coordinates,
        ]
        drawn = sum(math.dist(a, b) for a, b in zip(pts, pts[1:], strict=False)) * 0.3048
        if drawn > 1.0:
            ratios_to_drawing.append(geodesic / drawn)
        ratios_to_length.append(geodesic / pipe.length)
        lengths.append(pipe.length)
    assert len(ratios_to_length) == wn.num_pipes == 1156
    # Georeferencing itself is exact to UTM's scale error (< 0.1 % near the central meridian).
    assert np.max(np.abs(np.array(ratios_to_drawing) - 1)) < 0.001
    # The stored lengths agree with the geometry within 1 % for the network as a whole and for 99 %
    # of pipes of 50 m or more (a few mains in ky4 are drawn shorter than their stated length).
    arr, lengths_arr = np.array(ratios_to_length), np.array(lengths)
    geodesic_total = float(np.sum(arr * lengths_arr))
    assert geodesic_total / float(np.sum(lengths_arr)) == pytest.approx(1.0, abs=0.01)
    long_pipes = arr[lengths_arr >= 50]
    assert np.mean(np.abs(long_pipes - 1) <= 0.01) >= 0.99


def test_baseline_is_the_wntr_simulation(project: Project) -> None:
    path = wntr_network_path("Net3.inp")
    summary = import_network(project=project, inp_path=path, center=(117.4, 39.0), scale=20.0, baseline_hours=6,
                             step_minutes=30, start=BASELINE_START)  # fmt: skip
    wn = wntr.network.WaterNetworkModel(str(path))
    assert summary.baseline_steps == 13
    assert NodeBaseline.objects.filter(project=project).count() == wn.num_nodes * 13
    assert LinkBaseline.objects.filter(project=project).count() == wn.num_links * 13
    wn.options.time.duration = 6 * 3600
    wn.options.time.hydraulic_timestep = wn.options.time.report_timestep = 1800
    results = wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(Path(summary.project_slug)))
    for suffix in (".inp", ".rpt", ".bin"):
        Path(summary.project_slug + suffix).unlink(missing_ok=True)
    at = BASELINE_START.replace(hour=3)
    row = NodeBaseline.objects.get(project=project, element_type="junction", element_id="10", time=at)
    assert row.pressure == pytest.approx(float(results.node["pressure"].loc[3 * 3600, "10"]), abs=1e-3)
    link = LinkBaseline.objects.get(project=project, element_type="pump", element_id="10", time=at)
    assert link.flow == pytest.approx(float(results.link["flowrate"].loc[3 * 3600, "10"]), abs=1e-6)
    assert link.status == int(results.link["status"].loc[3 * 3600, "10"])


def test_reimport_replaces_the_network(project: Project) -> None:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=1)
    import_network(project=project, inp_path=wntr_network_path("Net3.inp"), baseline_hours=0)
    assert _counts(project)["junction"] == 92
    assert not Junction.objects.filter(project=project, element_id="11").exists()  # a Net1-only id
    assert not NodeBaseline.objects.filter(project=project).exists()


def _with_orphan_junction(tmp_path: Path) -> Path:
    """Net1 plus a junction no pipe connects: WNTR reads it, EPANET refuses to solve it."""
    text = wntr_network_path("Net1.inp").read_text()
    for section, line in (("[JUNCTIONS]", " ORPHAN 700 0"), ("[COORDINATES]", " ORPHAN 50 50")):
        header_end = text.index("\n", text.index("\n", text.index(section)) + 1)
        text = text[:header_end] + "\n" + line + text[header_end:]
    path = tmp_path / "net1-orphan.inp"
    path.write_text(text)
    return path


def _with_bad_accuracy(tmp_path: Path) -> Path:
    """Net1 with an accuracy of -1: WNTR reads it, EPANET refuses to simulate it (its error 200)."""
    text = re.sub(r"(?im)^\s*Accuracy\s+\S+", " Accuracy -1", wntr_network_path("Net1.inp").read_text())
    path = tmp_path / "net1-bad-accuracy.inp"
    path.write_text(text)
    return path


def test_failed_reimport_leaves_the_old_network_intact(project: Project, tmp_path: Path) -> None:
    """A real failure half-way: the new file's elements are written, then EPANET refuses to simulate it;
    the transaction rolls back and the old network and baseline remain."""
    import_network(project=project, inp_path=wntr_network_path("Net3.inp"), baseline_hours=1)
    before = _counts(project), NodeBaseline.objects.filter(project=project).count()
    assert before[1] > 0
    with pytest.raises(NetworkImportError) as info:
        import_network(project=project, inp_path=_with_bad_accuracy(tmp_path), baseline_hours=1)
    assert str(info.value) == "hydraulic simulation failed: EPANET error 200: one or more errors in input file"
    assert (_counts(project), NodeBaseline.objects.filter(project=project).count()) == before
    assert Junction.objects.filter(project=project, element_id="601").exists()  # a Net3 id
    assert not Junction.objects.filter(project=project, element_id="11").exists()  # a Net1-only id


def test_disconnected_network_names_its_unconnected_nodes(project: Project, tmp_path: Path) -> None:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=0)
    with pytest.raises(NetworkImportError) as info:
        import_network(project=project, inp_path=_with_orphan_junction(tmp_path), baseline_hours=0)
    assert str(info.value) == ("the network is disconnected: 1 node(s) not connected to any reservoir or tank: ORPHAN")
    assert _counts(project)["junction"] == 9


def _truncated(tmp_path: Path, name: str, marker: str) -> Path:
    text = wntr_network_path(name).read_text()
    path = tmp_path / "broken.inp"
    path.write_text(text[: text.index(marker) + len(marker) + 40])
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Net1 has its [OPTIONS] (flow units) at the end: cut half-way, the junctions cannot be read.
        (None, "broken.inp: [JUNCTIONS] line 8: the flow units are unknown (no UNITS in an [OPTIONS] section) "
               "(the file has no [END] section: is it truncated?)"),
        ("[OPTIONS]\n UNITS GPM\n[JUNCTIONS]\n J1 700\n J2 not-a-number\n[END]\n",
         "broken.inp: [JUNCTIONS] line 5: not a number: 'not-a-number'"),
        ("[OPTIONS]\n UNITS GPM\n[JUNCTIONS]\n J1 700\n[PIPES]\n P1 J1 NOWHERE 100 10 100 0 Open\n[END]\n",
         "broken.inp: [PIPES] line 6: undefined node, 'NOWHERE'"),
        ("[OPTIONS]\n UNITS GPM\n[JUNCTIONS]\n J1 700\n J2 700\n[PIPES]\n P1 J1\n[END]\n",
         "broken.inp: [PIPES] line 7: too few fields on the line"),
        ("this is not an EPANET file\n", "broken.inp: line 1: syntax error in 'this is not an EPANET file'"),
    ],
)  # fmt: skip
def test_malformed_inp_names_section_line_and_reason(tmp_path: Path, text: str | None, message: str) -> None:
    path = _truncated(tmp_path, "Net1.inp", "[PIPES]") if text is None else tmp_path / "broken.inp"
    if text is not None:
        path.write_text(text)
    with pytest.raises(NetworkImportError) as info:
        read_inp(path)
    assert str(info.value) == "not a readable EPANET .inp file: " + message
    assert "Error" not in str(info.value) and "Exception" not in str(info.value)


def test_epanet_failure_says_what_the_code_means() -> None:
    wn = read_inp(wntr_network_path("Net1.inp"))
    wn.options.hydraulic.accuracy = -1  # EPANET refuses the input (its code 200)
    with pytest.raises(NetworkImportError) as info:
        simulate(wn, hours=1, step_minutes=60)
    assert str(info.value) == "hydraulic simulation failed: EPANET error 200: one or more errors in input file"


def test_ky4_in_its_crs_matches_pyproj_within_a_centimetre(project: Project) -> None:
    """ky4 is drawn in Kentucky state plane, US survey feet (EPSG:3089): every stored node position and
    every link vertex is pyproj's transform of the .inp coordinate, within 0.01 m."""
    path = wntr_network_path("ky4.inp")
    import_network(project=project, inp_path=path, crs="EPSG:3089", baseline_hours=0)
    wn = wntr.network.WaterNetworkModel(str(path))
    to_wgs = Transformer.from_crs("EPSG:3089", "EPSG:4326", always_xy=True)
    stored = {
        (m.element_type, row.element_id): row.geom.coords
        for m in (Junction, Reservoir, Tank)
        for row in m.objects.filter(project=project).only("element_id", "geom")
    }
    expected = {}
    for name, node in wn.nodes():
        expected[(node.node_type.lower(), name)] = to_wgs.transform(*node.coordinates)
    assert set(stored) == set(expected) and len(stored) == wn.num_nodes
    keys = sorted(stored)
    _, _, node_err = GEOD.inv(*zip(*(stored[k] for k in keys), strict=True),
                              *zip(*(expected[k] for k in keys), strict=True))  # fmt: skip
    assert float(np.max(node_err)) <= 0.01
    vertex_err = []
    vertex_links = [(n, link) for n, link in wn.links() if link.vertices]
    assert len(vertex_links) > 100
    for name, link in vertex_links:
        row = Pipe.objects.filter(project=project, element_id=name).only("geom").first()
        if row is None:
            continue
        got = row.geom.coords[1:-1]
        want = [to_wgs.transform(x, y) for x, y in link.vertices]
        assert len(got) == len(want)
        _, _, err = GEOD.inv(*zip(*got, strict=True), *zip(*want, strict=True))
        vertex_err.extend(np.atleast_1d(err))
    assert len(vertex_err) > 1000 and float(np.max(vertex_err)) <= 0.01


def test_command_crs_negative_centre_and_no_baseline(project: Project) -> None:
    net1 = str(wntr_network_path("Net1.inp"))
    for spelling in (["--center", "-85.5,38.0"], ["--center=-85.5,38.0"]):
        call_command("import_network", net1, "--project", project.slug, *spelling, "--scale", "10", "--no-baseline")
        lons = [j.geom.x for j in Junction.objects.filter(project=project)]
        assert (min(lons) + max(lons)) / 2 == pytest.approx(-85.5, abs=0.005)
        assert not NodeBaseline.objects.filter(project=project).exists()
    call_command("import_network", str(wntr_network_path("ky4.inp")), "--project", project.slug,
                 "--crs", "EPSG:3089", "--no-baseline")  # fmt: skip
    j1 = Junction.objects.get(project=project, element_id="J-1")
    assert (j1.geom.x, j1.geom.y) == pytest.approx((-85.576008643, 38.049062827), abs=1e-8)
    with pytest.raises(CommandError, match="unknown CRS 'EPSG:999999'"):
        call_command("import_network", net1, "--project", project.slug, "--crs", "EPSG:999999")
    with pytest.raises(CommandError, match="outside EPSG:3089's area of use"):
        call_command("import_network", net1, "--project", project.slug, "--crs", "EPSG:3089")
    with pytest.raises(CommandError, match="--center/--scale are for schematic networks only"):
        call_command("import_network", net1, "--project", project.slug, "--crs", "EPSG:3089", "--scale", "2")
    assert Junction.objects.filter(project=project, element_id="J-1").exists()  # refusals touched nothing


def test_unreadable_file_is_refused_before_touching_anything(project: Project, tmp_path: Path) -> None:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=0)
    bad = tmp_path / "garbage.inp"
    bad.write_text("[JUNCTIONS]\n J1 not-a-number\n[PIPES]\n P1 J1 J9 1 1 1 1 Open\n")
    with pytest.raises(NetworkImportError, match="not a readable EPANET .inp file"):
        import_network(project=project, inp_path=bad)
    assert _counts(project)["junction"] == 9


def test_command_errors_via_call_command(project: Project, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="network file not found"):
        call_command("import_network", str(tmp_path / "missing.inp"), "--project", project.slug)
    with pytest.raises(CommandError, match="the network is disconnected: 1 node"):
        call_command("import_network", str(_with_orphan_junction(tmp_path)), "--project", project.slug)
    with pytest.raises(CommandError, match="unknown project"):
        call_command("import_network", str(wntr_network_path("Net1.inp")), "--project", "no-such-project")
    with pytest.raises(CommandError, match="--center"):
        call_command("import_network", str(wntr_network_path("Net1.inp")), "--project", project.slug, "--center", "x")


@pytest.mark.usefixtures("demo_loaded")
def test_command_exit_codes(db: None, tmp_path: Path) -> None:
    """Bad input → exit code 1 and one clear line on stderr (run as a real process against the test
    database; the unreadable file names the committed demo project, which must stay untouched)."""
    garbage = tmp_path / "garbage.inp"
    garbage.write_text("this is not an EPANET file\n")
    env = {
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PATH": "/usr/bin:/bin",
    }
    cases = [
        ([str(tmp_path / "missing.inp"), "--project", "tianjin-demo"], "network file not found"),
        ([str(garbage), "--project", "tianjin-demo"], "not a readable EPANET .inp file"),
        ([str(wntr_network_path("Net1.inp")), "--project", "nope"], "unknown project"),
    ]
    for args, message in cases:
        proc = subprocess.run(
            [sys.executable, "manage.py", "import_network", *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 1, proc.stderr
        assert len(lines) == 1 and message in lines[0], proc.stderr
    assert Junction.objects.filter(project__slug="tianjin-demo").count() == 3323
