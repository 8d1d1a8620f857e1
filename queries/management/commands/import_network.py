"""``manage.py import_network FILE.inp --project SLUG [--crs EPSG:NNNN | --center LON,LAT --scale M]``:
import an EPANET network into a project."""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.epanet import NetworkImportError, import_network
from queries.services.jobs import job_failed, job_finished, job_started

#: Options whose value may start with "-" (a western longitude): argparse would read "-85.5,38.0" as an
#: option name, since it is not a plain negative number.
SIGNED_VALUE_OPTIONS = ("--center",)


def join_signed_values(args: Sequence[str], options: Sequence[str] = SIGNED_VALUE_OPTIONS) -> list[str]:
    """``["--center", "-85.5,38.0"]`` → ``["--center=-85.5,38.0"]`` (the ``=`` spelling argparse accepts)."""
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in options:
            value = next(it, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


class SignedValueParser(CommandParser):
    """Django's parser, accepting ``--center -85.5,38.0`` as well as ``--center=-85.5,38.0``."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        return super().parse_known_args(None if args is None else join_signed_values(list(args)), namespace)


def parse_center(value: str) -> tuple[float, float]:
    try:
        lon_s, lat_s = value.split(",")
        return float(lon_s), float(lat_s)
    except ValueError as exc:
        raise CommandError(f"--center must be LON,LAT in degrees, got {value!r}") from exc


def _operator() -> str:
    """Who ran the command, as the model version records it: ``manage.py (<OS user>)``."""
    try:
        return f"manage.py ({getpass.getuser()})"
    except (KeyError, OSError):  # no name for the process's uid (a bare container)
        return "manage.py"


class Command(BaseCommand):
    help = (
        "Import an EPANET .inp network into a project (replacing its network atomically) and store the "
        "simulated model baseline. With --crs the coordinates are in that CRS (any unit, US feet included) "
        "and are transformed exactly to WGS84; a schematic network without a CRS is placed about --center "
        "with --scale metres per drawn unit. With neither, lon/lat coordinates are read as EPSG:4326 and any "
        "others are refused."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Same parser, one more accepted spelling (a subclass with no state of its own).
        parser.__class__ = SignedValueParser
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="EPANET .inp file")
        parser.add_argument("--project", required=True, help="slug of an existing project")
        parser.add_argument("--crs", default=None, help="the CRS of the file's coordinates, e.g. EPSG:3089")
        parser.add_argument("--center", default=None, help="LON,LAT (EPSG:4326) to place a schematic network about")
        parser.add_argument("--scale", type=float, default=None, help="metres per drawn unit (default 1)")
        parser.add_argument("--baseline-hours", type=float, default=24.0, help="simulated hours (0 = no baseline)")
        parser.add_argument("--step-minutes", type=int, default=15, help="baseline reporting step")
        parser.add_argument("--no-baseline", action="store_true", help="import the model without simulating")

    def handle(self, *args: Any, **options: Any) -> None:
        crs = options["crs"]
        if crs and (options["center"] is not None or options["scale"] is not None):
            raise CommandError("--crs places the network exactly; --center/--scale are for schematic networks only")
        # No --center: the importer reads lon/lat as EPSG:4326 or refuses (never a silent default centre).
        center = parse_center(options["center"]) if options["center"] is not None else None
        if not Path(options["file"]).is_file():
            raise CommandError(f"network file not found: {options['file']}")
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        job = job_started(
            project=project, kind="network_import", subject=Path(options["file"]).name, started_by="manage.py"
        )
        try:
            summary = import_network(
                project=project,
                inp_path=Path(options["file"]),
                center=center,
                scale=options["scale"] if options["scale"] is not None else 1.0,
                crs=crs,
                baseline_hours=0.0 if options["no_baseline"] else options["baseline_hours"],
                step_minutes=options["step_minutes"],
                imported_by=_operator(),
            )
        except NetworkImportError as exc:
            job_failed(job, str(exc))
            raise CommandError(str(exc)) from exc
        job_finished(
            job, rows=sum(summary.counts.values()),
            detail={"placement": summary.placement, "model_version": summary.model_version, **summary.counts},
        )  # fmt: skip
        counts = ", ".join(f"{k}={v}" for k, v in summary.counts.items())
        self.stdout.write(
            f"imported {Path(options['file']).name} into {project.slug} ({summary.placement}) "
            f"in {summary.seconds:.1f}s: {counts}; model version {summary.model_version} "
            f"(sha256 {summary.sha256[:12]}…)"
        )
