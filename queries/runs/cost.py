"""What a hydraulic run will cost, decided before anything runs (issue 42 item 4).

The cost model is fitted to runs measured on this machine (``scripts/calibrate_run_cost.py`` writes
``calibration.json`` beside this module, with the date, the machine and every measured run):

    cpu_s   = d·E + scenarios·(a + b·E·H + c·E·Q·[quality])
    peak_mb = r0 + scenarios·(r1·E·R + r2·E·R·[quality])

with E the model's nodes plus links, H the hydraulic steps of the window, Q its water-quality steps and R
its report steps. ``d·E`` is paid once per run whatever its window: opening the run's own copy of the
pinned model (``analyses.network.fresh``, unpickling the parsed network: 0.2 s of CPU on Net6, deepcopy's 0.3 s
when the calibration of 2026-12-07 23:27Z timed it),
timed per network by the calibration as ``open_s``. The coefficients are fitted without negative values
(``scipy.optimize.nnls``), and the estimate is the fit times the largest under-estimate the fit made of a
measured run (``margin``, one for each part), so a run like the measured ones is not estimated below what
it took. A burst is two scenarios (the scenario and the baseline for comparison): their CPU adds up, and
both results are held at once; the model is opened once for both.
"""

from __future__ import annotations

import ctypes
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

CALIBRATION = Path(__file__).with_name("calibration.json")
#: Runs shorter than this (CPU seconds) are timing noise for the margin: their ratio is not counted.
MARGIN_FLOOR_S = 0.05


@dataclass(frozen=True)
class RunShape:
    """What decides a run's cost: the model's size, the window, the steps, water quality, scenarios."""

    nodes: int
    links: int
    hours: float
    step_s: int = 900
    quality: bool = False
    quality_step_s: int = 300
    scenarios: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.links < 0 or self.hours <= 0 or self.step_s <= 0 or self.quality_step_s <= 0:
            raise ValueError("a run needs nodes, a window and steps greater than zero")
        if self.scenarios < 1:
            raise ValueError("a run has at least one scenario")

    @property
    def elements(self) -> int:
        return self.nodes + self.links

    @property
    def hydraulic_steps(self) -> int:
        return math.ceil(self.hours * 3600 / self.step_s)

    @property
    def quality_steps(self) -> int:
        return math.ceil(self.hours * 3600 / self.quality_step_s) if self.quality else 0

    @property
    def report_steps(self) -> int:
        return self.hydraulic_steps + 1


@dataclass(frozen=True)
class Estimate:
    cpu_seconds: float
    peak_memory_mb: float
    scenarios: int
    hydraulic_steps: int
    quality_steps: int
    calibrated_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cpu_terms(shape: RunShape) -> list[float]:
    return [1.0, shape.elements * shape.hydraulic_steps, shape.elements * shape.quality_steps]


def _rss_terms(shape: RunShape) -> list[float]:
    held = shape.elements * shape.report_steps
    return [1.0, held * shape.scenarios, held * shape.scenarios * (1.0 if shape.quality else 0.0)]


def _shape_of(run: Mapping[str, Any]) -> RunShape:
    return RunShape(nodes=int(run["nodes"]), links=int(run["links"]), hours=float(run["hours"]),
                    step_s=int(run["step_s"]), quality=bool(run["quality"]))  # fmt: skip


def fit(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The coefficients and margins fitted to measured ``runs`` (dicts as the calibration script writes)."""
    shapes = [_shape_of(r) for r in runs]
    cpu = np.array([float(r["cpu_s"]) for r in runs])
    rss = np.array([float(r["peak_rss_mb"]) for r in runs])
    cpu_coef, _ = nnls(np.array([_cpu_terms(s) for s in shapes]), cpu)
    rss_coef, _ = nnls(np.array([_rss_terms(s) for s in shapes]), rss)
    cpu_fit = np.array([_cpu_terms(s) for s in shapes]) @ cpu_coef
    rss_fit = np.array([_rss_terms(s) for s in shapes]) @ rss_coef
    timed = cpu >= MARGIN_FLOOR_S
    cpu_margin = float(max(1.0, np.max(cpu[timed] / cpu_fit[timed]))) if timed.any() else 1.0
    rss_margin = float(max(1.0, np.max(rss / rss_fit)))
    opened = [(s.elements, float(r["open_s"])) for s, r in zip(shapes, runs, strict=True) if "open_s" in r]
    d, open_margin = 0.0, 1.0
    if opened:
        elements, open_s = np.array([[e] for e, _ in opened], dtype=float), np.array([o for _, o in opened])
        d = float(nnls(elements, open_s)[0][0])
        open_timed = open_s >= MARGIN_FLOOR_S
        if open_timed.any() and d > 0:
            open_margin = float(max(1.0, np.max(open_s[open_timed] / (elements[open_timed, 0] * d))))
    return {
        "open_s": {"d_per_element": d, "margin": round(open_margin, 3)},
        "cpu_s": {"a": float(cpu_coef[0]), "b_per_element_step": float(cpu_coef[1]),
                  "c_per_element_quality_step": float(cpu_coef[2]), "margin": round(cpu_margin, 3)},
        "peak_rss_mb": {"r0": float(rss_coef[0]), "r1_per_element_report_step": float(rss_coef[1]),
                        "r2_per_element_report_step_quality": float(rss_coef[2]), "margin": round(rss_margin, 3)},
    }  # fmt: skip


@cache
def calibration() -> dict[str, Any]:
    """The measured calibration (read once per process)."""
    data: dict[str, Any] = json.loads(CALIBRATION.read_text())
    return data


def estimate(shape: RunShape, model: Mapping[str, Any] | None = None, calibrated_at: str | None = None) -> Estimate:
    """CPU seconds and peak memory of a run of ``shape``, from the calibration (or ``model``)."""
    if model is None:
        data = calibration()
        model, calibrated_at = data["model"], data["measured_at"]
    cpu_m, rss_m = model["cpu_s"], model["peak_rss_mb"]
    per_scenario = float(np.dot([cpu_m["a"], cpu_m["b_per_element_step"], cpu_m["c_per_element_quality_step"]],
                                _cpu_terms(shape)))  # fmt: skip
    peak = float(np.dot([rss_m["r0"], rss_m["r1_per_element_report_step"],
                         rss_m["r2_per_element_report_step_quality"]], _rss_terms(shape)))  # fmt: skip
    open_m = model.get("open_s", {"d_per_element": 0.0, "margin": 1.0})
    opening = float(open_m["d_per_element"]) * shape.elements * float(open_m["margin"])
    return Estimate(
        cpu_seconds=round(opening + per_scenario * shape.scenarios * float(cpu_m["margin"]), 2),
        peak_memory_mb=round(peak * float(rss_m["margin"]), 1),
        scenarios=shape.scenarios,
        hydraulic_steps=shape.hydraulic_steps,
        quality_steps=shape.quality_steps,
        calibrated_at=calibrated_at or "",
    )


@cache
def engine_version() -> str:
    """The engine runs use, as a run records it: EPANET's own version through WNTR's toolkit."""
    import wntr
    from wntr.epanet import toolkit

    number = ctypes.c_int()
    toolkit.ENepanet().ENlib.EN_getversion(ctypes.byref(number))
    major, minor, patch = number.value // 10000, number.value // 100 % 100, number.value % 100
    return f"EPANET {major}.{minor}.{patch} (WNTR {wntr.__version__})"
