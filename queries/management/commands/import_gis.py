"""``manage.py import_gis FILE --project SLUG --layer-key KEY [--source-layer NAME] [--crs EPSG:NNNN]
[--element-type pipe --element-field ASSET_ID] [--district-field NAME] [--strict]``: import a GIS layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contexts.models import Project
from queries.importer.gis import SHOWN_FIDS, GisImportError, import_gis
from queries.models import ELEMENT_MODELS
from queries.services.jobs import job_failed, job_finished, job_started


class Command(BaseCommand):
    help = (
        "Import one layer of a GeoPackage, Shapefile (.shp or .zip) or GeoJSON file as a project's source GIS "
        "layer (replacing a layer of the same key atomically), transformed to WGS84, every attribute kept, "
        "features linked to model elements through --element-field."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="a .gpkg, .shp, .zip (holding a Shapefile), .geojson or .json file")
        parser.add_argument("--project", required=True, help="slug of an existing project")
        parser.add_argument("--layer-key", required=True, help="the key tools name the layer by")
        parser.add_argument("--source-layer", default=None, help="the layer in the file (needed if it has several)")
        parser.add_argument("--crs", default=None, help="CRS of a file that declares none, e.g. EPSG:3089")
        parser.add_argument("--element-type", default=None, choices=list(ELEMENT_MODELS))
        parser.add_argument("--element-field", default=None, help="attribute holding the model element id")
        parser.add_argument("--district-field", default=None, help="attribute holding the district of the element")
        parser.add_argument("--strict", action="store_true", help="refuse the whole file if any feature is bad")
        parser.add_argument(
            "--as-valves",
            action="store_true",
            help="a layer of isolation valves (points), each naming its link and node",
        )
        parser.add_argument("--link-field", default=None, help="with --as-valves: attribute naming the valve's link")
        parser.add_argument(
            "--node-field", default=None, help="with --as-valves: attribute naming the node it protects"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"unknown project {options['project']!r} (create it first)")
        path = Path(options["file"])
        valve_fields = None
        if options["as_valves"]:
            if not (options["link_field"] and options["node_field"]):
                raise CommandError(
                    "--as-valves needs --link-field and --node-field (the attributes naming each valve's link and node)"
                )
            valve_fields = (options["link_field"], options["node_field"])
        elif options["link_field"] or options["node_field"]:
            raise CommandError("--link-field and --node-field describe a valve layer: give --as-valves too")
        job = job_started(project=project, kind="gis_import", subject=path.name, started_by="manage.py")
        try:
            summary = import_gis(
                project=project,
                path=path,
                layer_key=options["layer_key"],
                source_layer=options["source_layer"],
                crs=options["crs"],
                element_type=options["element_type"],
                element_field=options["element_field"],
                district_field=options["district_field"],
                strict=options["strict"],
                valve_fields=valve_fields,
            )
        except GisImportError as exc:
            job_failed(job, str(exc))
            raise CommandError(str(exc)) from exc
        job_finished(
            job,
            rows=summary.features,
            rejects=len(summary.skipped),
            reject_lines=[f"fid {fid}: {reason}" for fid, reason in summary.skipped],
            detail={
                "layer_key": summary.layer_key,
                "source_crs": summary.source_crs,
                "linked": summary.linked,
                "without_geometry": len(summary.without_geometry),
                "valves": summary.valves,
            },
        )
        for fid, reason in summary.skipped:
            self.stderr.write(f"skipped feature fid {fid}: {reason}")
        line = (
            f"imported layer {summary.source_layer} of {Path(options['file']).name} as {summary.layer_key} into "
            f"{project.slug} ({summary.source_crs} → EPSG:4326) in {summary.seconds:.1f}s: "
            f"{summary.features} features, {len(summary.skipped)} skipped"
        )
        if summary.without_geometry:
            shown = ", ".join(summary.without_geometry[:SHOWN_FIDS])
            more = " …" if len(summary.without_geometry) > SHOWN_FIDS else ""
            line += f", {len(summary.without_geometry)} without geometry (fids {shown}{more})"
        if options["element_type"]:
            line += f", {summary.linked} linked to {options['element_type']}s"
            if summary.unlinked_fids:
                shown = ", ".join(summary.unlinked_fids[:SHOWN_FIDS])
                more = " …" if len(summary.unlinked_fids) > SHOWN_FIDS else ""
                line += f", {len(summary.unlinked_fids)} naming no model element (fids {shown}{more})"
        if options["district_field"]:
            line += f", {summary.districts} districts set"
        if valve_fields is not None:
            line += f", {summary.valves} isolation valves"
        self.stdout.write(line)
