"""The burst analysis's computation (issue 42 item 2) against an independent one: the volume lost equals
the emitter flow of a direct EPANET toolkit run of the same split pipe and coefficient, integrated over
EPANET's own hydraulic steps, within 1 %."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import wntr
from wntr.epanet.util import FlowUnits, HydParam, to_si

from queries.importer.epanet import wntr_network_path
from queries.runs.burst import BURST_NODE, BurstError, burst

EN_DEMAND, EN_PRESSURE = 9, 11


def _net3() -> wntr.network.WaterNetworkModel:
    return wntr.network.WaterNetworkModel(str(wntr_network_path("Net3.inp")))


def _direct_volume(tmp: Path, pipe: str, position: float, coefficient: float, hours: float) -> float:
    """m³ through the emitter, from EPANET's toolkit stepped by hand: each hydraulic step's flow times
    the step EPANET took (intermediate steps for tanks and controls included)."""
    wn = wntr.morph.split_pipe(_net3(), pipe, "direct-pipe", "direct-node", split_at_point=position)
    wn.get_node("direct-node").emitter_coefficient = coefficient
    t = wn.options.time
    t.duration, t.hydraulic_timestep, t.report_timestep, t.report_start = int(hours * 3600), 900, 900, 0
    inp = tmp / "direct.inp"
    wntr.network.write_inpfile(wn, str(inp), units="GPM")
    en = wntr.epanet.toolkit.ENepanet()
    en.ENopen(str(inp), str(tmp / "direct.rpt"), str(tmp / "direct.bin"))
    try:
        en.ENopenH()
        en.ENinitH(0)
        node = en.ENgetnodeindex("direct-node")
        volume = 0.0
        while True:
            now = en.ENrunH()
            flow = to_si(FlowUnits.GPM, en.ENgetnodevalue(node, EN_DEMAND), HydParam.Flow)
            step = en.ENnextH()
            volume += flow * step
            if step <= 0 or now >= hours * 3600:
                break
        en.ENcloseH()
    finally:
        en.ENclose()
    return volume


@pytest.mark.parametrize(("pipe", "position", "hours"), [("105", 0.3, 24), ("123", 0.5, 12)])
def test_the_volume_lost_equals_a_direct_epanet_run(tmp_path: Path, pipe: str, position: float, hours: float) -> None:
    coefficient = 0.002  # m³/s per m^0.5: about 13 L/s at 40 m
    got = burst(_net3(), pipe_id=pipe, position=position, hours=hours, coefficient=coefficient)
    direct = _direct_volume(tmp_path, pipe, position, coefficient, hours)
    assert direct > 100  # a real burst: hundreds of m³
    assert got.volume == pytest.approx(direct, rel=0.01)
    assert got.peak_flow >= got.mean_flow > 0 and not got.coefficient_from_leak_flow


def test_a_leak_flow_is_a_coefficient_at_the_baseline_pressure() -> None:
    got = burst(_net3(), pipe_id="105", hours=6, leak_flow=0.02, pressure_drop_threshold=0.5)
    assert got.baseline is not None and got.coefficient_from_leak_flow
    p0 = float(got.baseline.node["pressure"][BURST_NODE].iloc[0])
    assert got.coefficient == pytest.approx(0.02 / math.sqrt(p0))
    # The most affected first, every one over the threshold; their demand is what the drop reaches.
    drops = [d for _, d in got.affected]
    assert drops == sorted(drops, reverse=True) and all(d > 0.5 for d in drops) and len(drops) >= 3
    assert got.demand_affected > 0


def test_the_baseline_is_the_model_unchanged_by_the_split(tmp_path: Path) -> None:
    got = burst(_net3(), pipe_id="105", hours=6, coefficient=0.001)
    plain = wntr.sim.EpanetSimulator(_window(_net3(), 6)).run_sim(file_prefix=str(tmp_path / "plain"))
    assert got.baseline is not None
    junctions = _net3().junction_name_list
    diff = (got.baseline.node["pressure"][junctions] - plain.node["pressure"][junctions]).abs().max().max()
    assert diff < 0.01  # m: a junction of no demand changes nothing


def _window(wn: wntr.network.WaterNetworkModel, hours: float) -> wntr.network.WaterNetworkModel:
    wn = copy.deepcopy(wn)
    t = wn.options.time
    t.duration, t.hydraulic_timestep, t.report_timestep, t.report_start = int(hours * 3600), 900, 900, 0
    return wn


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipe_id": "NOPE", "hours": 1, "coefficient": 0.001}, r"pipe_id 'NOPE' is not a pipe of the model"),
        ({"pipe_id": "105", "hours": 1, "coefficient": 0.001, "position": 1.0}, r"position must be between 0 and 1"),
        ({"pipe_id": "105", "hours": 1}, r"as coefficient or as leak_flow, one of them"),
        ({"pipe_id": "105", "hours": 1, "coefficient": 0.001, "leak_flow": 0.01}, r"one of them"),
        ({"pipe_id": "105", "hours": 0, "coefficient": 0.001}, r"duration must be more than zero"),
    ],
)
def test_a_burst_that_cannot_be_computed_says_which_parameter(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(BurstError, match=message):
        burst(_net3(), **kwargs)  # type: ignore[arg-type]
