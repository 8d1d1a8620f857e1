"""Measure what a hydraulic run costs on this machine and fit the cost model the analyses are estimated
with before they are queued (issue 42 item 4). Writes ``queries/runs/calibration.json``: every measured run
(network, size, window, step, water quality, CPU seconds of the solve and of opening the run's own copy of
the model, peak RSS) and the fitted coefficients, with the
date and the machine.

Each run is its own child process (``spawn``), so its peak RSS is its own high-water mark: the EPANET 2.2
toolkit through WNTR's ``EpanetSimulator`` — the engine the baseline and the analyses use — with the
results read back into WNTR's frames, as a run reads them.

    .venv/bin/python scripts/calibrate_run_cost.py            # about 3 minutes on the 2-core VM
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NETWORKS = ("Net1", "Net3", "ky10", "ky4", "Net6")
HOURS = (24, 72, 168)
STEP_S = 900
QUALITY_STEP_S = 300


def _measure(network: str, hours: int, quality: bool) -> dict[str, object]:
    """One run in this (fresh) process: CPU seconds of the run and the process's peak RSS after it."""
    import pickle
    import resource
    import tempfile
    import time
    from importlib.resources import files

    import wntr

    wn = wntr.network.WaterNetworkModel(str(files("wntr") / "library" / "networks" / f"{network}.inp"))
    pickled = pickle.dumps(wn, protocol=pickle.HIGHEST_PROTOCOL)
    opened = time.process_time()
    pickle.loads(pickled)  # noqa: S301 - what a run pays once to open its own copy (analyses.network.fresh)
    open_s = time.process_time() - opened
    t = wn.options.time
    t.duration, t.hydraulic_timestep, t.report_timestep, t.report_start = hours * 3600, STEP_S, STEP_S, 0
    t.quality_timestep = QUALITY_STEP_S
    wn.options.quality.parameter = "CHEMICAL" if quality else "NONE"
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tjwater-calibrate-") as tmp:
        results = wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(Path(tmp) / "sim"))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "network": network, "nodes": wn.num_nodes, "links": wn.num_links, "hours": hours, "step_s": STEP_S,
        "quality": quality, "report_steps": len(results.node["pressure"].index),
        "cpu_s": round(cpu, 4), "wall_s": round(wall, 4), "open_s": round(open_s, 4),
        "peak_rss_mb": round(peak_kib / 1024, 1), "rss_before_mb": round(before_kib / 1024, 1),
    }  # fmt: skip


def _run(args: tuple[str, int, bool]) -> dict[str, object]:
    return _measure(*args)


def main() -> None:
    from queries.runs.cost import fit

    ctx = multiprocessing.get_context("spawn")
    runs = []
    for network in NETWORKS:
        for hours in HOURS:
            for quality in (False, True):
                with ctx.Pool(1, maxtasksperchild=1) as pool:
                    run = pool.apply(_run, ((network, hours, quality),))
                print(json.dumps(run), flush=True)
                runs.append(run)
    import wntr

    from queries.runs.cost import engine_version

    out = {
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
        "engine": engine_version(),
        "wntr": wntr.__version__,
        "model": fit(runs),
        "runs": runs,
    }
    path = ROOT / "queries" / "runs" / "calibration.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(runs)} runs; model {json.dumps(out['model'])}")


if __name__ == "__main__":
    main()
