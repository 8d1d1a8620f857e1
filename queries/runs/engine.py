"""The one way the product runs EPANET (the toolkit WNTR ships, ``wntr.epanet.toolkit``): its temporary files
in a private directory, WNTR's duplicate error log muted, and EPANET's refusal turned into ``EngineFailure``
with EPANET's own code, which each caller words for its own users (an import, a baseline, an analysis).

The run is ``EpanetSimulator.run_sim``'s (the same ``.inp`` writer, toolkit calls and binary reader), with
``ENsolveH``/``ENsolveQ`` taken apart into their documented loops (``ENopenH``, ``ENinitH(EN_SAVE)``,
``ENrunH``/``ENnextH`` until the step is 0, ``ENcloseH``; the same for quality), so that a caller's
``should_stop`` (``stopping``) is asked between two time steps: a cancelled Net6 week stops within one
step (milliseconds) instead of at the end of the solve."""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path

import wntr
from wntr.epanet.exceptions import EpanetException
from wntr.epanet.toolkit import ENepanet
from wntr.network import WaterNetworkModel
from wntr.network.io import write_inpfile
from wntr.sim.results import SimulationResults


class EngineFailure(Exception):
    """EPANET refused the run; ``code`` is EPANET's error code (None when it gave none)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"EPANET error {code}" if code is not None else "EPANET stopped without an error code")
        self.code = code

    @property
    def error_code(self) -> str:
        """The product's stable code for it: ``EPANET_<n>``, ``EPANET_UNKNOWN`` when EPANET gave none."""
        return f"EPANET_{self.code}" if self.code is not None else "EPANET_UNKNOWN"


class EngineStopped(Exception):
    """The caller's ``should_stop`` said stop between two of EPANET's time steps; nothing was returned."""


#: EPANET's flag to save the hydraulics for the quality run (``EN_SAVE``).
EN_SAVE = 1
#: The version of EPANET's input format written, as ``EpanetSimulator.run_sim`` writes it.
INP_VERSION = 2.2
_STOP: ContextVar[Callable[[], bool] | None] = ContextVar("tjwater_engine_stop", default=None)


@contextmanager
def stopping(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Every EPANET run inside asks ``should_stop`` between time steps and raises ``EngineStopped``."""
    token = _STOP.set(should_stop)
    try:
        yield
    finally:
        _STOP.reset(token)


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
    """Run ``wn`` as its options say (``EngineFailure`` when EPANET refuses it, ``EngineStopped`` when the
    caller's ``stopping`` says stop)."""
    if wn._msx is not None:  # multi-species quality is not stepped here (no kind uses it)
        raise ValueError("EPANET-MSX models are not run by the product's engine adapter")
    should_stop = _STOP.get()
    simulator = wntr.sim.EpanetSimulator(wn)
    with tempfile.TemporaryDirectory(prefix="tjwater-epanet-") as tmp, quiet_epanet_log():
        prefix = str(Path(tmp) / "sim")
        inp, rpt, out = prefix + ".inp", prefix + ".rpt", prefix + ".bin"
        try:
            write_inpfile(wn, inp, units=wn.options.hydraulic.inpfile_units, version=INP_VERSION)
            en = ENepanet(version=INP_VERSION)
            en.ENopen(inp, rpt, out)
            try:
                _hydraulics(en, should_stop)
                _quality(en, should_stop)
                en.ENreport()
            except BaseException:
                with suppress(EpanetException):  # the first error is the one reported
                    en.ENclose()
                raise
            en.ENclose()
        except EpanetException as exc:
            match = re.search(r"Error (\d+)", str(exc))
            raise EngineFailure(int(match.group(1)) if match else None) from exc
        return simulator.reader.read(out, False, wn.options.hydraulic.headloss == "D-W")


def _stop_if_asked(should_stop: Callable[[], bool] | None) -> None:
    if should_stop is not None and should_stop():
        raise EngineStopped


def _hydraulics(en: ENepanet, should_stop: Callable[[], bool] | None) -> None:
    """``ENsolveH``, one time step at a time."""
    en.ENopenH()
    en.ENinitH(EN_SAVE)
    while True:
        en.ENrunH()
        _stop_if_asked(should_stop)
        if en.ENnextH() <= 0:
            break
    en.ENcloseH()


def _quality(en: ENepanet, should_stop: Callable[[], bool] | None) -> None:
    """``ENsolveQ``, one time step at a time (it also writes the report periods to the output file)."""
    en.ENopenQ()
    en.ENinitQ(EN_SAVE)
    while True:
        en.ENrunQ()
        _stop_if_asked(should_stop)
        if en.ENnextQ() <= 0:
            break
    en.ENcloseQ()
