"""The flushing analysis's computation (issue 42 item 2) against an independent one: each pipe's maximum
velocity equals a direct EPANET toolkit run with the hydrant demand, within 1 %."""

from __future__ import annotations

from pathlib import Path

import pytest
import wntr
from wntr.epanet.util import FlowUnits, HydParam, to_si

from queries.importer.epanet import wntr_network_path
from queries.runs.flushing import FlushingError, flushing

EN_VELOCITY, EN_BASEDEMAND = 9, 1
GPM = 6.30901964e-05  # m³/s


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net3.inp")))


def _direct_max_velocity(tmp: Path, hydrants: dict[str, float], hours: int) -> dict[str, float]:
    """Each pipe's highest velocity (m/s) over the window from EPANET's toolkit stepped by hand, with the
    hydrant flow added to the node's demand through the toolkit (a category of its own, no pattern)."""
    wn = _net3()
    t = wn.options.time
    t.duration, t.hydraulic_timestep, t.report_timestep, t.report_start = hours * 3600, 900, 900, 0
    inp = tmp / "direct.inp"
    wntr.network.write_inpfile(wn, str(inp), units="GPM")
    en = wntr.epanet.toolkit.ENepanet()
    en.ENopen(str(inp), str(tmp / "direct.rpt"), str(tmp / "direct.bin"))
    try:
        for node, flow in hydrants.items():  # EN_adddemand: base demand (GPM), no pattern, a name
            index = en.ENgetnodeindex(node)
            code = en.ENlib.EN_adddemand(en._project, index, wntr.epanet.toolkit.ctypes.c_double(flow / GPM),
                                         b"", b"hydrant")  # fmt: skip
            assert code == 0, code
        en.ENopenH()
        en.ENinitH(0)
        pipes = {name: en.ENgetlinkindex(name) for name in wn.pipe_name_list}
        peak = dict.fromkeys(pipes, 0.0)
        while True:
            now = en.ENrunH()
            if now % 900 == 0:  # the report instants, as the product reads them
                for name, index in pipes.items():
                    v = to_si(FlowUnits.GPM, en.ENgetlinkvalue(index, EN_VELOCITY), HydParam.Velocity)
                    peak[name] = max(peak[name], v)
            step = en.ENnextH()
            if step <= 0:
                break
        en.ENcloseH()
    finally:
        en.ENclose()
    return peak


def test_max_velocities_equal_a_direct_epanet_run(tmp_path: Path) -> None:
    hydrants = {"119": 500 * GPM, "253": 500 * GPM}  # 500 gpm at each of two junctions
    got = flushing(_net3(), hydrants=hydrants, hours=6)
    direct = _direct_max_velocity(tmp_path, hydrants, 6)
    assert got.scenario is not None
    for pipe, v in direct.items():
        assert float(got.scenario.link["velocity"][pipe].max()) == pytest.approx(v, rel=0.01, abs=1e-4), pipe
    flushed = {p.pipe_id for p in got.pipes_flushed}
    assert flushed == {p for p, v in direct.items() if v >= 0.75} and len(flushed) >= 3
    velocities = [p.max_velocity for p in got.pipes_flushed]
    assert velocities == sorted(velocities, reverse=True)
    assert set(got.hydrant_pressure) == set(hydrants) and got.min_pressure <= min(got.hydrant_pressure.values())
    assert got.sources and got.sources[0][1] > 0  # some reservoir or tank supplies the extra water


@pytest.mark.parametrize(
    ("hydrants", "message"),
    [({}, r"1 to 10 junctions"), ({"Lake": 0.01}, r"'Lake' is not a junction"), ({"119": 0.0}, r"more than zero")],
)
def test_a_flushing_that_cannot_be_computed_says_which_parameter(hydrants: dict[str, float], message: str) -> None:
    with pytest.raises(FlushingError, match=message):
        flushing(_net3(), hydrants=hydrants, hours=1)
