"""GIS layer import: a utility's own GeoPackage, Shapefile (``.shp`` or a ``.zip``) or GeoJSON layer, read
through GDAL (GeoDjango's bindings), transformed to WGS84 and stored as a source layer of a project.

``import_gis`` keeps every attribute of every feature (``GisFeature.properties``), its geometry in
EPSG:4326 and its fid (``source_fid``, what ``get_source_gis_properties`` is asked for). With
``element_type``/``element_field`` a feature is linked to the model element its attribute names; a linked
element's register row (``ElementGisProperties``, what ``get_element_gis_properties`` answers) gets the
feature's attributes, and with ``district_field`` its district (which the search tools' ``area`` filter
uses).

Everything that can be refused without reading features is refused before the database is touched (the
file, the layer, the CRS). Features are then streamed into one transaction (constant memory: written in
batches): re-importing a layer replaces it atomically, a failure leaves the old layer. A feature that
cannot be stored (unreadable, invalid or untransformable geometry, an attribute over the bounds, a
register value too long for its column) is reported by its fid and skipped — or, with ``strict``, refuses
the whole import (R-ONB-2: never silently dropped). A feature without geometry is kept and listed
(``strict`` refuses it).

Bounded whatever the file (issue 41): a zip is checked member by member before GDAL opens it
(``queries.importer.bounded.check_zip``: no ``..``, absolute paths or links, unpacked size and ratio
bounded); a layer of more than ``TJWATER_IMPORT_MAX_FEATURES`` features or ``TJWATER_IMPORT_MAX_COLUMNS``
fields is refused before a feature is read; an attribute over ``TJWATER_IMPORT_MAX_FIELD_BYTES``, or a
feature whose attributes take more than ``TJWATER_IMPORT_MAX_LINE_BYTES``, is refused by fid. Layer and
field names are data: GDAL opens a layer by name (no SQL), and names reach the database only as JSON keys
and ORM parameters.
"""

from __future__ import annotations

import json
import math
import re
import time as _time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from datetime import time as dtime
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.contrib.gis.gdal import CoordTransform, DataSource, GDALException, SpatialReference
from django.contrib.gis.gdal.layer import Layer
from django.contrib.gis.geos import GEOSException
from django.db import models, transaction
from pyproj import CRS
from pyproj.exceptions import CRSError

from contexts.models import Project
from queries.importer.bounded import HostileInput, check_json_nul, check_zip
from queries.importer.copy import copy_rows
from queries.importer.georef import AREA_OF_USE_MARGIN_DEG
from queries.models import ELEMENT_MODELS, ElementGisProperties, GisFeature, GisLayer, IsolationValve, Pipe, Pump, Valve
from queries.models.gis import LAYER_KEY_PATTERN

#: Formats read, by file suffix (GDAL drivers; a ``.zip`` holds a Shapefile).
SUFFIXES = (".gpkg", ".shp", ".zip", ".geojson", ".json")
BATCH = 2000
LINK_MODELS = (Pipe, Pump, Valve)
FEATURE_COLUMNS = ("layer_id", "source_fid", "properties", "geom", "element_type", "element_id")
#: Register columns filled from a linked feature's attribute of the same name (case-insensitive).
REGISTER_ATTRIBUTES = {"material": "material", "install_year": "install_year", "diameter_class": "diameter_class",
                       "district": "district", "road": "road"}  # fmt: skip
SHOWN_FIDS = 20


class GisImportError(Exception):
    """A GIS layer could not be imported; the message is one line meant for the operator."""


@dataclass
class GisImportSummary:
    """What an import wrote and what it skipped (each skipped feature by fid with its reason)."""

    layer_key: str
    source_layer: str
    source_crs: str
    features: int = 0
    linked: int = 0
    unlinked_fids: list[str] = field(default_factory=list)
    #: Features kept with no geometry (attributes only), by fid.
    without_geometry: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    districts: int = 0
    seconds: float = 0.0
    #: Isolation valves stored (a valve layer, ``valve_fields``).
    valves: int = 0


def _model_links(project: Project) -> dict[str, tuple[str, str]]:
    """Every link of the project's model (pipes, pumps, valves) → its two end nodes."""
    ends: dict[str, tuple[str, str]] = {}
    for model in LINK_MODELS:
        for link_id, start, end in model.objects.filter(project=project).values_list(
            "element_id", "start_node_id", "end_node_id"
        ):
            ends[link_id] = (start, end)
    return ends


def _valve_problem(attrs: dict[str, Any], fields: tuple[str, str], ends: dict[str, tuple[str, str]]) -> str | None:
    """Why a valve feature cannot be stored (its link unknown, its node not an end of the link), or None."""
    link, node = (str(attrs.get(name) or "") for name in fields)
    if link not in ends:
        return f"valve names link {link!r} ({fields[0]}), which is not in the model"
    if node not in ends[link]:
        return (
            f"valve names node {node!r} ({fields[1]}), which is not an end of link {link!r} ({', '.join(ends[link])})"
        )
    return None


def _open(path: Path) -> DataSource:
    if not path.is_file():
        raise GisImportError(f"GIS file not found: {path}")
    if path.suffix.lower() not in SUFFIXES:
        raise GisImportError(f"{path.name}: not a GeoPackage, Shapefile (.shp or .zip) or GeoJSON file")
    # GDAL reads a zipped Shapefile in place through its /vsizip/ virtual file system.
    name = f"/vsizip/{path.resolve()}" if path.suffix.lower() == ".zip" else str(path.resolve())
    try:
        if path.suffix.lower() == ".zip":
            check_zip(path)  # every member by name, link and size before GDAL reads any
        elif path.suffix.lower() in (".geojson", ".json"):
            check_json_nul(path)
    except HostileInput as exc:
        raise GisImportError(str(exc)) from None
    try:
        return DataSource(name)
    except GDALException:
        raise GisImportError(f"{path.name}: GDAL cannot read it as a GeoPackage, Shapefile or GeoJSON") from None


def _layer(ds: DataSource, path: Path, source_layer: str | None) -> Layer:
    names = [ds[i].name for i in range(len(ds))]
    if source_layer is not None:
        if source_layer not in names:
            raise GisImportError(f"{path.name} has no layer {source_layer!r}; its layers: {', '.join(names) or 'none'}")
        return _bounded(ds[source_layer], path)
    if len(names) != 1:
        shown = ", ".join(repr(n) for n in names[:SHOWN_FIDS]) + (" …" if len(names) > SHOWN_FIDS else "")
        raise GisImportError(f"{path.name} has {len(names)} layers ({shown}): name one with --source-layer")
    return _bounded(ds[0], path)


def _bounded(layer: Layer, path: Path) -> Layer:
    """``layer`` if its feature and field counts are within the bounds (read from its header, before any
    feature is), else a refusal naming the layer and the bound."""
    max_features = int(settings.TJWATER_IMPORT_MAX_FEATURES)
    max_columns = int(settings.TJWATER_IMPORT_MAX_COLUMNS)
    if layer.num_fields > max_columns:
        raise GisImportError(
            f"{path.name} (layer {layer.name!r}) has {layer.num_fields} fields, more than {max_columns} "
            "(TJWATER_IMPORT_MAX_COLUMNS): refused"
        )
    if layer.num_feat > max_features:
        raise GisImportError(
            f"{path.name} (layer {layer.name!r}) has {layer.num_feat} features, more than {max_features} "
            "(TJWATER_IMPORT_MAX_FEATURES): refused"
        )
    return layer


def _epsg_of(srs: SpatialReference) -> int | None:
    try:
        return CRS.from_wkt(srs.wkt).to_epsg(min_confidence=70)
    except CRSError:
        return None


def _source_srs(layer: Layer, path: Path, crs: str | None) -> tuple[SpatialReference, str]:
    """The layer's CRS (or ``crs`` when the file has none) and its label (``EPSG:NNNN`` when known)."""
    own: SpatialReference | None = layer.srs  # None for a layer without a CRS (the stubs omit it)
    given: SpatialReference | None = None
    if crs:
        try:
            given = SpatialReference(CRS.from_user_input(crs).to_wkt())
        except (CRSError, GDALException):
            raise GisImportError(f"unknown CRS {crs!r} (give it as EPSG:NNNN)") from None
    if own is None and given is None:
        raise GisImportError(f"{path.name} (layer {layer.name}) has no CRS: give it with --crs EPSG:NNNN")
    if own is not None and given is not None:
        own_code, given_code = _epsg_of(own), _epsg_of(given)
        if own_code != given_code:
            own_label = f"EPSG:{own_code}" if own_code else repr(own.name)
            raise GisImportError(
                f"{path.name} says its CRS is {own_label}, "
                f"--crs says {crs}: leave --crs out (it is only for files without a CRS)"
            )
    srs = own if own is not None else given
    assert srs is not None
    code = _epsg_of(srs)
    return srs, (f"EPSG:{code}" if code else (srs.name or "")[:32])


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _area_of_use(srs: SpatialReference) -> tuple[float, float, float, float] | None:
    """The CRS's area of use (west, south, east, north in degrees), widened by the margin the network
    import allows; None when it is not known. A file's WKT1 rarely carries one: the EPSG entry does."""
    code = _epsg_of(srs)
    try:
        aou = (CRS.from_epsg(code) if code else CRS.from_wkt(srs.wkt)).area_of_use
    except CRSError:
        return None
    if aou is None:
        return None
    m = AREA_OF_USE_MARGIN_DEG
    return (aou.west - m, aou.south - m, aou.east + m, aou.north + m)


def _oversized(attrs: dict[str, Any]) -> str | None:
    """Why the attributes exceed the bounds (a field over the field bound, all of them over the line
    bound), or None."""
    max_field = int(settings.TJWATER_IMPORT_MAX_FIELD_BYTES)
    max_total = int(settings.TJWATER_IMPORT_MAX_LINE_BYTES)
    total = 0
    for name, value in attrs.items():
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 16
        if size > max_field:
            return f"field {name!r} is longer than {max_field // 1024} KiB (TJWATER_IMPORT_MAX_FIELD_BYTES)"
        total += size + len(name)
    if total > max_total:
        return f"its attributes take more than {max_total // 1024} KiB (TJWATER_IMPORT_MAX_LINE_BYTES)"
    return None


def _features(
    layer: Layer, transform: CoordTransform, area: tuple[float, float, float, float] | None
) -> Iterator[tuple[str, dict[str, Any], Any, str | None]]:
    """``(fid, attributes, geometry in EPSG:4326 or None, problem or None)`` per feature, streamed."""
    fields = list(layer.fields)
    max_features = int(settings.TJWATER_IMPORT_MAX_FEATURES)
    for n, feature in enumerate(layer, start=1):
        fid = str(feature.fid)
        if n > max_features:  # a driver that cannot count its features up front
            raise GisImportError(
                f"layer {layer.name!r} has more than {max_features} features (TJWATER_IMPORT_MAX_FEATURES): refused"
            )
        try:
            attrs = {name: _jsonable(feature.get(name)) for name in fields}
        except (GDALException, UnicodeDecodeError, ValueError) as exc:
            yield fid, {}, None, f"unreadable attributes ({str(exc)[:80]})"
            continue
        too_big = _oversized(attrs)
        if too_big is not None:
            yield fid, {}, None, too_big
            continue
        try:
            ogr = feature.geom
        except GDALException:
            # OGR has no geometry for the feature (GDAL returns none rather than a broken one): a feature
            # of attributes only, kept and listed.
            yield fid, attrs, None, None
            continue
        try:
            ogr.transform(transform)
        except (GDALException, ValueError) as exc:
            yield fid, attrs, None, f"geometry cannot be transformed to WGS84 ({str(exc)[:80]})"
            continue
        try:
            geos = ogr.geos
        except (GEOSException, GDALException, ValueError):
            yield fid, attrs, None, f"invalid {ogr.geom_name.title()} geometry (e.g. a line of fewer than 2 points)"
            continue
        if geos.empty:
            yield fid, attrs, None, None  # an empty geometry is no geometry
            continue
        if not geos.valid:
            yield fid, attrs, None, f"invalid {geos.geom_type} geometry ({geos.valid_reason[:80]})"
            continue
        west, south, east, north = geos.extent
        if not all(math.isfinite(v) for v in (west, south, east, north)):
            yield fid, attrs, None, "geometry cannot be transformed to WGS84 (not finite)"
            continue
        if area is not None and (west < area[0] or south < area[1] or east > area[2] or north > area[3]):
            yield (
                fid,
                attrs,
                None,
                (
                    f"geometry lies outside the CRS's area of use once transformed (lon {west:.3f}..{east:.3f}, "
                    f"lat {south:.3f}..{north:.3f})"
                ),
            )
            continue
        geos.srid = 4326
        yield fid, attrs, geos, None


def _copy_features(rows: list[tuple[object, ...]]) -> None:
    """COPY a batch of features (geometry as hex EWKB, attributes as JSON text): bulk_create compiled each
    row's SQL and adapted its geometry in Python, half of a point layer's import (py-spy, mcp_app/README.md
    "Measuring", issue 41)."""
    copy_rows(GisFeature._meta.db_table, FEATURE_COLUMNS, rows)


def _attr(attrs: dict[str, Any], name: str) -> Any:
    lowered = {k.lower(): v for k, v in attrs.items()}
    return lowered.get(name.lower())


def import_gis(
    *,
    project: Project,
    path: Path,
    layer_key: str,
    source_layer: str | None = None,
    crs: str | None = None,
    element_type: str | None = None,
    element_field: str | None = None,
    district_field: str | None = None,
    strict: bool = False,
    valve_fields: tuple[str, str] | None = None,
) -> GisImportSummary:
    """Import one layer of ``path`` as the project's source layer ``layer_key``, replacing it atomically.
    With ``valve_fields`` (the attributes naming each valve's link and node) it is a valve layer: point
    features, each stored as an ``IsolationValve`` when its link and node are in the model."""
    t0 = _time.monotonic()
    if not layer_key or len(layer_key) > 64 or not re.fullmatch(LAYER_KEY_PATTERN, layer_key):
        raise GisImportError(
            "--layer-key must be 1 to 64 letters, digits, '_', '.' or '-' (the name the GIS tools read it by)"
        )
    if (element_type is None) != (element_field is None):
        raise GisImportError("--element-type and --element-field go together")
    if element_type is not None and element_type not in ELEMENT_MODELS:
        raise GisImportError(f"--element-type must be one of {', '.join(ELEMENT_MODELS)}")
    if district_field and element_type is None:
        raise GisImportError("--district-field sets the district of linked elements: give --element-type too")
    if valve_fields is not None and element_type is not None:
        raise GisImportError("--as-valves names each valve's link and node: it takes no --element-type")
    ds = _open(path)
    layer = _layer(ds, path, source_layer)
    srs, crs_label = _source_srs(layer, path, crs)
    if valve_fields is not None and layer.geom_type.name not in ("Point", "Point25D"):
        raise GisImportError(f"layer {layer.name} holds {layer.geom_type.name} features: a valve layer holds points")
    for name in filter(None, (element_field, district_field, *(valve_fields or ()))):
        if name not in layer.fields:
            raise GisImportError(f"layer {layer.name} has no field {name!r}; its fields: {', '.join(layer.fields)}")
    transform = CoordTransform(srs, SpatialReference(4326))
    summary = GisImportSummary(layer_key=layer_key, source_layer=layer.name, source_crs=crs_label)
    element_ids: set[str] = set()
    link_ends = _model_links(project) if valve_fields is not None else {}
    if valve_fields is not None and not link_ends:
        raise GisImportError(f"project {project.slug} has no network links for the valves: run import_network first")
    if element_type is not None:
        element_ids = set(
            ELEMENT_MODELS[element_type].objects.filter(project=project).values_list("element_id", flat=True)
        )
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        old = GisLayer.objects.filter(project=project, layer_key=layer_key).first()
        if old is not None:
            GisFeature.objects.filter(layer=old).delete()
            old.delete()
        gis_layer = GisLayer.objects.create(
            project=project,
            layer_key=layer_key,
            name=layer.name[:200],
            geometry_type=layer.geom_type.name[:32],
            source_crs=crs_label,
            source_name=path.name[:200],
            kind="valves" if valve_fields is not None else "features",
        )
        valves: list[IsolationValve] = []
        rows: list[tuple[object, ...]] = []
        register: dict[str, dict[str, Any]] = {}
        for fid, attrs, geom, problem in _features(layer, transform, _area_of_use(srs)):
            if problem is not None:
                if strict:
                    raise GisImportError(f"{path.name}: feature fid {fid}: {problem} (--strict: nothing imported)")
                summary.skipped.append((fid, problem))
                continue
            if geom is None and strict:
                raise GisImportError(f"{path.name}: feature fid {fid}: no geometry (--strict: nothing imported)")
            if valve_fields is not None:
                if (bad := _valve_problem(attrs, valve_fields, link_ends)) is not None:
                    if strict:
                        raise GisImportError(f"{path.name}: feature fid {fid}: {bad} (--strict: nothing imported)")
                    summary.skipped.append((fid, bad))
                    continue
                link, node = (str(attrs[name]) for name in valve_fields)
                valves.append(IsolationValve(layer=gis_layer, source_fid=fid[:64], link_id=link, node_id=node))
            linked_id = ""
            if element_field is not None:
                value = attrs.get(element_field)
                linked_id = "" if value is None else str(value)
                if linked_id in element_ids and (long := _too_long_for_register(attrs, district_field)):
                    if strict:
                        raise GisImportError(f"{path.name}: feature fid {fid}: {long} (--strict: nothing imported)")
                    summary.skipped.append((fid, long))
                    continue
                if linked_id in element_ids:
                    summary.linked += 1
                    register[linked_id] = attrs
                else:
                    linked_id = ""
                    summary.unlinked_fids.append(fid)
            rows.append((
                gis_layer.pk, fid[:64], json.dumps(attrs), None if geom is None else geom.hexewkb.decode("ascii"),
                (element_type or "") if linked_id else "", linked_id,
            ))  # fmt: skip
            summary.features += 1
            if geom is None:
                summary.without_geometry.append(fid)
            if len(rows) >= BATCH:
                _copy_features(rows)
                rows = []
        if rows:
            _copy_features(rows)
        IsolationValve.objects.bulk_create(valves, batch_size=BATCH)
        summary.valves = len(valves)
        if element_type is not None and register:
            summary.districts = _write_register(project, element_type, register, district_field, layer_key)
    summary.seconds = _time.monotonic() - t0
    return summary


def _too_long_for_register(attrs: dict[str, Any], district_field: str | None) -> str | None:
    """Why a linked feature's register value cannot be stored whole (longer than its column), or None: a
    value is never cut."""
    wanted = [(column, _attr(attrs, column)) for column in REGISTER_ATTRIBUTES if column != "install_year"]
    if district_field:
        wanted.append(("district", attrs.get(district_field)))
    for column, value in wanted:
        if value is None:
            continue
        limit = cast(models.CharField[str, str], ElementGisProperties._meta.get_field(column)).max_length or 0
        if len(str(value)) > limit:
            return f"{column} {str(value)[:40]!r}… is longer than {limit} characters (the register's {column} column)"
    return None


def _write_register(
    project: Project, element_type: str, register: dict[str, dict[str, Any]], district_field: str | None, key: str
) -> int:
    """Upsert the register rows of the linked elements from their feature's attributes; returns how many
    districts were set."""
    existing = {
        row.element_id: row
        for row in ElementGisProperties.objects.filter(
            project=project, element_type=element_type, element_id__in=list(register)
        )
    }
    districts = 0
    new_rows: list[ElementGisProperties] = []
    for element_id, attrs in register.items():
        row = existing.get(element_id) or ElementGisProperties(
            project=project, element_type=element_type, element_id=element_id
        )
        row.properties = {**(row.properties or {}), **attrs, "gis_layer": key}
        for column in REGISTER_ATTRIBUTES:
            value = _attr(attrs, column)
            if value is None or value == "":
                continue
            if column == "install_year":
                try:
                    row.install_year = int(value)
                except (TypeError, ValueError):
                    continue
            else:
                setattr(row, column, str(value))  # within max_length: _too_long_for_register
        if district_field:
            value = attrs.get(district_field)
            if value not in (None, ""):
                row.district = str(value)
                districts += 1
        if element_id not in existing:
            new_rows.append(row)
    ElementGisProperties.objects.bulk_create(new_rows, batch_size=BATCH)
    ElementGisProperties.objects.bulk_update(
        list(existing.values()),
        ["properties", "material", "install_year", "diameter_class", "district", "road"],
        batch_size=BATCH,
    )
    return districts
