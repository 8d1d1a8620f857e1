"""The model baseline of a project for any window: ``simulate_baseline_window`` (called by the
``simulate_baseline`` Celery task, the rolling baseline and ``import_network``'s default day).

* The network is the one the project imported (``NetworkSource``: its .inp text, read by WNTR).
* Patterns follow the project's local clock: EPANET's ``pattern_start`` and ``start_clocktime`` are the
  local time of day at the window's start (``queries.timezones.project_zone``), so a demand pattern's
  hour 7 is 07:00 where the utility is. (Across a DST change inside a window the pattern keeps the
  clock of the window's start; a day-long window starting at local midnight is exact.)
* Streamed in chunks: the window is simulated ``CHUNK_HOURS`` at a time, each chunk starting from the
  tank levels where the previous one ended (the hydraulic state EPANET carries), and written to the
  database before the next runs — memory stays that of one chunk whatever the window's length.
  Time-based simple controls (``AT TIME``) count from each chunk's start, ``AT CLOCKTIME`` ones follow
  the clock; networks driven by ``AT TIME`` controls should use a window of at most one chunk.
* Atomic: the window's old baseline is deleted and the new one written in one transaction, under a
  per-project advisory lock (never two simulations of one project at once); a cancelled or failed run
  rolls back and leaves the old baseline — a revoked task writes nothing.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import wntr
from django.db import connection, transaction
from wntr.epanet.exceptions import EpanetException
from wntr.network import WaterNetworkModel

from contexts.models import Project
from queries.importer.epanet import NetworkImportError, quiet_epanet_log, write_baseline
from queries.models import LinkBaseline, NetworkSource, NodeBaseline
from queries.timezones import project_zone

logger = logging.getLogger(__name__)

CHUNK_HOURS = 24
MAX_HOURS = 24 * 400
LOCK_NS = 21_002  # advisory lock namespace: one baseline simulation per project at a time


class BaselineError(Exception):
    """The simulation could not run; the message is a sentence for the operator."""


class SimulationCancelled(BaselineError):
    """The run was cancelled; nothing was written."""


class SimulationBusy(BaselineError):
    """Another simulation of the project holds its lock (only when asked not to wait)."""


@dataclass
class BaselineSummary:
    project_slug: str
    start: str
    end: str
    step_s: int
    instants: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _network(project: Project) -> WaterNetworkModel:
    source = NetworkSource.objects.filter(project_id=project.pk).first()
    if source is None:
        raise BaselineError(f"Project {project.slug} has no imported network to simulate; run import_network first.")
    with tempfile.TemporaryDirectory(prefix="tjwater-inp-") as tmp:
        path = Path(tmp) / "network.inp"
        path.write_text(source.inp_text)
        return wntr.network.WaterNetworkModel(str(path))


def align_patterns(wn: WaterNetworkModel, start: datetime, project: Project) -> None:
    """Patterns and clock of ``wn`` start at ``start``'s local time of day in the project's zone."""
    local = start.astimezone(project_zone(project))
    seconds = local.hour * 3600 + local.minute * 60 + local.second
    wn.options.time.pattern_start = seconds
    wn.options.time.start_clocktime = seconds


def _run(wn: WaterNetworkModel, *, duration_s: int, step_s: int) -> wntr.sim.results.SimulationResults:
    wn.options.time.duration = duration_s
    wn.options.time.hydraulic_timestep = step_s
    wn.options.time.report_timestep = step_s
    wn.options.time.report_start = 0
    with tempfile.TemporaryDirectory(prefix="tjwater-epanet-") as tmp, quiet_epanet_log():
        try:
            return wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(Path(tmp) / "sim"))
        except EpanetException as exc:
            match = re.search(r"Error (\d+)", str(exc))
            code = match.group(1) if match else "?"
            raise BaselineError(f"The hydraulic simulation failed (EPANET error {code}).") from exc


def _carry_state(wn: WaterNetworkModel, results: wntr.sim.results.SimulationResults) -> None:
    """The next chunk starts where this one ended: tank levels (head − elevation), within their limits."""
    heads = results.node["head"].iloc[-1]
    for name, tank in wn.tanks():
        level = float(heads[name]) - tank.elevation
        tank.init_level = min(max(level, tank.min_level), tank.max_level)


def _lock(project: Project, *, wait: bool) -> None:
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_NS, project.pk])
            return
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_NS, project.pk])
        if not cursor.fetchone()[0]:
            raise SimulationBusy(f"Another baseline simulation of {project.slug} is running.")


def simulate_baseline_window(
    *,
    project: Project,
    start: datetime,
    hours: float,
    step_s: int = 900,
    wait_for_lock: bool = True,
    progress: Callable[[float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BaselineSummary:
    """Replace ``project``'s baseline over ``[start, start + hours]`` (both ends included, every
    ``step_s`` seconds) with a fresh simulation — see the module docstring."""
    t0 = _time.monotonic()
    if start.tzinfo is None:
        raise BaselineError("The start must carry a time zone offset (e.g. 2026-11-01T00:00:00+08:00).")
    if not 0 < hours <= MAX_HOURS:
        raise BaselineError(f"The window must be more than 0 and at most {MAX_HOURS} hours long.")
    if step_s < 60 or step_s % 60 or step_s > 86400:
        raise BaselineError("The step must be a whole number of minutes, from 60 to 86400 seconds.")
    total_s = int(round(hours * 3600))
    if total_s % step_s:
        raise BaselineError(f"The window ({hours} h) must be a whole number of steps of {step_s} s.")
    wn = _network(project)
    end = start + timedelta(seconds=total_s)
    summary = BaselineSummary(project.slug, start.isoformat(), end.isoformat(), step_s)
    chunk_s = max(step_s, (CHUNK_HOURS * 3600 // step_s) * step_s)
    with transaction.atomic():
        _lock(project, wait=wait_for_lock)
        for model in (NodeBaseline, LinkBaseline):
            model.objects.filter(project_id=project.pk, time__gte=start, time__lte=end).delete()
        offset = 0
        while offset < total_s:
            if should_stop is not None and should_stop():
                raise SimulationCancelled("The simulation was cancelled; the previous baseline is unchanged.")
            duration = min(chunk_s, total_s - offset)
            chunk_start = start + timedelta(seconds=offset)
            align_patterns(wn, chunk_start, project)
            try:
                results = _run(wn, duration_s=duration, step_s=step_s)
            except NetworkImportError as exc:  # pragma: no cover - _run raises BaselineError itself
                raise BaselineError(str(exc)) from exc
            last = offset + duration >= total_s
            if not last:
                _carry_state(wn, results)
                # The chunk's final instant is the next chunk's first.
                for part in (results.node, results.link):
                    for key in list(part):
                        part[key] = part[key].iloc[:-1]
            written = write_baseline(project_id=project.pk, wn=wn, results=results, start=chunk_start)
            for key, count in written.items():
                summary.rows[key] = summary.rows.get(key, 0) + count
            summary.instants += len(results.node["pressure"].index)
            del results
            offset += duration
            if progress is not None:
                progress(offset / total_s)
    summary.seconds = round(_time.monotonic() - t0, 2)
    logger.info("baseline of %s simulated: %s to %s, %s instants", project.slug, summary.start, summary.end,
                summary.instants)  # fmt: skip
    return summary
