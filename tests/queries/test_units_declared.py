"""One unit system in every answer (issue 40 items 1–2, R-ONB-3).

- Every numeric output field of every registered tool declares its quantity (``x-quantity`` in its JSON
  Schema, ``queries.units.declared``): a new tool that forgets fails here.
- A US project whose devices report psi, gpm, ft and °F reads back exactly what it imported, in those
  units, from every SCADA tool (devices, readings, history, deviation), and the model baseline beside a
  reading is in the same unit as the reading; SI answers are unchanged.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contexts.models import Project
from contexts.scope import QueryScope
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.scada_devices import import_scada_devices
from queries.importer.scada_readings import import_scada
from queries.plan import run_sync
from queries.registry import tools_by_name
from queries.units import KINDS, QUANTITIES, Shown, present
from tests.queries.factories import service_scope

DEVICE_KINDS = {"by_device", "by_device_delta", "device_unit"}


def _numbers_without_quantity(
    schema: dict[str, Any], defs: dict[str, Any], path: str, seen: frozenset[str]
) -> list[str]:
    """Paths of the number/integer schemas below ``schema`` that no enclosing property declares."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return [] if name in seen else _numbers_without_quantity(defs[name], defs, name, seen | {name})
    found: list[str] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += _numbers_without_quantity(sub, defs, path, seen)
    if schema.get("type") in ("number", "integer"):
        found.append(path)
    for name, sub in schema.get("properties", {}).items():
        kind = sub.get("x-quantity")
        if kind is not None:
            assert kind in KINDS or kind in QUANTITIES, f"{path}.{name}: unknown x-quantity {kind!r}"
            continue
        found += _numbers_without_quantity(sub, defs, f"{path}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        found += _numbers_without_quantity(schema["items"], defs, f"{path}[]", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        found += _numbers_without_quantity(schema["additionalProperties"], defs, f"{path}{{}}", seen)
    return found


def test_every_numeric_output_field_of_every_tool_declares_its_quantity() -> None:
    missing: set[str] = set()
    for name, spec in tools_by_name().items():
        schema = spec.output_schema
        missing.update(f"{name}: {p}" for p in _numbers_without_quantity(schema, schema["$defs"], name, frozenset()))
    assert not missing, "numeric output fields without x-quantity (queries.units.declared):\n" + "\n".join(
        sorted(missing)
    )


def test_the_walk_finds_an_undeclared_number() -> None:
    """The check above can fail: a schema with a bare number is reported."""
    schema = {"properties": {"a": {"type": "number"}, "b": {"type": "integer", "x-quantity": "count"}}}
    assert _numbers_without_quantity(schema, {}, "T", frozenset()) == ["T.a"]


def test_converted_numbers_carry_six_significant_digits_at_most() -> None:
    psi = Shown("psi", 1.422334330711956)
    stored = 12.1 / 1.422334330711956  # 12.1 psi as stored (m)
    assert stored * 1.422334330711956 == 12.100000000000001  # the float product has a 17th-digit tail …
    assert psi(stored) == 12.1  # … that the answer never shows


# --- a US utility's devices -------------------------------------------------------------------------------
NY = "America/New_York"
START = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 in New York (EDT)
DEVICES = (
    "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy\n"
    "PT-1,Pressure 10,pressure,psi,junction,10,,,300,0.2\n"
    "FT-1,Flow 10,flow,GPM,pipe,10,,,300,1\n"
    "LT-1,Level 2,level,ft,tank,2,,,300,0.1\n"
    "TT-1,Temperature 11,temperature,degF,junction,11,,,300,\n"
)
PSI = [50.6, 50.9, 51.3, 50.2, 49.8, 50.1, 50.7, 51.1, 50.4, 50.0, 49.9, 50.5]
GPM = [3000.0, 3012.5, 2987.0, 3050.0, 2999.9, 3001.0, 2950.0, 3100.0, 3020.0, 2990.0, 3005.0, 3011.0]
FT = [12.5, 12.6, 12.8, 12.7, 12.9, 13.1, 13.0, 12.8, 12.6, 12.4, 12.5, 12.7]
DEGF = [55.4, 55.5, 55.7, 55.6, 55.2, 55.9, 56.0, 55.8, 55.3, 55.1, 55.6, 55.4]


@pytest.fixture
def us_utility(project: Project, tmp_path: Path) -> tuple[QueryScope, QueryScope]:
    project.timezone, project.unit_system = NY, "US"
    project.save(update_fields=["timezone", "unit_system"])
    import_network(
        project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=2, step_minutes=15, start=START
    )
    devices = tmp_path / "devices.csv"
    devices.write_text(DEVICES)
    import_scada_devices(project=project, path=devices)
    lines = ["time,PT-1,FT-1,LT-1,TT-1"]
    for i in range(12):
        t = START + timedelta(minutes=5 * i)
        lines.append(f"{t:%Y-%m-%dT%H:%M:%SZ},{PSI[i]},{GPM[i]},{FT[i]},{DEGF[i]}")
    readings = tmp_path / "historian.csv"
    readings.write_text("\n".join(lines) + "\n")
    import_scada(project=project, path=readings)
    project.refresh_from_db()
    base = dataclasses.replace(
        service_scope(project, {"scada.view", "simulation.view", "webgis.view"}),
        quality_type=project.quality_type,
        headloss_formula=project.headloss_formula,
    )
    return dataclasses.replace(base, unit_system="SI"), dataclasses.replace(base, unit_system="US")


def _call(scope: QueryScope, tool: str, **args: Any) -> dict[str, Any]:
    return run_sync(tools_by_name()[tool].invoke(scope, args)).model_dump(mode="json")


WINDOW = {"start": START.isoformat(), "end": (START + timedelta(hours=1)).isoformat()}


def test_readings_read_back_exactly_as_imported_in_the_devices_units(us_utility: tuple[QueryScope, QueryScope]) -> None:
    si, us = us_utility
    out = _call(
        us, "query_scada_readings", device_ids=["PT-1", "FT-1", "LT-1", "TT-1"], field="monitored_value", **WINDOW
    )
    assert out["units"] == {"PT-1": "psi", "FT-1": "gpm", "LT-1": "ft", "TT-1": "degF"}
    by_device: dict[str, list[float]] = {}
    for point in out["data"]["items"]:
        by_device.setdefault(point["device_id"], []).append(point["value"])
    assert by_device == {"PT-1": PSI, "FT-1": GPM, "LT-1": FT, "TT-1": DEGF}  # exact: 6 significant digits
    stored = _call(si, "query_scada_readings", device_ids=["PT-1", "TT-1"], field="monitored_value", **WINDOW)
    assert stored["units"] == {"PT-1": "m", "TT-1": "degC"}
    first = {p["device_id"]: p["value"] for p in stored["data"]["items"] if p["time"].startswith("2026-11-01T04:00")}
    assert first["PT-1"] == pytest.approx(50.6 * 0.70306957964, rel=1e-9)  # SI: stored metres, unrounded
    assert first["TT-1"] == pytest.approx((55.4 - 32) / 1.8, rel=1e-9)


def test_devices_give_the_project_unit_their_native_unit_and_accuracy_in_it(
    us_utility: tuple[QueryScope, QueryScope],
) -> None:
    si, us = us_utility
    items = {d["device_id"]: d for d in _call(us, "list_scada_devices")["data"]["items"]}
    assert {k: (d["unit"], d["native_unit"], d["accuracy"]) for k, d in items.items()} == {
        "PT-1": ("psi", "psi", 0.2),
        "FT-1": ("gpm", "GPM", 1.0),
        "LT-1": ("ft", "ft", 0.1),
        "TT-1": ("degF", "degF", None),  # absent in the file: null, not 0.0
    }
    one = _call(us, "get_scada_device", device_id="PT-1")
    assert (one["data"]["unit"], one["data"]["accuracy"], one["units"]["accuracy"]) == ("psi", 0.2, "psi")
    stored = _call(si, "get_scada_device", device_id="PT-1")
    assert (stored["data"]["unit"], stored["units"]["accuracy"]) == ("m", "m")
    assert stored["data"]["accuracy"] == pytest.approx(0.2 * 0.70306957964)


def test_history_shows_readings_and_the_model_in_one_unit(us_utility: tuple[QueryScope, QueryScope]) -> None:
    si, us = us_utility
    elements = [{"element_type": "junction", "element_id": "10"}]
    out = _call(us, "query_element_history", elements=elements, mode="realtime_comparison", limit=100, **WINDOW)
    assert out["units"]["pressure"] == "psi"
    assert [d["unit"] for d in out["data"]["devices"]] == ["psi"]
    measured = [p["value"] for p in out["data"]["items"] if p["origin"] == "measured"]
    assert measured == PSI
    model = {p["time"]: p["value"] for p in out["data"]["items"] if p["origin"] == "model_baseline"}
    series = _call(us, "query_model_baseline_series", element_type="junction", element_ids=["10"], **WINDOW)
    assert series["units"]["pressure"] == "psi"
    from_series = {p["time"]: p["values"]["pressure"] for p in series["data"]["items"]}
    assert model and all(from_series[t] == pytest.approx(v, rel=1e-5) for t, v in model.items())
    model_si = [
        p["value"]
        for p in _call(si, "query_element_history", elements=elements, mode="realtime_comparison", limit=100, **WINDOW)[
            "data"
        ]["items"]
        if p["origin"] == "model_baseline"
    ]
    assert [round(v * 1.422334330711956, 3) for v in model_si] == [round(v, 3) for v in model.values()]


def test_deviation_is_in_the_devices_unit(us_utility: tuple[QueryScope, QueryScope]) -> None:
    si, us = us_utility
    got = _call(us, "rank_scada_deviation", quantity="pressure", **WINDOW)
    stored = _call(si, "rank_scada_deviation", quantity="pressure", **WINDOW)
    (item,), (item_si,) = got["data"]["items"], stored["data"]["items"]
    assert (item["unit"], got["units"]["PT-1"], item_si["unit"]) == ("psi", "psi", "m")
    for key in ("mean_abs_diff", "max_abs_diff", "mean_diff"):
        assert item[key] == pytest.approx(item_si[key] * 1.422334330711956, rel=1e-5), key


def test_a_flow_path_is_in_the_projects_flow_unit(us_utility: tuple[QueryScope, QueryScope]) -> None:
    si, us = us_utility
    args = {"element_type": "junction", "element_id": "22", "direction": "upstream", "time": START.isoformat()}
    got, stored = _call(us, "trace_flow_path", **args), _call(si, "trace_flow_path", **args)
    assert (got["units"]["flow"], stored["units"]["flow"]) == ("gpm", "m3/s")
    flows = [
        (a["flow"], b["flow"]) for a, b in zip(got["data"]["items"], stored["data"]["items"], strict=True) if a["flow"]
    ]
    assert flows and all(a == pytest.approx(b * 15850.323141488907, rel=1e-5) for a, b in flows)


def test_present_leaves_an_si_reading_page_untouched(us_utility: tuple[QueryScope, QueryScope]) -> None:
    """SI: the stored numbers are the answer (no walk, no rounding): present returns them as they are."""
    si, _ = us_utility
    result = run_sync(
        tools_by_name()["query_scada_readings"].invoke(
            si, {"device_ids": ["PT-1"], "field": "monitored_value", **WINDOW}
        )
    )
    before = result.model_dump()
    assert present(result, si).model_dump() == before
