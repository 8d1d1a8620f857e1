"""``manage.py import_scada FILE --project SLUG [--timezone ZONE] [--format long|wide] [--dry-run]
[--max-rejects N] [--json]``: SCADA history from a historian export (CSV, CSV.gz or Parquet); the rules
are in ``queries.importer.scada_readings``. It runs as a ``scada_import`` job of the job runner, in this
process (``queries.services.scada_jobs``)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.scada_devices import ScadaImportError
from queries.importer.scada_readings import ReadingImportSummary, RejectedFile
from queries.jobrunner.runner import run_now
from queries.models.jobs import JobKind, JobStatus
from queries.services.scada_jobs import scada_job


class ProgressBar:
    """One terminal line, redrawn at most twice a second: samples read, rate, rejects."""

    def __init__(self, stream: Any, enabled: bool) -> None:
        self.stream, self.enabled = stream, enabled
        self.t0 = self.last = time.monotonic()

    def __call__(self, rows: int, rejects: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.5:
            return
        self.last = now
        rate = rows / max(now - self.t0, 1e-9)
        self.stream.write(f"\r  {rows:>12,} samples  {rate:>10,.0f}/s  {rejects:>6,} rejected ")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.last != self.t0:
            self.stream.write("\n")


class Command(BaseCommand):
    help = (
        "Import SCADA readings from a historian export (CSV, CSV.gz or Parquet; long device_id,time,value"
        "[,quality] or wide time,<device_id>,…), converted to storage units, cleaned, merged atomically."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="CSV, CSV.gz or Parquet file")
        parser.add_argument("--project", required=True, help="slug of an existing project")
        parser.add_argument("--timezone", help="IANA zone of naive times (default: the project's)")
        parser.add_argument("--format", choices=("long", "wide"), help="layout (default: from the header)")
        parser.add_argument("--dry-run", action="store_true", help="check and count, write nothing")
        parser.add_argument("--max-rejects", type=int, default=0, help="rejected samples tolerated (default 0)")
        parser.add_argument("--json", action="store_true", help="print a JSON summary")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        path = Path(options["file"])
        bar = ProgressBar(sys.stderr, enabled=not options["json"] and sys.stderr.isatty())

        def listen(fraction: float, message: str, /, **counts: int) -> None:
            if "samples" in counts:
                bar(counts["samples"], counts.get("rejects", 0))

        job = scada_job(
            project=project, kind=JobKind.SCADA_IMPORT, path=path, dry_run=options["dry_run"],
            timezone=options["timezone"], format=options["format"], max_rejects=options["max_rejects"],
        )  # fmt: skip
        handed: list[object] = []
        job = run_now(job, on_progress=listen, on_result=handed.append)
        bar.done()
        result = handed[-1] if handed else None
        if isinstance(result, RejectedFile):
            if options["json"]:
                self.stdout.write(json.dumps({**result.summary.as_dict(), "refused": True}))
            raise CommandError(str(result)) from result
        if isinstance(result, ScadaImportError):
            raise CommandError(str(result)) from result
        if job.status != JobStatus.SUCCEEDED or not isinstance(result, ReadingImportSummary):
            raise CommandError(f"{path.name}: {job.message}")  # cancelled, or stopped on an internal error
        summary = result
        if options["json"]:
            self.stdout.write(json.dumps(summary.as_dict()))
            return
        verb = "would write" if summary.dry_run else "wrote"
        # Say how the times were read: a file whose times carry offsets was not read in the zone.
        if summary.offset_times and not summary.naive_times:
            times = "times with offsets"
        elif summary.offset_times:
            times = f"{summary.offset_times} times with offsets, {summary.naive_times} naive in {summary.timezone}"
        else:
            times = f"naive times in {summary.timezone}"
        self.stdout.write(
            f"{summary.file} ({summary.layout}, {times}): {summary.samples} samples, "
            f"{summary.rejects} rejected; {summary.devices} device(s), {summary.slots} slots — {verb} "
            f"{summary.inserted} new, {summary.updated} changed, {summary.unchanged} unchanged "
            f"in {summary.seconds:.1f}s"
        )
