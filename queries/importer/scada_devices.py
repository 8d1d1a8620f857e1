"""``import_scada_devices``: a project's SCADA devices from a CSV file.

Columns (header required, in any order): ``device_id,name,quantity,unit,element_type,element_id,x,y,
sample_interval_s[,accuracy]``. ``unit`` is the device's native unit (``queries.scada_units`` lists what each
quantity accepts); ``x, y`` are in ``crs`` (default EPSG:4326, lon/lat) — both empty → the element's
own position (a node's point, a link's midpoint). ``accuracy`` is in the native unit and stored in the
storage unit (scaled, no offset: an uncertainty is a difference).

All or nothing: every row is checked first (the file is small — devices, not readings); any bad row
refuses the whole file with one line per problem, ``line N, field F: reason``, and nothing is written.
Re-importing updates devices in place (by ``device_id``); devices missing from the file are kept.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.gis.db.models import PointField
from django.contrib.gis.geos import Point
from django.db import transaction
from django.db.models import F, FloatField, Func, QuerySet, Value
from pyproj import CRS, Transformer
from pyproj.exceptions import CRSError

from contexts.models import Project
from queries.importer.bounded import HostileInput, check_lines
from queries.models import ELEMENT_MODELS, LINK_TYPES, ScadaDevice
from queries.scada_units import QUANTITIES, UnitError, conversion

REQUIRED = ("device_id", "name", "quantity", "unit", "element_type", "element_id", "x", "y", "sample_interval_s")
OPTIONAL = ("accuracy",)
MAX_LISTED = 20
MAX_DEVICES = 100_000  # rows of one devices file (each is held until the whole file is checked)


class ScadaImportError(Exception):
    """A file was refused; the message is meant for the operator (one line per problem)."""


@dataclass
class DeviceImportSummary:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    device_ids: list[str] = field(default_factory=list)


def transformer_for(crs: str) -> Transformer | None:
    """A transformer from ``crs`` to EPSG:4326 (lon/lat order), or ``None`` for EPSG:4326 itself."""
    try:
        source = CRS.from_user_input(crs)
    except CRSError as exc:
        raise ScadaImportError(f"--crs {crs!r} is not a coordinate reference system pyproj knows") from exc
    if source.to_epsg() == 4326:
        return None
    return Transformer.from_crs(source, "EPSG:4326", always_xy=True)


def _element_positions(project_id: int, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Point]:
    """Positions of the wanted elements that exist (one query per element type named)."""
    found: dict[tuple[str, str], Point] = {}
    by_type: dict[str, list[str]] = {}
    for etype, eid in wanted:
        by_type.setdefault(etype, []).append(eid)
    for etype, ids in by_type.items():
        # Any: ``geom`` is a field of each concrete element model, not of their abstract base.
        qs: QuerySet[Any] = ELEMENT_MODELS[etype].objects.filter(project_id=project_id, element_id__in=ids)
        if etype in LINK_TYPES:
            midpoint = Func(
                F("geom"),
                Value(0.5, output_field=FloatField()),
                function="ST_LineInterpolatePoint",
                output_field=PointField(srid=4326),
            )
            rows = qs.annotate(at=midpoint).values_list("element_id", "at")
        else:
            rows = qs.values_list("element_id", "geom")
        for eid, point in rows:
            found[(etype, eid)] = point
    return found


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def import_scada_devices(*, project: Project, path: Path, crs: str = "EPSG:4326") -> DeviceImportSummary:
    """Create or update ``project``'s devices from the CSV at ``path`` (all or nothing)."""
    to_wgs = transformer_for(crs)
    if not path.is_file():
        raise ScadaImportError(f"devices file not found: {path}")
    try:
        check_lines(path, what="devices file", fields=True)  # lines, fields, NUL and UTF-8 bounded before csv reads it
    except HostileInput as exc:
        raise ScadaImportError(str(exc)) from None
    errors: list[str] = []
    rows: list[tuple[int, dict[str, str]]] = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ScadaImportError(f"line 1: missing column(s) {', '.join(missing)} (need {','.join(REQUIRED)})")
        unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
        if unknown:
            raise ScadaImportError(f"line 1: unknown column(s) {', '.join(unknown)}")
        if len(set(header)) != len(header):
            raise ScadaImportError("line 1: a column is named twice")
        reader.fieldnames = header
        try:
            for row in reader:
                if len(rows) == MAX_DEVICES:
                    raise ScadaImportError(f"line {reader.line_num}: more than {MAX_DEVICES} devices in one file")
                rows.append((reader.line_num, {k: (v or "").strip() for k, v in row.items() if k is not None}))
        except csv.Error as exc:  # a quoted field running past the field bound, a stray quote
            raise ScadaImportError(f"line {reader.line_num}: not readable as CSV ({exc})") from None
    if not rows:
        raise ScadaImportError("the file lists no devices")

    wanted = {(r["element_type"], r["element_id"]) for _, r in rows if r["element_type"] in ELEMENT_MODELS}
    positions = _element_positions(project.pk, wanted)
    seen: dict[str, int] = {}
    parsed: list[dict[str, Any]] = []
    for line, r in rows:

        def bad(column: str, reason: str, line: int = line) -> None:
            errors.append(f"line {line}, field {column}: {reason}")

        device_id = r["device_id"]
        if not device_id or len(device_id) > 64:
            bad("device_id", "must be 1 to 64 characters")
        elif device_id in seen:
            bad("device_id", f"{device_id} is listed twice (first on line {seen[device_id]})")
        seen.setdefault(device_id, line)
        if not r["name"] or len(r["name"]) > 200:
            bad("name", "must be 1 to 200 characters")
        quantity, unit = r["quantity"], r["unit"]
        spec = QUANTITIES.get(quantity)
        scale = 1.0
        if spec is None:
            bad("quantity", f"unknown quantity {quantity!r} (known: {', '.join(QUANTITIES)})")
        else:
            try:
                scale = conversion(quantity, unit).scale
            except UnitError as exc:
                bad("unit", str(exc))
            if len(unit) > 16:
                bad("unit", "at most 16 characters")
        etype, eid = r["element_type"], r["element_id"]
        point: Point | None = None
        if etype not in ELEMENT_MODELS:
            bad("element_type", f"must be one of {', '.join(ELEMENT_MODELS)}")
        elif spec is not None and etype not in spec.element_types:
            bad("element_type", f"a {quantity} device cannot sit on a {etype}")
        elif (etype, eid) not in positions:
            bad("element_id", f"no {etype} {eid!r} in the project's network")
        else:
            point = positions[(etype, eid)]
        x, y = r["x"], r["y"]
        if x or y:
            try:
                xf, yf = _float(x), _float(y)
            except ValueError:
                bad("x" if not _is_number(x) else "y", "must be a number (or x and y both empty)")
            else:
                lon, lat = to_wgs.transform(xf, yf) if to_wgs else (xf, yf)
                if not (-180 <= lon <= 180 and -90 <= lat <= 90) or not math.isfinite(lon + lat):
                    bad("x", f"({x}, {y}) in {crs} is not a place on Earth")
                else:
                    point = Point(lon, lat, srid=4326)
        try:
            interval = int(r["sample_interval_s"])
            if not 1 <= interval <= 86400:
                raise ValueError
        except ValueError:
            bad("sample_interval_s", "must be a whole number of seconds from 1 to 86400")
            interval = 0
        accuracy: float | None = None  # absent: none given (null in every answer)
        if r.get("accuracy"):
            try:
                accuracy = abs(_float(r["accuracy"]) * scale)
            except ValueError:
                bad("accuracy", "must be a number")
        parsed.append(
            {
                "device_id": device_id,
                "name": r["name"],
                "quantity": quantity,
                "unit": spec.storage_unit if spec else "",
                "native_unit": unit,
                "element_type": etype,
                "element_id": eid,
                "location": point,
                "sample_interval_s": interval,
                "accuracy": accuracy,
            }
        )
    if errors:
        more = f"\n… and {len(errors) - MAX_LISTED} more" if len(errors) > MAX_LISTED else ""
        raise ScadaImportError(
            f"{path.name} refused, nothing written ({len(errors)} problem(s)):\n"
            + "\n".join(errors[:MAX_LISTED])
            + more
        )
    return _write(project, parsed)


def _is_number(text: str) -> bool:
    try:
        _float(text)
    except ValueError:
        return False
    return True


@transaction.atomic
def _write(project: Project, parsed: list[dict[str, Any]]) -> DeviceImportSummary:
    summary = DeviceImportSummary()
    existing = {d.device_id: d for d in ScadaDevice.objects.select_for_update().filter(project_id=project.pk)}
    new: list[ScadaDevice] = []
    for values in parsed:
        device = existing.get(values["device_id"])
        summary.device_ids.append(values["device_id"])
        if device is None:
            new.append(ScadaDevice(project_id=project.pk, **values))
            continue
        changed = [k for k, v in values.items() if k != "location" and getattr(device, k) != v]
        if device.location is None or not device.location.equals_exact(values["location"], 1e-9):
            changed.append("location")
        if not changed:
            summary.unchanged += 1
            continue
        for k in changed:
            setattr(device, k, values[k])
        device.save(update_fields=changed)
        summary.updated += 1
    ScadaDevice.objects.bulk_create(new)
    summary.created = len(new)
    return summary
