"""Units: every label checked against WNTR's internal (SI) units by reading a known value from a small .inp
written in US units (``tests/queries/data/units_us.inp``), in both unit systems, through the registry's
``invoke`` (what MCP and REST run). Plus the cost of the conversion on the way out."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import wntr

from contexts.models import Project
from contexts.scope import QueryScope
from queries.importer.epanet import import_network
from queries.plan import run_sync
from queries.registry import tools_by_name
from queries.units import FACTORS, present, shown
from tests.queries.factories import service_scope

INP = Path(__file__).parent / "data" / "units_us.inp"
AT = "2026-11-01T00:30:00Z"
# The baseline is simulated on the fixed day the times above name (the default is the project's current day).
START = datetime(2026, 11, 1, tzinfo=UTC)
FT, IN, GPM, HP = 0.3048, 0.0254, 0.0037854117840 / 60, 745.69987158227022
PSI_PER_M = 1.4223343307  # pint's m_H2O (conventional water density)


def _inp(tmp_path: Path, quality: str) -> Path:
    path = tmp_path / "units.inp"
    path.write_text(INP.read_text().replace("Quality   Chlorine mg/L", f"Quality   {quality}"))
    return path


def _call(scope: QueryScope, tool: str, **args: Any) -> dict[str, Any]:
    return run_sync(tools_by_name()[tool].invoke(scope, args)).model_dump(mode="json")


def _scopes(project: Project) -> tuple[QueryScope, QueryScope]:
    project.refresh_from_db()
    base = dataclasses.replace(
        service_scope(project, {"webgis.view", "simulation.view"}),
        quality_type=project.quality_type,
        headloss_formula=project.headloss_formula,
    )
    return base, dataclasses.replace(base, unit_system="US")


@pytest.fixture
def chlorine(project: Project, tmp_path: Path) -> tuple[QueryScope, QueryScope]:
    import_network(
        project=project, inp_path=_inp(tmp_path, "Chlorine mg/L"), baseline_hours=1, step_minutes=30, start=START
    )
    return _scopes(project)


def _props(scope: QueryScope, element_type: str, element_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    out = _call(scope, "get_element_properties", element_type=element_type, element_id=element_id)
    return out["data"]["properties"], out["units"]


def _baseline(scope: QueryScope, element_type: str, element_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    out = _call(scope, "get_model_baseline_at_time", element_type=element_type, element_id=element_id, time=AT)
    return out["data"]["values"], out["units"]


def test_pump_power_is_watts_not_kilowatts(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    props, units = _props(si, "pump", "PU1")
    assert (props["power"], units["power"]) == (pytest.approx(10 * HP), "W")  # the .inp says 10 hp
    props, units = _props(us, "pump", "PU1")
    assert (props["power"], units["power"]) == (pytest.approx(10.0), "hp")


def test_reaction_coefficients_per_second_and_per_day(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    props, units = _props(si, "pipe", "P1")
    assert (props["bulk_coeff"], units["bulk_coeff"]) == (pytest.approx(-0.5 / 86400), "1/s")
    assert (props["wall_coeff"], units["wall_coeff"]) == (pytest.approx(-1 * FT / 86400), "m/s")
    props, units = _props(us, "pipe", "P1")
    assert (props["bulk_coeff"], units["bulk_coeff"]) == (pytest.approx(-0.5), "1/day")
    assert (props["wall_coeff"], units["wall_coeff"]) == (pytest.approx(-1.0), "ft/day")


def test_lengths_diameters_roughness_and_demand(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    props, units = _props(si, "pipe", "P1")
    assert (props["length"], units["length"]) == (pytest.approx(1000 * FT), "m")
    assert (props["diameter"], units["diameter"]) == (pytest.approx(12 * IN), "m")
    assert (props["roughness"], units["roughness"]) == (pytest.approx(100.0), "")  # H-W C: unitless
    props, units = _props(us, "pipe", "P1")
    assert (props["length"], units["length"]) == (pytest.approx(1000.0), "ft")
    assert (props["diameter"], units["diameter"]) == (pytest.approx(12.0), "in")
    assert (props["roughness"], units["roughness"]) == (pytest.approx(100.0), "")
    props, units = _props(si, "junction", "J2")
    assert (props["elevation"], units["elevation"]) == (pytest.approx(90 * FT), "m")
    assert (props["base_demand"], units["base_demand"]) == (pytest.approx(100 * GPM), "m3/s")
    props, units = _props(us, "junction", "J2")
    assert (props["elevation"], units["elevation"]) == (pytest.approx(90.0), "ft")
    assert (props["base_demand"], units["base_demand"]) == (pytest.approx(100.0), "gpm")


def test_tank_levels_diameter_and_volume(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    props, units = _props(si, "tank", "T1")
    assert (props["init_level"], props["max_level"], units["max_level"]) == (
        pytest.approx(10 * FT), pytest.approx(20 * FT), "m")  # fmt: skip
    assert (props["diameter"], units["diameter"], units["min_volume"]) == (pytest.approx(50 * FT), "m", "m3")
    props, units = _props(us, "tank", "T1")
    assert (props["init_level"], props["min_level"], units["min_level"]) == (
        pytest.approx(10.0), pytest.approx(2.0), "ft")  # fmt: skip
    assert (props["diameter"], units["diameter"], units["min_volume"]) == (pytest.approx(50.0), "ft", "ft3")


def test_head_pressure_flow_velocity_headloss_match_wntr(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    wn = wntr.network.WaterNetworkModel(str(INP))
    wn.options.time.hydraulic_timestep = wn.options.time.report_timestep = 1800
    results = wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(Path("/tmp") / f"units-{id(wn)}"))
    for suffix in (".inp", ".rpt", ".bin"):
        Path(f"/tmp/units-{id(wn)}{suffix}").unlink(missing_ok=True)
    node, link = results.node, results.link
    values, units = _baseline(si, "junction", "J2")
    assert values["pressure"] == pytest.approx(float(node["pressure"].loc[1800, "J2"]), abs=1e-4)
    assert values["head"] == pytest.approx(float(node["head"].loc[1800, "J2"]), abs=1e-4)
    assert values["demand"] == pytest.approx(100 * GPM, rel=1e-4)
    assert (units["pressure"], units["head"], units["demand"]) == ("m", "m", "m3/s")
    si_pressure = values["pressure"]
    values, units = _baseline(us, "junction", "J2")
    assert (units["pressure"], units["head"], units["demand"]) == ("psi", "ft", "gpm")
    assert values["pressure"] == pytest.approx(si_pressure * PSI_PER_M, rel=1e-5)
    # WNTR's own psi factor (0.70325 m/psi) differs from pint's conventional water by < 0.05 %.
    assert values["pressure"] == pytest.approx(si_pressure / 0.703249614902, rel=5e-4)
    assert values["head"] == pytest.approx(float(node["head"].loc[1800, "J2"]) / FT, abs=1e-3)
    assert values["demand"] == pytest.approx(100.0, rel=1e-4)

    values, units = _baseline(si, "pipe", "P1")
    assert values["flow"] == pytest.approx(float(link["flowrate"].loc[1800, "P1"]), rel=1e-5)
    assert values["velocity"] == pytest.approx(float(link["velocity"].loc[1800, "P1"]), rel=1e-5)
    assert values["headloss"] == pytest.approx(float(link["headloss"].loc[1800, "P1"]), rel=1e-5)
    assert (units["flow"], units["velocity"], units["headloss"]) == ("m3/s", "m/s", "m/m")
    flow_si, velocity_si = values["flow"], values["velocity"]
    values, units = _baseline(us, "pipe", "P1")
    assert (units["flow"], units["velocity"], units["headloss"]) == ("gpm", "ft/s", "ft/ft")
    assert values["flow"] == pytest.approx(flow_si / GPM, rel=1e-5)
    assert values["velocity"] == pytest.approx(velocity_si / FT, rel=1e-5)
    values, units = _baseline(us, "pump", "PU1")
    assert units["headloss"] == "ft"
    assert values["headloss"] == pytest.approx(float(link["headloss"].loc[1800, "PU1"]) / FT, rel=1e-5)

    field = _call(us, "query_model_baseline_field", element_type="junction", field="pressure", time=AT, limit=20,
                  offset=0)  # fmt: skip
    assert field["units"] == {"pressure": "psi"}
    by_id = {item["element_id"]: item["value"] for item in field["data"]["items"]}
    assert by_id["J2"] == pytest.approx(si_pressure * PSI_PER_M, rel=1e-5)


def test_chemical_quality_in_mg_per_litre(chlorine: tuple[QueryScope, QueryScope]) -> None:
    si, us = chlorine
    for scope in (si, us):
        props, units = _props(scope, "junction", "J1")
        assert (props["initial_quality"], units["initial_quality"]) == (pytest.approx(1.0), "mg/L")
        values, units = _baseline(scope, "reservoir", "R1")
        assert (values["quality"], units["quality"]) == (pytest.approx(1.0, rel=1e-4), "mg/L")


def test_water_age_in_seconds_or_hours(project: Project, tmp_path: Path) -> None:
    import_network(project=project, inp_path=_inp(tmp_path, "Age"), baseline_hours=1, step_minutes=30, start=START)
    si, us = _scopes(project)
    assert si.quality_type == "AGE"
    # The .inp's initial quality of J1 is 1.0 — for an age simulation, 1 hour: 3600 s at the start.
    start = "2026-11-01T00:00:00Z"
    out = _call(si, "get_model_baseline_at_time", element_type="junction", element_id="J1", time=start)
    assert (out["data"]["values"]["quality"], out["units"]["quality"]) == (pytest.approx(3600.0), "s")
    out = _call(us, "get_model_baseline_at_time", element_type="junction", element_id="J1", time=start)
    assert (out["data"]["values"]["quality"], out["units"]["quality"]) == (pytest.approx(1.0), "h")


def test_trace_in_percent(project: Project, tmp_path: Path) -> None:
    import_network(project=project, inp_path=_inp(tmp_path, "Trace R1"), baseline_hours=1, step_minutes=30, start=START)
    si, us = _scopes(project)
    for scope in (si, us):
        values, units = _baseline(scope, "reservoir", "R1")
        assert (values["quality"], units["quality"]) == (pytest.approx(100.0), "%")


def test_conversion_factors_are_derived_once_and_cheap() -> None:
    """Factors are a table built from pint at import; converting a full page (500 elements × every
    numeric property) is list walking and multiplication, measured here against pint per value."""
    assert shown("pressure", unit_system="US").label == "psi"
    assert FACTORS[("flow", "US", "", "")].factor == pytest.approx(1 / GPM)
    from queries.schemas.network import ElementListResult

    def page() -> ElementListResult:
        props = {"length": 100.0, "diameter": 0.3, "roughness": 100.0, "bulk_coeff": -1e-5, "wall_coeff": 0.0}
        items = [{"element_type": "pipe", "element_id": f"P{i}", "properties": dict(props)} for i in range(500)]
        return ElementListResult.model_validate({
            "source": "model_network", "source_ref": "x", "queried_at": "2026-11-01T00:00:00Z",
            "origin": "model_network", "units": {"length": "length", "diameter": "pipe_diameter",
            "roughness": "roughness", "bulk_coeff": "bulk_rate", "wall_coeff": "wall_rate"},
            "data": {"items": items, "total": 500, "limit": 500, "offset": 0, "has_more": False},
        })  # fmt: skip

    us = dataclasses.replace(service_scope(Project(pk=1, slug="x"), ()), unit_system="US", quality_type="NONE")
    pages = [page() for _ in range(20)]
    t0 = time.perf_counter()
    for p in pages:
        present(p, us)
    per_page_ms = (time.perf_counter() - t0) * 1000 / len(pages)
    assert pages[0].data.items[0].properties["length"] == pytest.approx(100 / FT)
    import pint

    ureg = pint.UnitRegistry()
    t0 = time.perf_counter()
    for _ in range(500 * 4):
        _ = ureg.Quantity(100.0, "m").to("ft").magnitude
    pint_ms = (time.perf_counter() - t0) * 1000
    print(f"\npresent(): {per_page_ms:.2f} ms per 500-element US page; pint per value: {pint_ms:.1f} ms")
    assert per_page_ms < pint_ms / 5
