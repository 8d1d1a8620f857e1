"""The what-if simulation (``run_simulation``, issue 42 item 2): its changes against an independent
computation — Net3's own ``.inp`` text edited by hand (the control lines of the changed link removed, a
``LINK … AT TIME`` line added, the ``[TANKS]`` level or the demand multiplier changed) and solved by
``EpanetSimulator`` — its refusals naming the field (``changes[i].…``), a US project's feet and psi, a
district of the GIS register, and a run through submit and the job runner."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import wntr

from analyses.kinds import kinds
from analyses.kinds.base import Outcome
from analyses.submit import Submitter, submit
from contexts.errors import InvalidParameter
from contexts.models import Project
from queries.importer.epanet import wntr_network_path
from queries.jobrunner.runner import run_now
from queries.models import AnalysisNodeSeries, AnalysisResult, AnalysisRun, ElementGisProperties

START = "2024-05-01T00:00:00Z"
FT = 0.3048
PSI_PER_M = 9.80665 * 1000 / 6894.757293168
NET3 = wntr_network_path("Net3.inp")
TIMES = "[TIMES]\n Duration 6:00\n Hydraulic Timestep 0:15\n Report Timestep 0:15\n Pattern Start 0:00\n"


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(NET3))


def _project(unit_system: str = "SI") -> Project:
    return Project(slug="simulation-test", name="Simulation test", unit_system=unit_system, timezone="UTC")


def _run(params: dict[str, Any], unit_system: str = "SI") -> Outcome:
    spec, wn = kinds()["simulation"], _net3()
    si = spec.validate(params, wn=wn, unit_system=unit_system)
    return spec.compute(wn, si, project=_project(unit_system), progress=lambda f, m: None, unit_system=unit_system)


def _direct(tmp_path: Path, edit: Any) -> wntr.sim.results.SimulationResults:
    """Net3's text with ``edit`` applied and a 6 h window at 15 min, solved by EPANET directly."""
    text = NET3.read_text()
    text = re.sub(r"\[TIMES\].*?(?=\n\[)", TIMES.rstrip("\n"), text, flags=re.S)
    path = tmp_path / "direct.inp"
    path.write_text(edit(text))
    return wntr.sim.EpanetSimulator(wntr.network.WaterNetworkModel(str(path))).run_sim(
        file_prefix=str(tmp_path / "direct")
    )


def _pressure(outcome: Outcome) -> Any:
    assert outcome.series is not None
    return outcome.series.node["pressure"]


def test_a_pump_trip_is_epanet_with_its_controls_replaced_by_the_trip(tmp_path: Path) -> None:
    changes = [{"type": "pump", "pump_id": "335", "status": "off", "at": "2024-05-01T02:00:00Z"}]
    got = _run({"start": START, "duration_minutes": 360, "changes": changes})

    def edit(text: str) -> str:
        text = re.sub(r"^Link 335 .*IF Node 1 .*$\n", "", text, flags=re.M)
        return text.replace("[RULES]", "Link 335 CLOSED AT TIME 2\n\n[RULES]")

    direct = _direct(tmp_path, edit)
    pressure = _pressure(got)
    assert list(pressure.index) == list(direct.node["pressure"].index) and len(pressure.index) == 25
    assert (pressure - direct.node["pressure"]).abs().max().max() < 1e-3
    flow = got.series.link["flowrate"]["335"]
    assert flow.loc[:6300].abs().min() > 1e-3 and flow.loc[7200:].abs().max() < 1e-9  # on, then off from 02:00
    row = got.results[0]
    assert row.result_type == "summary" and got.summary["controls_removed"] == ["control 15", "control 16"]
    lowest = direct.node["pressure"][_net3().junction_name_list].min()
    assert got.summary["min_pressure"] == pytest.approx(float(lowest.min()), rel=1e-5)
    assert got.summary["min_pressure_node"] == str(lowest.idxmin())
    head = direct.node["head"]
    tank1 = next(t for t in row.payload["tanks"] if t["tank_id"] == "1")
    assert tank1["level_end"] == pytest.approx(float(head["1"].iloc[-1]) - 131.9 * FT, rel=1e-5)
    assert tank1["level_start"] == pytest.approx(13.1 * FT, rel=1e-5)


def test_a_tank_level_and_a_demand_multiplier_are_epanet_with_them_set(tmp_path: Path) -> None:
    changes = [{"type": "tank_level", "tank_id": "2", "initial_level": 10.0},
               {"type": "demand_multiplier", "multiplier": 1.3}]  # fmt: skip
    got = _run({"start": START, "duration_minutes": 360, "changes": changes})

    def edit(text: str) -> str:
        text = re.sub(r"^( 2\s+116.5\s+)23.5", rf"\g<1>{10.0 / FT:.6f}", text, flags=re.M)  # Net3 is in feet
        return re.sub(r"Demand Multiplier\s+1.0", "Demand Multiplier 1.3", text)

    direct = _direct(tmp_path, edit)
    assert (_pressure(got) - direct.node["pressure"]).abs().max().max() < 1e-3
    tank2 = next(t for t in got.results[0].payload["tanks"] if t["tank_id"] == "2")
    assert tank2["level_start"] == pytest.approx(10.0, rel=1e-5)


def test_a_link_closed_under_pdd_draws_less_than_asked(tmp_path: Path) -> None:
    # Pipe 20 links tank 3 to the network: closed, no flow; below 80 m a PDD junction draws less.
    params = {"start": START, "duration_minutes": 120, "demand_model": "PDD", "required_pressure": 80.0,
              "changes": [{"type": "link_status", "link_id": "20", "status": "closed"}]}  # fmt: skip
    pdd = _run(params)
    dd = _run({**params, "demand_model": "DD"})
    assert pdd.summary["demand_model"] == "PDD" and pdd.series is not None and dd.series is not None
    junctions = _net3().junction_name_list
    drawn, asked = pdd.series.node["demand"][junctions].sum().sum(), dd.series.node["demand"][junctions].sum().sum()
    assert 0 < drawn < asked
    assert float(pdd.series.link["flowrate"]["20"].abs().max()) < 1e-9


def test_a_us_project_gives_feet_and_psi_and_reads_them() -> None:
    changes = [{"type": "tank_level", "tank_id": "2", "initial_level": 10.0 / FT}]
    us = _run({"start": START, "duration_minutes": 120, "changes": changes, "pressure_threshold": 40.0}, "US")
    si = _run({"start": START, "duration_minutes": 120, "changes": [{**changes[0], "initial_level": 10.0}],
               "pressure_threshold": 40.0 / PSI_PER_M})  # fmt: skip
    assert us.summary["units"] == {"min_pressure": "psi", "pressure_threshold": "psi"}
    assert us.summary["min_pressure"] == pytest.approx(si.summary["min_pressure"] * PSI_PER_M, rel=1e-5)
    assert us.summary["junctions_below_threshold"] == si.summary["junctions_below_threshold"] > 0
    tank_us = next(t for t in us.results[0].payload["tanks"] if t["tank_id"] == "2")
    assert tank_us["level_start"] == pytest.approx(10.0 / FT, rel=1e-5)
    assert us.results[0].payload["units"]["level_end"] == "ft"


def test_the_default_threshold_is_20_m_or_30_psi() -> None:
    schema = kinds()["simulation"].input_schema
    assert schema("SI")["properties"]["pressure_threshold"]["default"] == 20.0
    assert schema("US")["properties"]["pressure_threshold"]["default"] == 30.0


@pytest.mark.parametrize(
    ("change", "field", "named"),
    [
        ({"type": "pump", "pump_id": "999", "status": "off"}, "changes[0].pump_id", "'999' is not a pump"),
        ({"type": "pump", "pump_id": "20", "status": "off"}, "changes[0].pump_id", "'20' is not a pump"),
        ({"type": "pump", "pump_id": "335"}, "changes[0].status", "is required"),
        ({"type": "pump", "pump_id": "335", "status": "closed"}, "changes[0].status", "on or off"),
        ({"type": "link_status", "link_id": "20", "status": "off"}, "changes[0].status", "open or closed"),
        ({"type": "link_status", "link_id": "20", "status": "closed", "multiplier": 2}, "changes[0].multiplier",
         "does not apply"),
        ({"type": "link_setting", "link_id": "20", "setting": 1.0}, "changes[0].link_id", "is a Pipe"),
        ({"type": "tank_level", "tank_id": "2", "initial_level": 99.0}, "changes[0].initial_level", "between"),
        ({"type": "tank_level", "tank_id": "Lake", "initial_level": 1.0}, "changes[0].tank_id", "not a tank"),
        ({"type": "pump", "pump_id": "335", "status": "off", "at": "2024-05-01T03:00:00Z"}, "changes[0].at",
         "outside the window"),
        ({"type": "pump", "pump_id": "335", "status": "off", "at": "2024-05-01T01:00:00"}, "start", "offset"),
        ({"type": "flood"}, "changes", "changes[0].type must be one of"),
    ],
)  # fmt: skip
def test_a_wrong_change_is_refused_naming_it(change: dict[str, Any], field: str, named: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        kinds()["simulation"].validate({"start": START, "duration_minutes": 120, "changes": [change]}, wn=_net3(),
                                       unit_system="SI")  # fmt: skip
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details["field"] == field and named in caught.value.message


def test_pdd_needs_a_minimum_below_the_required_pressure() -> None:
    with pytest.raises(InvalidParameter) as caught:
        kinds()["simulation"].validate({"start": START, "duration_minutes": 60, "demand_model": "PDD",
                                        "required_pressure": 10, "minimum_pressure": 10}, wn=_net3(),
                                       unit_system="SI")  # fmt: skip
    assert caught.value.details["field"] == "minimum_pressure"


def test_the_same_question_is_the_same_canonical_request() -> None:
    spec, wn = kinds()["simulation"], _net3()
    a = spec.validate({"start": START, "duration_minutes": 120, "changes": [
        {"type": "pump", "pump_id": "335", "status": "off", "at": "2024-05-01T09:00:00+08:00"}]}, wn=wn,
        unit_system="SI")  # fmt: skip
    b = spec.validate({"start": "2024-05-01T08:00:00+08:00", "duration_minutes": 120.0, "demand_model": "DD",
                       "pressure_threshold": 20.0, "changes": [{"at": "2024-05-01T01:00:00Z", "status": "off",
                                                                "pump_id": "335", "type": "pump"}]},
                      wn=wn, unit_system="SI")  # fmt: skip
    assert a == b and a["changes"][0]["at_s"] == 3600


@pytest.mark.django_db
def test_a_district_multiplier_scales_only_its_junctions(net3: Project, alice: Submitter) -> None:
    north = ["101", "103", "105", "107"]
    ElementGisProperties.objects.bulk_create(
        [ElementGisProperties(project=net3, element_type="junction", element_id=j, district="North") for j in north]
    )
    with pytest.raises(InvalidParameter) as caught:
        submit(project=net3, kind="simulation", who=alice, send=False, params={
            "start": START, "duration_minutes": 60,
            "changes": [{"type": "demand_multiplier", "multiplier": 2, "district": "South"}]})  # fmt: skip
    assert caught.value.details["field"] == "changes[0].district" and "'South'" in caught.value.message
    assert not AnalysisRun.objects.filter(project=net3).exists()
    params = {"start": START, "duration_minutes": 60,
              "changes": [{"type": "demand_multiplier", "multiplier": 2, "district": "North"}]}  # fmt: skip
    done = submit(project=net3, kind="simulation", params=params, who=alice, send=False)
    run_now(done.job)
    run = AnalysisRun.objects.get(pk=done.run.pk)
    assert run.status == "succeeded", run.status_message
    rows = AnalysisNodeSeries.objects.filter(run=run, element_id__in=[*north, "109"])
    assert AnalysisResult.objects.filter(run=run, result_type="summary").count() == 1
    base = _net3()
    for row in rows.filter(element_id="101")[:1]:
        asked = sum(d.base_value for d in base.get_node("101").demand_timeseries_list)
        assert asked > 0 and row.demand is not None and row.demand > asked * 1.5  # doubled (patterns near 1)
    for row in rows.filter(element_id="109")[:1]:
        asked = sum(d.base_value for d in base.get_node("109").demand_timeseries_list)
        assert row.demand is not None and row.demand < asked * 1.5


@pytest.mark.django_db
def test_a_run_starts_from_the_stored_baseline_at_its_start(net3: Project, alice: Submitter) -> None:
    """A what-if from 06:00 starts from the 06:00 the stored baseline computed (tank levels, pumps and
    valves), not from the .inp's midnight state, so it continues the baseline without a jump; where no
    baseline is stored it starts from the model file, and says which."""
    from datetime import UTC, datetime

    from queries.importer.baseline_window import simulate_baseline_window
    from queries.models import NodeBaseline

    day = datetime(2024, 5, 1, tzinfo=UTC)
    simulate_baseline_window(project=net3, start=day, hours=12, step_s=900)
    at = day.replace(hour=6)
    stored = {(r.element_type, r.element_id): r.pressure for r in NodeBaseline.objects.filter(project=net3, time=at)}

    def run(start: str) -> AnalysisRun:
        done = submit(project=net3, kind="simulation", params={"start": start, "duration_minutes": 60}, who=alice,
                      send=False)  # fmt: skip
        run_now(done.job)
        return AnalysisRun.objects.get(pk=done.run.pk)

    warm = run("2024-05-01T06:00:00Z")
    assert (
        warm.status == "succeeded" and warm.summary["initial_state"] == "the stored baseline's at 2024-05-01T06:00:00Z"
    )
    tanks = AnalysisResult.objects.get(run=warm, result_type="summary").payload["tanks"]
    inp = _net3()
    for tank in tanks:
        assert tank["level_start"] == pytest.approx(stored[("tank", tank["tank_id"])], abs=1e-3)
        assert abs(tank["level_start"] - inp.get_node(tank["tank_id"]).init_level) > 0.01  # not the .inp's
    first = {r.element_id: r.pressure for r in AnalysisNodeSeries.objects.filter(run=warm, element_type="junction",
                                                                                  time=at)}  # fmt: skip
    jumps = sorted(abs(p - stored[("junction", j)]) for j, p in first.items())
    assert len(jumps) == len(inp.junction_name_list) and jumps[len(jumps) // 2] < 0.01 and jumps[-1] < 0.5, jumps[-5:]
    cold = run("2024-05-02T06:00:00Z")  # past the stored baseline
    assert cold.summary["initial_state"] == "the model file's"
    levels = AnalysisResult.objects.get(run=cold, result_type="summary").payload["tanks"]
    assert all(t["level_start"] == pytest.approx(inp.get_node(t["tank_id"]).init_level, abs=1e-3) for t in levels)
