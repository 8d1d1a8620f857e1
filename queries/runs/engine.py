"""The one way the product runs EPANET (through WNTR's ``EpanetSimulator``): its temporary files in a private
directory, WNTR's duplicate error log muted, and EPANET's refusal turned into ``EngineFailure`` with EPANET's
own code, which each caller words for its own users (an import, a baseline, an analysis)."""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wntr
from wntr.epanet.exceptions import EpanetException
from wntr.network import WaterNetworkModel
from wntr.sim.results import SimulationResults


class EngineFailure(Exception):
    """EPANET refused the run; ``code`` is EPANET's error code (None when it gave none)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"EPANET error {code}" if code is not None else "EPANET stopped without an error code")
        self.code = code


@contextmanager
def quiet_epanet_log() -> Iterator[None]:
    """WNTR logs EPANET errors at ERROR level before raising; callers turn the exception into their
    own one-line message, so the duplicate log line is muted while the toolkit runs."""
    toolkit = logging.getLogger("wntr.epanet.toolkit")
    previous = toolkit.level
    toolkit.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        toolkit.setLevel(previous)


def set_window(wn: WaterNetworkModel, *, duration_s: int, step_s: int) -> None:
    """``wn`` runs for ``duration_s`` from its start, solved and reported every ``step_s``."""
    t = wn.options.time
    t.duration, t.hydraulic_timestep, t.report_timestep, t.report_start = duration_s, step_s, step_s, 0


def run_epanet(wn: WaterNetworkModel) -> SimulationResults:
    """Run ``wn`` as its options say (``EngineFailure`` when EPANET refuses it)."""
    with tempfile.TemporaryDirectory(prefix="tjwater-epanet-") as tmp, quiet_epanet_log():
        try:
            return wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(Path(tmp) / "sim"))
        except EpanetException as exc:
            match = re.search(r"Error (\d+)", str(exc))
            raise EngineFailure(int(match.group(1)) if match else None) from exc
