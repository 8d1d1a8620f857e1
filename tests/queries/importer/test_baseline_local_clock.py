"""The baseline on the project's clock (issue 40 item 5): the window is exact instants and the summary
names what was written; demand patterns follow the local clock across a DST change; a re-simulation
inside a stored baseline starts from its state and continues it without a jump; an ambiguous or skipped
local start is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Max, Min

from contexts.models import Project
from queries.importer.baseline_window import simulate_baseline_window
from queries.importer.epanet import import_network, wntr_network_path
from queries.models import NodeBaseline

NY = "America/New_York"
OCT31 = datetime(2026, 10, 31, 4, 0, tzinfo=UTC)  # 2026-10-31T00:00 EDT; the clocks fall back on Nov 1 at 02:00
MULTIPLIERS = [0.5 + 0.1 * h for h in range(24)]  # hour h of the local day runs at 0.5 + 0.1 h
PATTERNED = f"""[TITLE]
one hourly pattern
[JUNCTIONS]
 J1 10 1 P1
[RESERVOIRS]
 R1 100
[PIPES]
 P1 R1 J1 1000 300 100 0 Open
[PATTERNS]
 P1 {" ".join(f"{m:.1f}" for m in MULTIPLIERS)}
[TIMES]
 Duration 24:00
 Hydraulic Timestep 1:00
 Pattern Timestep 1:00
[OPTIONS]
 Units LPS
[END]
"""


def _on_new_york(project: Project) -> Project:
    project.timezone = NY
    project.save(update_fields=["timezone"])
    return project


def test_the_window_is_48_real_hours_and_the_summary_names_what_was_written(project: Project) -> None:
    _on_new_york(project)
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=0)
    summary = simulate_baseline_window(project=project, start=OCT31.astimezone(project_zone_of(project)), hours=48)
    stored = NodeBaseline.objects.filter(project=project).aggregate(first=Min("time"), last=Max("time"))
    assert (summary.start, summary.end) == ("2026-10-31T04:00:00+00:00", "2026-11-02T04:00:00+00:00")
    assert (stored["first"], stored["last"]) == (OCT31, OCT31 + timedelta(hours=48))
    assert summary.instants == 48 * 4 + 1


def project_zone_of(project: Project) -> object:
    from queries.timezones import project_zone

    return project_zone(project)


def test_patterns_follow_the_local_clock_across_the_fall_back(project: Project, tmp_path: Path) -> None:
    _on_new_york(project)
    inp = tmp_path / "patterned.inp"
    inp.write_text(PATTERNED)
    import_network(project=project, inp_path=inp, baseline_hours=0)
    simulate_baseline_window(project=project, start=OCT31, hours=48, step_s=3600)
    demand = dict(NodeBaseline.objects.filter(project=project, element_id="J1").values_list("time", "demand"))
    base = demand[OCT31] / MULTIPLIERS[0]  # local midnight: multiplier of hour 0
    zone = project_zone_of(project)
    for instant, value in sorted(demand.items())[:-1]:
        local_hour = instant.astimezone(zone).hour  # type: ignore[arg-type]
        assert value == pytest.approx(base * MULTIPLIERS[local_hour], rel=1e-6), instant
    # the day after the change: 07:00 EST (12:00Z) runs hour 7, not hour 6
    assert demand[datetime(2026, 11, 1, 12, tzinfo=UTC)] == pytest.approx(base * MULTIPLIERS[7], rel=1e-6)


def test_a_re_simulation_inside_a_run_continues_it_without_a_jump(project: Project) -> None:
    _on_new_york(project)
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=0)
    simulate_baseline_window(project=project, start=OCT31, hours=48)
    start, end = OCT31 + timedelta(hours=29), OCT31 + timedelta(hours=31)  # 2 h inside the second day
    rows = NodeBaseline.objects.filter(project=project, time__gte=start, time__lte=end)
    before = {(r.element_id, r.time): (r.pressure, r.head) for r in rows}
    simulate_baseline_window(project=project, start=start, hours=2)
    after = {(r.element_id, r.time): (r.pressure, r.head) for r in rows.all()}
    assert after.keys() == before.keys() and len(before) == 11 * 9
    worst = max(abs(after[k][0] - before[k][0]) for k in before)
    assert worst < 0.01, f"the 2 h re-simulation departs from the 48 h run by {worst:.4f} m"
    tank = [before[("2", start + timedelta(minutes=15 * i))][0] for i in range(9)]
    assert max(tank) - min(tank) > 0.05  # the tank moves in this window: a cold start would show


@pytest.mark.parametrize(
    ("start", "why"),
    [("2026-11-01T01:30:00", "happens twice"), ("2026-03-08T02:30:00", "does not exist")],
)
def test_an_ambiguous_or_skipped_local_start_is_refused(project: Project, start: str, why: str) -> None:
    _on_new_york(project)
    with pytest.raises(CommandError, match=why):
        call_command("simulate_baseline", project=project.slug, start=start, hours=2)
