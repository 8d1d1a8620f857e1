"""The contaminant simulation's computation (issue 42 item 2) against an independent one: the arrival
times equal a direct EPANET toolkit CHEM run (quality type, source, pattern set through the toolkit
itself, quality stepped by hand), within one quality step."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import wntr

from queries.importer.epanet import wntr_network_path
from queries.runs.contaminant import ContaminantError, contaminant

EN_SOURCEQUAL, EN_SOURCEPAT, EN_SOURCETYPE, EN_QUALITY = 5, 6, 7, 12
EN_SETPOINT, EN_CHEM = 2, 1
EN_DURATION, EN_HYDSTEP, EN_QUALSTEP, EN_REPORTSTEP = 0, 1, 2, 5
QSTEP = 300


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net3.inp")))


def _direct_arrival(tmp: Path, node: str, mg_l: float, hours: int, threshold: float) -> dict[str, int]:
    """First time (s) each node's concentration passes ``threshold``: Net3 as shipped, opened by the
    toolkit, with the chemical, the setpoint source and its one-hour pattern set there."""
    en = wntr.epanet.toolkit.ENepanet()
    en.ENopen(str(wntr_network_path("Net3.inp")), str(tmp / "d.rpt"), str(tmp / "d.bin"))
    ph, lib = en._project, en.ENlib
    try:
        for param, value in (
            (EN_DURATION, hours * 3600),
            (EN_HYDSTEP, QSTEP),
            (EN_QUALSTEP, QSTEP),
            (EN_REPORTSTEP, QSTEP),
        ):
            en.ENsettimeparam(param, value)
        assert lib.EN_setqualtype(ph, EN_CHEM, b"chem", b"mg/L", b"") == 0
        assert lib.EN_addpattern(ph, b"inj") == 0
        index = ctypes.c_int()
        assert lib.EN_getpatternindex(ph, b"inj", ctypes.byref(index)) == 0
        values = (ctypes.c_double * hours)(*([1.0] + [0.0] * (hours - 1)))  # on for the first hour (the pattern step)
        assert lib.EN_setpattern(ph, index.value, values, hours) == 0
        source = en.ENgetnodeindex(node)
        en.ENsetnodevalue(source, EN_SOURCETYPE, EN_SETPOINT)
        en.ENsetnodevalue(source, EN_SOURCEQUAL, mg_l)
        en.ENsetnodevalue(source, EN_SOURCEPAT, index.value)
        en.ENsolveH()
        en.ENopenQ()
        en.ENinitQ(0)
        count = en.ENgetcount(0)  # EN_NODECOUNT
        names = [en.ENgetnodeid(i) for i in range(1, count + 1)]
        arrival: dict[str, int] = {}
        while True:
            now = en.ENrunQ()
            for i, name in enumerate(names, start=1):
                if name not in arrival and en.ENgetnodevalue(i, EN_QUALITY) > threshold:
                    arrival[name] = int(now)
            if en.ENnextQ() <= 0:
                break
        en.ENcloseQ()
    finally:
        en.ENclose()
    return arrival


def test_arrival_times_equal_a_direct_epanet_chem_run(tmp_path: Path) -> None:
    got = contaminant(_net3(), injection_node_ids=["River"], injection_minutes=60, hours=24, concentration=10.0,
                      threshold=0.5, quality_step_s=QSTEP)  # fmt: skip
    direct = _direct_arrival(tmp_path, "River", 10.0, 24, 0.5)
    assert len(direct) > 20  # it spreads
    assert set(got.arrival) == set(direct)
    for node, t in direct.items():
        assert abs(got.arrival[node] - t) <= QSTEP, (node, got.arrival[node], t)
    assert max(n for _, n, _ in got.extent) >= 5 and got.mass_consumed > 0 and got.volume_consumed > 0


def test_a_mass_injection_at_a_junction_reaches_downstream() -> None:
    """5 g/min for 30 minutes into junction 123: it is there by the first quality step, and spreads."""
    got = contaminant(_net3(), injection_node_ids=["123"], injection_minutes=30, hours=12, mass_rate=5000.0,
                      threshold=0.01)  # fmt: skip
    assert got.arrival["123"] == QSTEP and len(got.arrival) >= 50
    assert sorted(got.arrival.values())[0] == QSTEP  # nothing before the injection


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"injection_node_ids": []}, r"1 to 10 nodes"),
        ({"injection_node_ids": ["NOPE"]}, r"'NOPE' are not nodes"),
        ({"concentration": None}, r"as concentration or as mass_rate, one of them"),
        ({"injection_minutes": 0}, r"must be more than zero"),
        ({"injection_minutes": 30.5}, r"whole minutes"),
    ],
)
def test_a_simulation_that_cannot_be_computed_says_which_parameter(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"injection_node_ids": ["River"], "injection_minutes": 60, "hours": 2,
                               "concentration": 1.0, "threshold": 0.1, **kwargs}  # fmt: skip
    with pytest.raises(ContaminantError, match=message):
        contaminant(_net3(), **args)  # type: ignore[arg-type]
