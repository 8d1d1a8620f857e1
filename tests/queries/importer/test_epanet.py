"""EPANET import fidelity against WNTR, georeferencing of a to-scale network, atomic re-import, and
the command's answers to bad input."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import wntr
from django.core.management import call_command
from django.core.management.base import CommandError
from pyproj import Geod

from contexts.models import Project
from queries.importer.epanet import BASELINE_START, NetworkImportError, import_network, wntr_network_path
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
from tests.conftest import ROOT, subprocess_database_url

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


def test_failed_reimport_leaves_the_old_network_intact(project: Project, tmp_path: Path) -> None:
    """A real failure half-way: the new file's elements are written, then EPANET refuses to simulate
    it (an unconnected node); the transaction rolls back and the old network and baseline remain."""
    import_network(project=project, inp_path=wntr_network_path("Net3.inp"), baseline_hours=1)
    before = _counts(project), NodeBaseline.objects.filter(project=project).count()
    assert before[1] > 0
    with pytest.raises(NetworkImportError, match="hydraulic simulation failed: EPANET error 200"):
        import_network(project=project, inp_path=_with_orphan_junction(tmp_path), baseline_hours=1)
    assert (_counts(project), NodeBaseline.objects.filter(project=project).count()) == before
    assert Junction.objects.filter(project=project, element_id="601").exists()  # a Net3 id
    assert not Junction.objects.filter(project=project, element_id="ORPHAN").exists()


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
    with pytest.raises(CommandError, match="hydraulic simulation failed"):
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
