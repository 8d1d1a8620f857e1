"""The analysis kinds (issue 42 item 2): each kind's input schema is a closed Draft 2020-12 schema with
units named; validation refuses what is wrong naming the field, converts a US project's gpm/psi to SI
and is canonical; compute on Net3 gives the named results and the same numbers as the ``queries.runs``
computation called directly on the same question (the independent check), in the project's units.

No database: the project is an unsaved ``Project`` (``align_patterns`` reads only its time zone)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import wntr
from jsonschema import Draft202012Validator

from analyses.kinds import KIND_NAMES, REST_PATHS, TOOL_NAMES, kinds
from analyses.kinds.base import AnalysisKind, Outcome
from contexts.errors import InvalidParameter
from contexts.models import Project
from queries.importer.epanet import wntr_network_path
from queries.registry import tools_by_name
from queries.runs.burst import BURST_NODE, burst
from queries.runs.contaminant import contaminant
from queries.runs.flushing import flushing
from queries.runs.isolation import isolate
from queries.schemas.result_payloads import inline
from queries.units import QUANTITIES

#: Independent unit constants (exact by definition, or the conventional water column): not queries.units.
GPM = 3.785411784e-3 / 60  # m³/s per US gallon per minute
PSI_PER_M = 9.80665 * 1000 / 6894.757293168  # psi per metre of water (conventional density)
FT = 0.3048
START = "2024-05-01T00:00:00Z"
VALVES = [("V1", "105", "101"), ("V2", "105", "105"), ("V3", "107", "105"), ("V4", "117", "105")]
REQUESTS: dict[str, dict[str, Any]] = {
    "burst": {"pipe_id": "105", "start": START, "duration_minutes": 120, "emitter_coefficient": 0.002},
    "flushing": {"hydrant_node_ids": ["119", "253"], "flow": 0.0315, "start": START, "duration_minutes": 120},
    "contaminant": {
        "injection_node_ids": ["123"],
        "start": START,
        "injection_minutes": 30,
        "duration_minutes": 120,
        "mass_rate": 5000.0,
    },  # fmt: skip
    "valve_isolation": {"pipe_ids": ["105"]},
    "simulation": {"start": START, "duration_minutes": 120,
                   "changes": [{"type": "pump", "pump_id": "335", "status": "off", "at": "2024-05-01T01:00:00Z"}]},
}  # fmt: skip


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net3.inp")))


def _project(unit_system: str = "SI", timezone: str = "UTC") -> Project:
    return Project(slug="kinds-test", name="Kinds test", unit_system=unit_system, timezone=timezone)


def _refusal(kind: str, params: dict[str, Any], unit_system: str = "SI") -> InvalidParameter:
    with pytest.raises(InvalidParameter) as caught:
        kinds()[kind].validate(params, wn=_net3(), unit_system=unit_system)
    return caught.value


def _run(kind: str, params: dict[str, Any], project: Project) -> Outcome:
    spec, wn = kinds()[kind], _net3()
    si = spec.validate(params, wn=wn, unit_system=project.unit_system)
    seen: list[float] = []
    outcome = spec.compute(wn, si, project=project, progress=lambda f, _m: seen.append(f),
                           unit_system=project.unit_system, valves=VALVES)  # fmt: skip
    assert seen == sorted(seen) and seen[0] <= 0.1 and seen[-1] >= 0.9
    json.dumps([outcome.summary, [r.payload for r in outcome.results]])  # JSON-able
    for row in outcome.results:
        _check_typed(spec, row.result_type, row.payload)
    return outcome


def _check_typed(spec: AnalysisKind, result_type: str, payload: dict[str, Any]) -> None:
    """``payload`` is what the kind's model of ``result_type`` publishes (its inlined JSON Schema, as
    list_analysis_results' output schema carries it), and names the unit of every quantity it holds."""
    model = spec.results[result_type]  # every result type a kind writes has its model
    schema = inline(model)
    Draft202012Validator(schema).validate(payload)
    model.model_validate(payload)

    def quantities(node: Any) -> set[str]:
        found: set[str] = set()
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and sub.get("x-quantity") in QUANTITIES:
                    found.add(name)
            for sub in node.values():
                found |= quantities(sub)
        elif isinstance(node, list):
            for sub in node:
                found |= quantities(sub)
        return found

    assert quantities(schema) <= set(payload["units"]), (result_type, quantities(schema), payload["units"])


def test_the_results_page_types_each_kinds_payloads() -> None:
    """list_analysis_results' output schema holds each kind's payload model of each result type: a burst's
    leak without its volume is refused, the same payload under a result type no kind writes is not."""
    schema = tools_by_name()["list_analysis_results"].output_schema
    rules = {r["if"]["properties"]["kind"]["const"]: r for r in schema["$defs"]["AnalysisResultPage"]["allOf"]}
    assert set(rules) == set(KIND_NAMES)
    for name, spec in kinds().items():
        typed = rules[name]["then"]["properties"]["items"]["items"]["allOf"]
        assert {t["if"]["properties"]["result_type"]["const"] for t in typed} == set(spec.results)
    leak = {"node_id": "N", "pipe_id": "P", "position": 0.5, "coefficient": 0.1, "coefficient_from_leak_flow": False,
            "peak_flow": 1.0, "mean_flow": 0.5, "units": {"peak_flow": "L/s"}}  # fmt: skip
    item = {"sequence": 1, "result_type": "leak", "payload": leak, "element_refs": []}
    page = {"items": [item], "total": 1, "limit": 50, "offset": 0, "has_more": False, "run_id": "r", "kind": "burst",
            "result_type": None}  # fmt: skip
    envelope = {"source": "s", "source_ref": "r", "queried_at": "2026-11-01T00:00:00Z", "origin": "analysis_run",
                "data": page, "page": {"total": 1, "limit": 50, "offset": 0, "has_more": False, "next_offset": None},
                "units": {}}  # fmt: skip
    validator = Draft202012Validator(schema)
    errors = list(validator.iter_errors(envelope))
    assert errors and any("volume" in e.message for e in _leaves(errors)), [e.message for e in errors]
    assert not list(validator.iter_errors({**envelope, "data": {**page, "items": [
        {**page["items"][0], "payload": {**leak, "volume": 2.0}}]}}))  # fmt: skip
    untyped = {**page, "items": [{**page["items"][0], "result_type": "leak_estimate"}]}
    assert not list(validator.iter_errors({**envelope, "data": untyped}))


def _leaves(errors: list[Any]) -> list[Any]:
    out = []
    for error in errors:
        out.append(error)
        out.extend(_leaves(list(error.context or [])))
    return out


def _row(outcome: Outcome, result_type: str) -> dict[str, Any]:
    return next(r.payload for r in outcome.results if r.result_type == result_type)


def test_the_registry_names_every_kind() -> None:
    assert tuple(kinds()) == KIND_NAMES
    for name, spec in kinds().items():
        assert isinstance(spec, AnalysisKind)
        assert (spec.name, spec.tool, spec.rest_path) == (name, TOOL_NAMES[name], REST_PATHS[name])
    assert (kinds()["burst"].scenarios, kinds()["flushing"].scenarios, kinds()["contaminant"].quality) == (2, 2, True)


@pytest.mark.parametrize("unit_system", ["SI", "US"])
@pytest.mark.parametrize("kind", KIND_NAMES)
def test_each_schema_is_a_closed_draft_2020_12_schema_with_units(kind: str, unit_system: str) -> None:
    schema = kinds()[kind].input_schema(unit_system)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert (schema["type"], schema["additionalProperties"]) == ("object", False)
    assert {"elements", "request_key"} <= set(schema["properties"]) and schema["required"]
    # Every number is a quantity with a unit, except a burst's position (a fraction of the pipe's length).
    numbers = {n: p for n, p in schema["properties"].items() if p.get("type") == "number" and n != "position"}
    assert bool(numbers) == (kind != "valve_isolation") and "x-unit" not in schema["properties"].get("position", {})
    for name, prop in numbers.items():
        assert prop["x-unit"] and prop["x-unit"] in prop["description"], name
    Draft202012Validator(schema).validate(REQUESTS[kind])


def test_a_us_schema_labels_and_defaults_in_us_units() -> None:
    burst_us = kinds()["burst"].input_schema("US")["properties"]
    assert (burst_us["leak_flow"]["x-unit"], burst_us["pressure_drop_threshold"]["x-unit"]) == ("gpm", "psi")
    assert burst_us["emitter_coefficient"]["x-unit"] == "gpm/psi^0.5"
    assert burst_us["pressure_drop_threshold"]["default"] == pytest.approx(PSI_PER_M, rel=1e-5)  # 1 m
    assert kinds()["flushing"].input_schema("US")["properties"]["target_velocity"]["default"] == 2.5


@pytest.mark.parametrize(
    ("kind", "change", "field", "named"),
    [
        ("burst", {"pipe_id": "P-9"}, "pipe_id", "'P-9' is not a pipe"),
        ("burst", {"pipe_id": "River"}, "pipe_id", "'River' is not a pipe"),
        ("burst", {"elements": ["101", "ZZZ"]}, "elements", "'ZZZ'"),
        ("flushing", {"hydrant_node_ids": ["119", "NOPE"]}, "hydrant_node_ids", "'NOPE' is not a junction"),
        ("flushing", {"hydrant_node_ids": ["119", "River"]}, "hydrant_node_ids", "'River' is not a junction"),
        ("contaminant", {"injection_node_ids": ["X1", "X2"]}, "injection_node_ids", "'X1', 'X2' are not nodes"),
        ("valve_isolation", {"pipe_ids": ["105", "P-9"]}, "pipe_ids", "'P-9' is not a pipe"),
    ],
)
def test_an_unknown_id_is_refused_naming_the_field_and_the_id(kind: str, change: dict[str, Any], field: str,
                                                               named: str) -> None:  # fmt: skip
    refusal = _refusal(kind, {**REQUESTS[kind], **change})
    assert refusal.details["field"] == field and refusal.message.startswith(field) and named in refusal.message


@pytest.mark.parametrize("kind", ["burst", "flushing", "contaminant"])
def test_a_start_without_offset_is_refused(kind: str) -> None:
    refusal = _refusal(kind, {**REQUESTS[kind], "start": "2024-05-01T00:00:00"})
    assert refusal.details["field"] == "start" and "offset" in refusal.message


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_an_extra_property_is_refused_naming_it(kind: str) -> None:
    refusal = _refusal(kind, {**REQUESTS[kind], "hydraulic_check": True})
    assert refusal.details["field"] == "hydraulic_check" and "hydraulic_check" in refusal.message


@pytest.mark.parametrize(
    ("kind", "change", "field"),
    [
        ("burst", {"leak_flow": 0.01}, "emitter_coefficient"),  # both sizes
        ("burst", {"position": 1.0}, "position"),
        ("burst", {"duration_minutes": 10081}, "duration_minutes"),
        ("flushing", {"flow": [0.03, 0.03, 0.03]}, "flow"),
        ("flushing", {"flow": -1}, "flow"),
        ("contaminant", {"injection_minutes": 121}, "injection_minutes"),
        ("valve_isolation", {"pipe_ids": []}, "pipe_ids"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_field(kind: str, change: dict[str, Any], field: str) -> None:
    refusal = _refusal(kind, {**REQUESTS[kind], **change})
    assert refusal.details["field"] == field and field in refusal.message


def test_a_missing_size_is_refused() -> None:
    params = {k: v for k, v in REQUESTS["burst"].items() if k != "emitter_coefficient"}
    assert "emitter_coefficient or leak_flow" in _refusal("burst", params).message


def test_validation_is_canonical() -> None:
    spec, wn = kinds()["burst"], _net3()
    plain = spec.validate(REQUESTS["burst"], wn=wn, unit_system="SI")
    spelled = {"request_key": "abc", "pressure_drop_threshold": 1.0, "position": 0.5, "duration_minutes": 120.0,
               "start": "2024-05-01T08:00:00+08:00", "emitter_coefficient": 0.002, "pipe_id": "105"}  # fmt: skip
    assert spec.validate(spelled, wn=wn, unit_system="SI") == plain
    assert plain["start"] == START and "request_key" not in plain and plain["elements"] == []
    flush = kinds()["flushing"]
    one = flush.validate(REQUESTS["flushing"], wn=wn, unit_system="SI")
    each = flush.validate({**REQUESTS["flushing"], "hydrant_node_ids": ["253", "119"], "flow": [0.0315, 0.0315],
                           "target_velocity": 0.75, "elements": ["119", "101"]}, wn=wn, unit_system="SI")  # fmt: skip
    assert {**one, "elements": ["101", "119"]} == each and one["hydrant_node_ids"] == ["119", "253"]
    us = flush.validate(REQUESTS["flushing"], wn=wn, unit_system="US")
    assert us["target_velocity"] == pytest.approx(2.5 * FT) and one["target_velocity"] == 0.75
    contam = kinds()["contaminant"]
    a = contam.validate({**REQUESTS["contaminant"], "injection_node_ids": ["123", "River"]}, wn=wn, unit_system="SI")
    b = contam.validate({**REQUESTS["contaminant"], "injection_node_ids": ["River", "123"], "threshold": 0.01},
                        wn=wn, unit_system="SI")  # fmt: skip
    assert a == b and a["injection_node_ids"] == ["123", "River"]


def test_a_us_burst_by_leak_flow_in_gpm_is_the_si_burst_in_m3_per_s() -> None:
    project_us, project_si = _project("US"), _project("SI")
    base = {k: v for k, v in REQUESTS["burst"].items() if k != "emitter_coefficient"}
    si_us = kinds()["burst"].validate({**base, "leak_flow": 200.0, "pressure_drop_threshold": 2.0}, wn=_net3(),
                                      unit_system="US")  # fmt: skip
    assert si_us["leak_flow"] == pytest.approx(200 * GPM, rel=1e-9)
    assert si_us["pressure_drop_threshold"] == pytest.approx(2.0 / PSI_PER_M, rel=1e-5)
    us = _run("burst", {**base, "leak_flow": 200.0}, project_us)
    si = _run("burst", {**base, "leak_flow": 200 * GPM}, project_si)
    leak_us, leak_si = _row(us, "leak"), _row(si, "leak")
    assert leak_us["coefficient_from_leak_flow"] and leak_si["coefficient_from_leak_flow"]
    # The same coefficient, up to the 6 significant digits a shown number carries.
    assert leak_us["coefficient"] == pytest.approx(leak_si["coefficient"] / GPM / math.sqrt(PSI_PER_M), rel=1e-5)
    assert leak_us["units"] == {"coefficient": "gpm/psi^0.5", "peak_flow": "gpm", "mean_flow": "gpm",
                                "volume": "ft3"}  # fmt: skip
    assert leak_us["peak_flow"] == pytest.approx(leak_si["peak_flow"] / GPM, rel=1e-5)
    assert _row(us, "affected_nodes")["units"]["pressure_drop"] == "psi"
    assert us.summary["units"]["volume"] == "ft3"
    assert us.summary["volume"] == pytest.approx(si.summary["volume"] / FT**3, rel=1e-5)


def test_a_burst_is_the_burst_computation_with_patterns_on_the_local_clock() -> None:
    # 10:00 UTC is 06:00 in New York (EDT): the direct run starts its patterns at hour 6.
    params = {**REQUESTS["burst"], "start": "2024-05-01T10:00:00Z", "pressure_drop_threshold": 0.5}
    got = _run("burst", params, _project("SI", "America/New_York"))
    wn = _net3()
    wn.options.time.pattern_start = wn.options.time.start_clocktime = 6 * 3600
    direct = burst(wn, pipe_id="105", hours=2, coefficient=0.002, pressure_drop_threshold=0.5)
    assert {r.result_type for r in got.results} == {"leak", "affected_nodes", "customers_affected"}
    assert direct.volume > 1 and got.summary["volume"] == pytest.approx(direct.volume, rel=1e-5)
    affected = _row(got, "affected_nodes")
    assert affected["count"] == len(direct.affected) > 0
    assert [n["node_id"] for n in affected["nodes"]] == [n for n, _ in direct.affected[:200]]
    assert _row(got, "customers_affected")["demand_affected"] == pytest.approx(direct.demand_affected, rel=1e-5)
    assert got.leak is not None and got.leak[0] == BURST_NODE and got.series is not None
    assert float(got.leak[1].max()) == pytest.approx(direct.peak_flow)
    assert got.start.isoformat() == "2024-05-01T10:00:00+00:00"


def test_a_flushing_is_the_flushing_computation() -> None:
    got = _run("flushing", REQUESTS["flushing"], _project())
    direct = flushing(_net3(), hydrants={"119": 0.0315, "253": 0.0315}, hours=2)
    assert {r.result_type for r in got.results} == {"pipes_flushed", "pressure", "sources"}
    flushed = _row(got, "pipes_flushed")
    assert [p["pipe_id"] for p in flushed["pipes"]] == [p.pipe_id for p in direct.pipes_flushed] != []
    pressure = _row(got, "pressure")
    assert pressure["network_minimum"]["node_id"] == direct.min_pressure_node
    assert pressure["network_minimum"]["pressure"] == pytest.approx(direct.min_pressure, rel=1e-5)
    assert got.series is not None and got.leak is None


def test_a_contaminant_simulation_is_the_contaminant_computation() -> None:
    got = _run("contaminant", REQUESTS["contaminant"], _project("US"))
    direct = contaminant(_net3(), injection_node_ids=["123"], injection_minutes=30, hours=2, threshold=0.01,
                         mass_rate=5000.0)  # fmt: skip
    assert {r.result_type for r in got.results} == {"arrival", "extent", "exposure"}
    arrival = _row(got, "arrival")
    assert arrival["count"] == len(direct.arrival) > 1
    assert {n["node_id"] for n in arrival["nodes"]} == set(direct.arrival)
    times = [n["time"] for n in arrival["nodes"]]
    first = min(direct.arrival.values())
    assert times == sorted(times) and direct.arrival["123"] == first  # the injection node is among the first
    assert arrival["nodes"][0]["minutes_after_start"] == first / 60
    assert len(_row(got, "extent")["steps"]) == len(direct.extent)
    exposure = _row(got, "exposure")
    assert exposure["mass"] == pytest.approx(direct.mass_consumed, rel=1e-5)
    assert exposure["volume"] == pytest.approx(direct.volume_consumed / FT**3, rel=1e-5)
    assert exposure["units"] == {"mass": "mg", "volume": "ft3"}


@pytest.mark.parametrize("failed", [[], ["V2"]])
def test_a_valve_isolation_is_the_isolation_computation(failed: list[str]) -> None:
    got = _run("valve_isolation", {"pipe_ids": ["105"], "failed_valves": failed}, _project("US"))
    direct = isolate(_net3(), VALVES, ["105"], frozenset(failed))
    segment = _row(got, "isolation_segment")
    assert [(v["valve_id"], v["pipe_id"], v["node_id"]) for v in segment["valves_to_close"]] == direct.valves_to_close
    assert segment["pipes"] == direct.pipes and segment["junctions"] == direct.junctions
    # V2 closes pipe 105 at node 105; when it fails, the segment takes in node 105 and V3, V4 close instead.
    assert {v["valve_id"] for v in segment["valves_to_close"]} == ({"V1", "V3", "V4"} if failed else {"V1", "V2"})
    assert {r.result_type for r in got.results} == {"isolation_segment", "outage_segments", "demand_lost"}
    assert _row(got, "demand_lost")["demand_lost"] == pytest.approx(direct.demand_lost / GPM, rel=1e-5)
    assert got.series is None and got.leak is None


def test_valve_isolation_names_a_failed_valve_that_is_not_in_the_layer() -> None:
    spec, wn = kinds()["valve_isolation"], _net3()
    si = spec.validate({"pipe_ids": ["105"], "failed_valves": ["V9"]}, wn=wn, unit_system="SI")
    with pytest.raises(InvalidParameter) as caught:
        spec.compute(wn, si, project=_project(), progress=lambda f, m: None, unit_system="SI", valves=VALVES)
    assert caught.value.details["field"] == "failed_valves" and "'V9'" in caught.value.message


def test_the_shapes_count_scenarios_quality_and_the_window() -> None:
    wn = _net3()
    shapes = {k: s.shape(s.validate(REQUESTS[k], wn=wn, unit_system="SI"), wn) for k, s in kinds().items()}
    assert (shapes["burst"].scenarios, shapes["burst"].hours) == (2, 2.0)
    assert (shapes["flushing"].scenarios, shapes["contaminant"].scenarios) == (2, 1) and shapes["contaminant"].quality
    assert shapes["valve_isolation"].hydraulic_steps == 1 and shapes["burst"].hydraulic_steps == 8


def test_a_hydraulic_check_is_a_pdd_run_with_the_segment_closed(tmp_path: Path) -> None:
    check = {"start": START, "duration_minutes": 120, "pressure_threshold": 40.0, "required_pressure": 40.0}
    got = _run("valve_isolation", {"pipe_ids": ["105"], "hydraulic_check": check}, _project())
    direct = isolate(_net3(), VALVES, ["105"])
    wn = _net3()  # independently: the links closed as initial status, PDD, the window at 15 minutes
    closed = {*direct.pipes, *(link for _, link, _ in direct.valves_to_close)}
    for link in closed:
        wn.get_link(link).initial_status = wntr.network.LinkStatus.Closed
    wn.options.time.duration, wn.options.time.hydraulic_timestep, wn.options.time.report_timestep = 7200, 900, 900
    wn.options.hydraulic.demand_model, wn.options.hydraulic.required_pressure = "PDD", 40.0
    wn.options.hydraulic.minimum_pressure = 0.0
    direct_run = wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(tmp_path / "check"))
    pressure = direct_run.node["pressure"][wn.junction_name_list].min()
    below = sorted(str(n) for n in pressure.index if pressure[n] < 40.0)
    affected = _row(got, "affected_nodes")
    assert below and affected["count"] == len(below) and sorted(n["node_id"] for n in affected["nodes"]) == below
    assert {n["node_id"] for n in affected["nodes"] if n["cut_off"]} <= {*direct.junctions, *direct.outage_nodes}
    assert got.series is not None and got.start.isoformat() == "2024-05-01T00:00:00+00:00"
    assert got.summary["affected_nodes"] == len(below) and affected["units"]["lowest_pressure"] == "m"
    shape = kinds()["valve_isolation"].shape(kinds()["valve_isolation"].validate(
        {"pipe_ids": ["105"], "hydraulic_check": check}, wn=_net3(), unit_system="SI"), _net3())  # fmt: skip
    assert (shape.hours, shape.hydraulic_steps) == (2.0, 8)


def test_a_hydraulic_check_start_without_offset_is_refused_naming_it() -> None:
    refusal = _refusal("valve_isolation", {"pipe_ids": ["105"], "hydraulic_check": {
        "start": "2024-05-01T00:00:00", "duration_minutes": 60}})  # fmt: skip
    assert refusal.details["field"] == "hydraulic_check.start" and "offset" in refusal.message
