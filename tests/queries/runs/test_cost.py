"""The cost model of a hydraulic run (issue 42 item 4): fitted to runs measured on this machine, kept as
data with the date, and never estimating a run like the measured ones below what it took."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from queries.runs.cost import MARGIN_FLOOR_S, RunShape, calibration, engine_version, estimate, fit


def test_the_calibration_is_data_with_its_date_machine_and_engine() -> None:
    data = calibration()
    measured = datetime.strptime(data["measured_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert measured <= datetime.now(UTC)
    assert re.fullmatch(r".+: \d+ CPUs, .+", data["machine"])
    assert len(data["runs"]) >= 20 and len({r["network"] for r in data["runs"]}) >= 4
    # Calibrated with the engine the product runs: a different toolkit needs a new calibration.
    assert data["engine"] == engine_version() and re.fullmatch(r"EPANET 2\.2\.\d+ \(WNTR [\d.]+\)", data["engine"])
    # The stored coefficients are the fit of the stored runs (nothing edited by hand).
    assert _close(fit(data["runs"]), data["model"])


def _close(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].keys() == b[k].keys() and all(a[k][c] == pytest.approx(b[k][c], rel=1e-9, abs=1e-15) for c in a[k])
        for k in a
    )


def test_no_measured_run_is_estimated_below_what_it_took() -> None:
    data = calibration()
    for run in data["runs"]:
        shape = RunShape(nodes=run["nodes"], links=run["links"], hours=run["hours"], step_s=run["step_s"],
                         quality=run["quality"])  # fmt: skip
        guess = estimate(shape)
        assert guess.peak_memory_mb >= run["peak_rss_mb"] - 0.1, run
        if run["cpu_s"] >= MARGIN_FLOOR_S:
            assert guess.cpu_seconds >= run["cpu_s"] + run["open_s"] - 0.01, run  # the solve and the opening
        assert guess.calibrated_at == data["measured_at"]


def test_the_fit_recovers_known_coefficients() -> None:
    """Runs generated from known coefficients are fitted back to them (the fitting, not the machine)."""
    a, b, c, d, r0, r1, r2 = 0.05, 2e-6, 3e-7, 1.5e-4, 200.0, 9e-5, 1e-5
    runs = []
    for nodes, links in ((10, 12), (100, 120), (1000, 1100), (3000, 3500)):
        for hours in (24, 72, 168):
            for quality in (False, True):
                s = RunShape(nodes=nodes, links=links, hours=hours, quality=quality)
                runs.append({
                    "nodes": nodes, "links": links, "hours": hours, "step_s": s.step_s, "quality": quality,
                    "cpu_s": a + b * s.elements * s.hydraulic_steps + c * s.elements * s.quality_steps,
                    "open_s": d * s.elements,
                    "peak_rss_mb": r0 + s.elements * s.report_steps * (r1 + (r2 if quality else 0.0)),
                })  # fmt: skip
    model = fit(runs)
    assert model["cpu_s"]["a"] == pytest.approx(a, rel=1e-6)
    assert model["cpu_s"]["b_per_element_step"] == pytest.approx(b, rel=1e-6)
    assert model["cpu_s"]["c_per_element_quality_step"] == pytest.approx(c, rel=1e-6)
    assert model["peak_rss_mb"]["r1_per_element_report_step"] == pytest.approx(r1, rel=1e-6)
    assert model["peak_rss_mb"]["r2_per_element_report_step_quality"] == pytest.approx(r2, rel=1e-6)
    assert model["open_s"]["d_per_element"] == pytest.approx(d, rel=1e-6)
    assert model["cpu_s"]["margin"] == pytest.approx(1.0) and model["peak_rss_mb"]["margin"] == pytest.approx(1.0)
    assert model["open_s"]["margin"] == pytest.approx(1.0)
    one = estimate(RunShape(nodes=500, links=600, hours=48), model, "test")
    assert one.cpu_seconds == pytest.approx(d * 1100 + a + b * 1100 * 192, abs=0.01)
    # A calibration from before the opening was timed estimates none (a new one is needed for it).
    older = {k: v for k, v in model.items() if k != "open_s"}
    assert estimate(RunShape(nodes=500, links=600, hours=48), older, "test").cpu_seconds == pytest.approx(
        a + b * 1100 * 192, abs=0.01
    )


def test_a_burst_is_two_scenarios_and_water_quality_costs_more() -> None:
    """A burst runs the scenario and the baseline on one opened model: twice the solve, one opening, both
    results held at once."""
    net6 = {"nodes": 3356, "links": 3892, "hours": 72.0}
    one, two = estimate(RunShape(**net6)), estimate(RunShape(**net6, scenarios=2))
    opened = calibration()["model"]["open_s"]
    opening = opened["d_per_element"] * (3356 + 3892) * opened["margin"]
    assert opening > 0.1  # Net6's copy is measured, not assumed away
    assert two.cpu_seconds - opening == pytest.approx(2 * (one.cpu_seconds - opening), abs=0.03)
    r0 = calibration()["model"]["peak_rss_mb"]["r0"] * calibration()["model"]["peak_rss_mb"]["margin"]
    assert two.peak_memory_mb - r0 == pytest.approx(2 * (one.peak_memory_mb - r0), abs=0.2)
    assert estimate(RunShape(**net6, quality=True)).cpu_seconds > one.cpu_seconds
    assert (one.hydraulic_steps, one.quality_steps) == (288, 0)
    assert estimate(RunShape(**net6, quality=True)).quality_steps == 864


@pytest.mark.parametrize(
    "bad",
    [{"nodes": 0, "links": 1, "hours": 1}, {"nodes": 1, "links": 1, "hours": 0},
     {"nodes": 1, "links": 1, "hours": 1, "scenarios": 0}, {"nodes": 1, "links": 1, "hours": 1, "step_s": 0}],
)  # fmt: skip
def test_a_shape_without_a_network_or_a_window_is_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="a run needs|at least one scenario"):
        RunShape(**bad)
