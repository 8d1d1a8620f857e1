"""The model baseline of a project for any window: ``simulate_baseline_window`` (called by the
``simulate_baseline`` Celery task, the rolling baseline and ``import_network``'s default day).

* The network is the project's current model version (``current_model_version``: its .inp text, read by WNTR).
* Patterns follow the project's local clock: EPANET's ``pattern_start`` and ``start_clocktime`` are the
  local time of day at each chunk's start (``queries.timezones.project_zone``), so a demand pattern's
  hour 7 is 07:00 where the utility is — also across a DST change: a chunk ends where the zone's offset
  changes (``_offset_changes``) and the next starts on the new clock, so after the fall-back hour 7 runs
  at 07:00 EST, not 06:00.
* Times are instants: the window is computed in UTC (an aware local datetime adds *wall* hours in
  Python, so 48 h from a New York midnight before the fall-back would be 49), and the summary reports
  exactly the first and last instant written.
* Warm start: a window that starts where a baseline is already stored starts from that baseline's state
  at its first instant — tank levels and the status and setting of pumps and valves — not from the
  .inp's initial state, so a re-simulation inside a longer run continues it without a jump at either
  edge (``_stored_state``).
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
import time as _time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import wntr
from django.db import connection, transaction
from wntr.network import LinkStatus, WaterNetworkModel

from contexts.models import Project
from queries.importer.epanet import NetworkImportError, write_baseline
from queries.models import LinkBaseline, NodeBaseline, current_model_version
from queries.runs.engine import EngineFailure, EngineStopped, run_epanet, set_window, stopping
from queries.runs.model import read_model_version
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
    source = current_model_version(project.pk)
    if source is None:
        raise BaselineError(f"Project {project.slug} has no imported network to simulate; run import_network first.")
    return read_model_version(source)


def align_patterns(wn: WaterNetworkModel, start: datetime, project: Project) -> None:
    """Patterns and clock of ``wn`` start at ``start``'s local time of day in the project's zone."""
    local = start.astimezone(project_zone(project))
    seconds = local.hour * 3600 + local.minute * 60 + local.second
    wn.options.time.pattern_start = seconds
    wn.options.time.start_clocktime = seconds


def _run(wn: WaterNetworkModel, *, duration_s: int, step_s: int) -> wntr.sim.results.SimulationResults:
    set_window(wn, duration_s=duration_s, step_s=step_s)
    try:
        return run_epanet(wn)
    except EngineFailure as exc:
        code = "?" if exc.code is None else exc.code
        raise BaselineError(f"The hydraulic simulation failed (EPANET error {code}).") from exc


def _carry_state(wn: WaterNetworkModel, results: wntr.sim.results.SimulationResults) -> None:
    """The next chunk starts where this one ended: tank levels (head − elevation), within their limits,
    and the pumps' and valves' status and setting (what the warm start takes from a stored baseline)."""
    heads = results.node["head"].iloc[-1]
    state = _State(tanks={name: float(heads[name]) - tank.elevation for name, tank in wn.tanks()})
    status, setting = results.link["status"].iloc[-1], results.link["setting"].iloc[-1]
    for name in [*wn.pump_name_list, *wn.valve_name_list]:
        state.links[name] = (int(status[name]), float(setting[name]))
    _apply_state(wn, state)


@dataclass
class _State:
    """A stored baseline's hydraulic state at one instant: tank levels (m), and each pump's and valve's
    status (WNTR's ``LinkStatus`` number) and setting."""

    tanks: dict[str, float] = field(default_factory=dict)
    links: dict[str, tuple[int, float | None]] = field(default_factory=dict)


def _stored_state(project: Project, at: datetime) -> _State:
    """The state the stored baseline has at ``at`` (empty where it has none). Two indexed reads."""
    state = _State()
    state.tanks = dict(
        NodeBaseline.objects.filter(project_id=project.pk, element_type="tank", time=at).values_list(
            "element_id", "pressure"
        )
    )
    for element_id, status, setting in LinkBaseline.objects.filter(
        project_id=project.pk, element_type__in=("pump", "valve"), time=at
    ).values_list("element_id", "status", "setting"):
        state.links[element_id] = (status, setting)
    return state


def _apply_state(wn: WaterNetworkModel, state: _State) -> None:
    """Start ``wn`` from ``state``: tank levels within their limits; pumps and valves in their status
    (a valve that was active keeps its setting; a pump its speed)."""
    for name, tank in wn.tanks():
        if name in state.tanks:
            tank.init_level = min(max(float(state.tanks[name]), tank.min_level), tank.max_level)
    for name, (status, setting) in state.links.items():
        if name not in wn.link_name_list:
            continue
        link = wn.get_link(name)
        link.initial_status = LinkStatus(int(status)) if int(status) in (0, 1, 2) else link.initial_status
        if setting is not None and link.link_type in ("Pump", "Valve") and int(status) != 0:
            link.initial_setting = float(setting)


#: How far back an analysis run looks for the stored baseline's state at its start.
WARM_START_WITHIN = timedelta(hours=1)


def start_from_baseline(wn: WaterNetworkModel, project: Project, start: datetime) -> datetime | None:
    """Start ``wn`` from the state the project's stored baseline has at its last instant at or before
    ``start`` (within ``WARM_START_WITHIN``): tank levels and the status and setting of pumps and valves,
    as a baseline window's warm start does — so an analysis from 08:00 starts from the 08:00 the baseline
    computed, not from the .inp's initial state. Returns that instant, or None (no stored baseline there,
    or an unsaved project): ``wn`` keeps the .inp's initial state. Two or three indexed reads."""
    if project._state.adding:
        return None
    # The instant is found on one element with state: the first tank, else the first pump or valve.
    probes: list[tuple[type[NodeBaseline] | type[LinkBaseline], str, list[str]]] = [
        (NodeBaseline, "tank", wn.tank_name_list), (LinkBaseline, "pump", wn.pump_name_list),
        (LinkBaseline, "valve", wn.valve_name_list),
    ]  # fmt: skip
    found = next(((model, kind, names[0]) for model, kind, names in probes if names), None)
    if found is None:
        return None  # nothing in the network carries state from one instant to the next
    model, element_type, element_id = found
    at: datetime | None = (
        model.objects.filter(
            project_id=project.pk,
            element_type=element_type,
            element_id=element_id,
            time__lte=start,
            time__gt=start - WARM_START_WITHIN,
        )  # fmt: skip
        .order_by("-time")
        .values_list("time", flat=True)
        .first()
    )
    if at is not None:
        _apply_state(wn, _stored_state(project, at))
    return at


def _offset_changes(start: datetime, end: datetime, step_s: int, zone: ZoneInfo) -> list[int]:
    """Seconds from ``start`` (on the step grid) at which ``zone``'s UTC offset changes inside the window:
    the chunk boundaries that keep patterns on the local clock. Hourly probes, refined by steps within
    the hour of a change (a 400-day window: 9,600 probes)."""
    changes: list[int] = []
    total = int((end - start).total_seconds())
    previous = start.astimezone(zone).utcoffset()
    for probe in range(3600, total + 3600, 3600):
        now = (start + timedelta(seconds=min(probe, total))).astimezone(zone).utcoffset()
        if now == previous:
            continue
        for s in range(max(probe - 3600, 0), min(probe, total) + step_s, step_s):
            s = s - s % step_s
            if (start + timedelta(seconds=s)).astimezone(zone).utcoffset() == now:
                if 0 < s < total:
                    changes.append(s)
                break
        previous = now
    return changes


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
    start = start.astimezone(UTC)
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
        stored = _stored_state(project, start)
        for model in (NodeBaseline, LinkBaseline):
            model.objects.filter(project_id=project.pk, time__gte=start, time__lte=end).delete()
        _apply_state(wn, stored)
        changes = _offset_changes(start, end, step_s, project_zone(project))
        offset = 0
        while offset < total_s:
            if should_stop is not None and should_stop():
                raise SimulationCancelled("The simulation was cancelled; the previous baseline is unchanged.")
            duration = min(chunk_s, total_s - offset)
            cut = next((c for c in changes if offset < c < offset + duration), None)
            if cut is not None:
                duration = cut - offset  # the next chunk starts on the zone's new offset
            chunk_start = start + timedelta(seconds=offset)
            align_patterns(wn, chunk_start, project)
            try:
                # Asked between EPANET's time steps too: a cancel stops inside a chunk's solve.
                with stopping(should_stop) if should_stop is not None else nullcontext():
                    results = _run(wn, duration_s=duration, step_s=step_s)
            except EngineStopped:
                raise SimulationCancelled("The simulation was cancelled; the previous baseline is unchanged.") from None
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
