"""``manage.py analysis_retention [--dry-run] [--batch-size N] [--max-batches N]``: purge the finished
analysis runs older than their project's retention that no evidence refers to (issue 42 item 8), as the
beat does hourly (``analyses.retention.purge_expired_runs``, the same service); ``--dry-run`` counts them
and deletes nothing."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analyses.retention import purge_expired_runs


class Command(BaseCommand):
    help = "Purge analysis runs past their project's retention unless evidence refers to them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would be purged, delete nothing")
        parser.add_argument("--batch-size", type=int, default=20, help="runs per transaction (default 20)")
        parser.add_argument("--max-batches", type=int, default=50, help="batches in this call (default 50)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            purged = purge_expired_runs(
                dry_run=options["dry_run"], batch_size=options["batch_size"], max_batches=options["max_batches"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        verb = "would purge" if purged.dry_run else "purged"
        self.stdout.write(
            f"{verb} {len(purged.run_ids)} analysis run(s): {purged.series_rows} series rows, "
            f"{purged.results} results, {purged.jobs} jobs"
        )
        for run_id in purged.run_ids[:50]:
            self.stdout.write(f"  {run_id}")
