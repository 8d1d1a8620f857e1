"""``manage.py seed_demo [--if-empty]``: build the deterministic demo utility (see queries.demo.seed)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queries.demo.seed import DEMO_SLUG, DemoConfigError, demo_has_network, seed_demo
from queries.importer.epanet import NetworkImportError


class Command(BaseCommand):
    help = "Build (or rebuild) the demo projects tianjin-demo and demo-b with all their data. Deterministic."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--if-empty", action="store_true", help="do nothing when the demo network exists")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and demo_has_network():
            self.stdout.write(f"demo already loaded ({DEMO_SLUG} has a network); nothing to do")
            return
        try:
            summary = seed_demo()
        except (DemoConfigError, NetworkImportError) as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{k}={v}" for k, v in sorted(summary.counts.items()))
        self.stdout.write(f"demo seeded in {summary.seconds:.1f}s: {counts}")
