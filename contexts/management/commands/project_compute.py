"""``manage.py project_compute SLUG [--enable | --disable] [--cpu-seconds-per-day N] [--max-concurrent N]
[--max-run-seconds N] [--max-series-rows N] [--retention-days N]``: whether a project may run analyses,
what they may cost (issue 42 item 3) and what they may store and for how long (item 8); audited. Without
options it shows the project's current setting."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.errors import ApplicationError
from contexts.management.commands._onboarding import command_actor
from contexts.models import Project
from contexts.onboarding import COMPUTE_BOUNDS, compute_of, project_compute


class Command(BaseCommand):
    help = (
        "Turn a project's analyses on or off and set their CPU, concurrency, time and storage limits and how "
        "long finished runs are kept (audited)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        switch = parser.add_mutually_exclusive_group()
        switch.add_argument("--enable", action="store_true", help="allow the project's members to run analyses")
        switch.add_argument("--disable", action="store_true", help="refuse every new run of the project")
        parser.add_argument("--cpu-seconds-per-day", type=int, help="CPU seconds of runs per UTC day")
        parser.add_argument("--max-concurrent", type=int, help="runs queued or running at once")
        parser.add_argument("--max-run-seconds", type=int, help="the hard time limit of one run (default 600)")
        parser.add_argument(
            "--max-series-rows", type=int, help="series rows all the project's runs may store (default 5,000,000)"
        )
        parser.add_argument(
            "--retention-days", type=int, help="days a finished run is kept unless evidence refers to it (default 30)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limits = {name: options[name] for name in COMPUTE_BOUNDS}
        enabled = True if options["enable"] else False if options["disable"] else None
        try:
            if enabled is None and all(v is None for v in limits.values()):
                project = Project.objects.filter(slug=options["slug"]).first()
                if project is None:
                    raise CommandError(f"No project {options['slug']!r}.")
                state = compute_of(project)
            else:
                state = project_compute(slug=options["slug"], actor=command_actor(), enabled=enabled, **limits)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"project {options['slug']}: analyses {'on' if state['enabled'] else 'off'}, "
            f"{state['cpu_seconds_per_day']} CPU s/day, {state['max_concurrent']} at once, "
            f"{state['max_run_seconds']} s per run at most, {state['max_series_rows']} series rows at most, "
            f"finished runs kept {state['retention_days']} days"
        )
