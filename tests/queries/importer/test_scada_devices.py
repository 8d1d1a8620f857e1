"""import_scada_devices: every quantity with its native unit converted, positions from a CRS or from the
element, re-import in place, bad rows refused by line and field with nothing written, and the database's
own refusal of an unknown quantity; one odd device never breaks the device list."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.scada_devices import ScadaImportError, import_scada_devices
from queries.models import Junction, Quantity, ScadaDevice
from queries.scada_units import QUANTITIES, STORAGE_UNITS, conversion
from queries.schemas.common import PageRequest
from queries.schemas.scada import QuantityName
from queries.services import scada
from tests.queries.factories import service_scope

HEADER = "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy\n"
ROWS = [
    "PT-1,Pressure 10,pressure,psi,junction,10,,,300,0.5",
    "PT-2,Pressure 11 (kPa),pressure,kPa,junction,11,117.21,39.11,60,",
    "FT-1,Flow main,flow,gpm,pipe,10,,,300,5",
    "LT-1,Tank level,level,ft,tank,2,,,300,0.1",
    "PS-1,Pump 9 status,pump_status,on/off,pump,9,,,300,",
    "PV-1,Pump 9 speed,pump_speed,%,pump,9,,,300,",
    "CL-1,Chlorine 12,chlorine,mg/L,junction,12,,,900,0.02",
    "TT-1,Temperature 13,temperature,°F,junction,13,,,900,0.5",
]


@pytest.fixture
def net1(project: Project) -> Project:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    return project


def write(tmp_path: Path, rows: list[str], name: str = "devices.csv", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_the_three_lists_of_quantities_agree() -> None:
    assert tuple(QUANTITIES) == tuple(Quantity.values) == get_args(QuantityName)
    assert set(STORAGE_UNITS) == set(QUANTITIES)


@pytest.mark.parametrize(
    ("quantity", "unit", "native", "stored"),
    [
        ("pressure", "psi", 100.0, 70.30696),  # 100 psi = 689.4757 kPa = 70.307 m of water
        ("pressure", "bar", 1.0, 10.19716),
        ("pressure", "ft", 10.0, 3.048),
        ("flow", "gpm", 1000.0, 0.0630902),
        ("flow", "MGD", 1.0, 0.0438126),
        ("flow", "L/s", 50.0, 0.05),
        ("flow", "m³/s", 0.2, 0.2),
        ("temperature", "°F", 212.0, 100.0),
        ("temperature", "°C", 12.5, 12.5),
        ("valve_position", "1", 0.25, 25.0),
        ("pump_speed", "%", 85.0, 0.85),
        ("chlorine", "ppm", 0.4, 0.4),
    ],
)
def test_native_units_convert_to_the_storage_unit(quantity: str, unit: str, native: float, stored: float) -> None:
    assert conversion(quantity, unit).apply(native) == pytest.approx(stored, rel=1e-5)


def test_every_quantity_imports_and_the_list_answers(net1: Project, tmp_path: Path) -> None:
    summary = import_scada_devices(project=net1, path=write(tmp_path, ROWS))
    assert (summary.created, summary.updated) == (8, 0)
    devices = {d.device_id: d for d in ScadaDevice.objects.filter(project=net1)}
    assert {d.quantity for d in devices.values()} == set(QUANTITIES) - {"valve_position"}
    assert devices["PT-1"].unit == "m" and devices["PT-1"].native_unit == "psi"
    assert devices["PT-1"].accuracy == pytest.approx(0.5 * 0.70307, rel=1e-4)  # stored in the storage unit
    assert devices["TT-1"].unit == "degC" and devices["FT-1"].unit == "m3/s" and devices["PS-1"].unit == "on/off"
    # Empty x, y → the element's own position; given x, y → that place.
    junction = Junction.objects.get(project=net1, element_id="10")
    assert devices["PT-1"].location.equals_exact(junction.geom, 1e-9)
    assert (round(devices["PT-2"].location.x, 6), round(devices["PT-2"].location.y, 6)) == (117.21, 39.11)
    result = scada.list_scada_devices(scope=service_scope(net1, ["scada.view"]), page=PageRequest(limit=50))
    assert [d.quantity for d in result.data.items] == [
        "chlorine", "flow", "level", "pump_status", "pressure", "pressure", "pump_speed", "temperature",
    ]  # fmt: skip
    assert {d.device_id: d.native_unit for d in result.data.items}["FT-1"] == "gpm"


def test_projected_coordinates_are_transformed(net1: Project, tmp_path: Path) -> None:
    # EPSG:32650 (UTM 50N) easting/northing of about (117.2, 39.1).
    rows = ["PT-9,Projected,pressure,m,junction,10,517293.954,4327892.822,300,"]
    import_scada_devices(project=net1, path=write(tmp_path, rows), crs="EPSG:32650")
    point = ScadaDevice.objects.get(project=net1, device_id="PT-9").location
    assert point.x == pytest.approx(117.2, abs=1e-4) and point.y == pytest.approx(39.1, abs=1e-4)


def test_reimport_updates_in_place(net1: Project, tmp_path: Path) -> None:
    import_scada_devices(project=net1, path=write(tmp_path, ROWS))
    pk = ScadaDevice.objects.get(project=net1, device_id="PT-1").pk
    again = import_scada_devices(project=net1, path=write(tmp_path, ROWS))
    assert (again.created, again.updated, again.unchanged) == (0, 0, 8)
    changed = [ROWS[0].replace("Pressure 10", "Pressure ten").replace("psi", "bar"), *ROWS[1:]]
    third = import_scada_devices(project=net1, path=write(tmp_path, changed))
    assert (third.created, third.updated, third.unchanged) == (0, 1, 7)
    device = ScadaDevice.objects.get(project=net1, device_id="PT-1")
    assert (device.pk, device.name, device.native_unit, device.unit) == (pk, "Pressure ten", "bar", "m")


def test_bad_rows_are_refused_by_line_and_field_and_nothing_is_written(net1: Project, tmp_path: Path) -> None:
    rows = [
        ROWS[0],
        "X-1,Odd,vibration,mm/s,junction,10,,,300,",
        "X-2,Wrong unit,pressure,gpm,junction,10,,,300,",
        "X-3,No such node,pressure,m,junction,NOPE,,,300,",
        "X-4,Valve on a pipe,valve_position,%,pipe,10,,,300,",
        "X-5,Bad interval,flow,L/s,pipe,10,,,often,",
        "PT-1,Twice,pressure,m,junction,11,,,300,",
    ]
    with pytest.raises(ScadaImportError) as caught:
        import_scada_devices(project=net1, path=write(tmp_path, rows))
    message = str(caught.value)
    assert "line 3, field quantity: unknown quantity 'vibration'" in message
    assert "line 4, field unit: unit 'gpm' cannot express pressure" in message
    assert "line 5, field element_id: no junction 'NOPE'" in message
    assert "line 6, field element_type: a valve_position device cannot sit on a pipe" in message
    assert "line 7, field sample_interval_s" in message
    assert "line 8, field device_id: PT-1 is listed twice (first on line 2)" in message
    assert not ScadaDevice.objects.filter(project=net1).exists()


def test_the_command_answers_in_a_sentence(net1: Project, tmp_path: Path) -> None:
    call_command("import_scada_devices", str(write(tmp_path, ROWS)), "--project", net1.slug)
    assert ScadaDevice.objects.filter(project=net1).count() == 8
    with pytest.raises(CommandError, match="missing column"):
        call_command("import_scada_devices", str(write(tmp_path, ROWS, header="id,name\n")), "--project", net1.slug)
    with pytest.raises(CommandError, match="unknown project"):
        call_command("import_scada_devices", str(write(tmp_path, ROWS)), "--project", "nope")
    with pytest.raises(CommandError, match="not a coordinate reference system"):
        call_command("import_scada_devices", str(write(tmp_path, ROWS)), "--project", net1.slug, "--crs", "EPSG:0")


def test_the_database_refuses_an_unknown_quantity(net1: Project, tmp_path: Path) -> None:
    import_scada_devices(project=net1, path=write(tmp_path, ROWS[:1]))
    with pytest.raises(IntegrityError, match="scadadevice_quantity_known"), transaction.atomic():
        ScadaDevice.objects.filter(project=net1).update(quantity="vibration")
