"""Compute permission (issue 42 item 3): analyses are off per project until an operator turns them on with
limits (``project_compute``, audited, also an admin action); ``simulation.run`` is a run permission that no
view permission implies, that implies none, and that a task_reader never holds."""

from __future__ import annotations

import pytest
from django.contrib.admin import helpers
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from contexts.access import READER_QUERY_PERMISSIONS, RUN_PERMISSIONS, tools_for_binding
from contexts.models import AccessEvent, Permission, ProjectCompute
from contexts.onboarding import compute_of
from tests.contexts.factories import World

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("project_compute", *args, stdout=out)
    return out.getvalue().strip()


def _audits(world: World) -> list[AccessEvent]:
    return list(AccessEvent.objects.filter(project_id=world.alpha.pk, action="project_compute_changed").order_by("pk"))


def test_off_by_default_and_shown(world: World) -> None:
    assert compute_of(world.alpha) == {
        "enabled": False, "cpu_seconds_per_day": 0, "max_concurrent": 0, "max_run_seconds": 600,
        "max_series_rows": 5_000_000, "retention_days": 30,
    }  # fmt: skip
    assert _run("ctx-alpha") == (
        "project ctx-alpha: analyses off, 0 CPU s/day, 0 at once, 600 s per run at most, "
        "5000000 series rows at most, finished runs kept 30 days"
    )
    assert not ProjectCompute.objects.exists() and not _audits(world)  # showing writes nothing


def test_enabling_needs_limits_and_is_audited_once(world: World) -> None:
    with pytest.raises(CommandError, match=r"needs --cpu-seconds-per-day and --max-concurrent"):
        _run("ctx-alpha", "--enable")
    with pytest.raises(CommandError, match=r"--max-concurrent must be from 1 to 64, not 0"):
        _run("ctx-alpha", "--enable", "--cpu-seconds-per-day", "3600", "--max-concurrent", "0")
    assert not _audits(world) and not compute_of(world.alpha)["enabled"]

    shown = _run("ctx-alpha", "--enable", "--cpu-seconds-per-day", "3600", "--max-concurrent", "2")
    assert shown.startswith("project ctx-alpha: analyses on, 3600 CPU s/day, 2 at once, 600 s per run at most")
    _run("ctx-alpha", "--enable", "--cpu-seconds-per-day", "3600")  # nothing changes: no second audit row
    [event] = _audits(world)
    assert event.actor.startswith("command:")
    assert event.details["before"]["enabled"] is False and event.details["after"] == {
        "enabled": True, "cpu_seconds_per_day": 3600, "max_concurrent": 2, "max_run_seconds": 600,
        "max_series_rows": 5_000_000, "retention_days": 30,
    }  # fmt: skip

    assert _run("ctx-alpha", "--disable").startswith("project ctx-alpha: analyses off, 3600 CPU s/day, 2 at once")
    assert len(_audits(world)) == 2 and compute_of(world.beta)["enabled"] is False  # one project only
    with pytest.raises(CommandError, match=r"No project 'nope'"):
        _run("nope", "--disable")


def test_the_admin_action_sets_compute_with_the_operator(world: World) -> None:
    from django.contrib.auth import get_user_model

    operator = get_user_model().objects.create_user("operator-c", password="pw-not-used", is_staff=True)
    client = Client()
    client.force_login(operator)
    url = reverse("admin:contexts_project_changelist")
    chosen = {"action": "set_compute", helpers.ACTION_CHECKBOX_NAME: [world.alpha.pk]}
    page = client.post(url, chosen)
    assert page.status_code == 200 and b"Set analyses (compute)" in page.content  # the intermediate form
    done = client.post(url, {**chosen, "confirm": "1", "enabled": "on", "cpu_seconds_per_day": "900",
                             "max_concurrent": "1", "max_run_seconds": "120"})  # fmt: skip
    assert done.status_code == 302
    assert compute_of(world.alpha) == {
        "enabled": True, "cpu_seconds_per_day": 900, "max_concurrent": 1, "max_run_seconds": 120,
        "max_series_rows": 5_000_000, "retention_days": 30,
    }  # fmt: skip
    [event] = _audits(world)
    assert event.actor.startswith("operator:operator-c#")
    listing = client.get(url).content.decode()
    assert "on: 900 CPU s/day, 1 at once" in listing


def test_a_run_permission_is_never_a_readers_and_implies_no_view() -> None:
    assert RUN_PERMISSIONS == {Permission.SIMULATION_RUN.value}
    assert not RUN_PERMISSIONS & READER_QUERY_PERMISSIONS
    catalog = {"get_pipe": ("webgis.view",), "query_baseline": ("simulation.view",),
               "run_simulation": ("simulation.run",)}  # fmt: skip
    # The run permission alone opens no view tool; the view permissions together open no run tool.
    assert tools_for_binding(catalog=catalog, permissions=["simulation.run"], purpose="ordinary_chat") == [
        "run_simulation"
    ]
    views = [p.value for p in Permission if p.value not in RUN_PERMISSIONS]
    assert "run_simulation" not in tools_for_binding(catalog=catalog, permissions=views, purpose="ordinary_chat")
    every = [p.value for p in Permission]
    assert "run_simulation" not in tools_for_binding(catalog=catalog, permissions=every, purpose="task_reader")


def test_the_storage_cap_and_the_retention_are_set_shown_and_bounded(world: World) -> None:
    shown = _run("ctx-alpha", "--max-series-rows", "1000", "--retention-days", "7")
    assert shown.endswith("1000 series rows at most, finished runs kept 7 days")
    [event] = _audits(world)
    assert event.details["before"]["retention_days"] == 30 and event.details["after"]["max_series_rows"] == 1000
    row = ProjectCompute.objects.get(project=world.alpha)
    assert (row.max_series_rows, row.retention_days, row.enabled) == (1000, 7, False)
    with pytest.raises(CommandError, match=r"--retention-days must be from 1 to 3650, not 0"):
        _run("ctx-alpha", "--retention-days", "0")
