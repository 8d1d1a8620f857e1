"""Real GIS files for tests, written by GDAL's own ``ogr2ogr`` (``gdal-bin``, installed by ``make setup``):
a GeoPackage or a zipped Shapefile of given features in a given CRS."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Feature:
    """Attributes and a GeoJSON geometry (``{"type": "LineString", "coordinates": [...]}``) in the file's CRS."""

    properties: dict[str, Any]
    geometry: dict[str, Any] | None


def ogr2ogr() -> str:
    path = shutil.which("ogr2ogr")
    assert path, "ogr2ogr (Debian package gdal-bin) is missing: run make setup"
    return path


def _geojson(tmp: Path, features: Sequence[Feature]) -> Path:
    src = tmp / "features.geojson"
    src.write_text(
        json.dumps(
            {
                "type": "FeatureCollection",
                "features": [{"type": "Feature", "properties": f.properties, "geometry": f.geometry} for f in features],
            }
        )
    )
    return src


def write_layer(
    tmp: Path, name: str, features: Sequence[Feature], *, crs: str | None, driver: str = "GPKG", suffix: str = ".gpkg"
) -> Path:
    """Write ``features`` (coordinates already in ``crs``) as layer ``name`` of a new file; ``crs=None``
    writes no CRS at all (a Shapefile without .prj)."""
    src = _geojson(tmp, features)
    out = tmp / f"{name}{suffix}"
    args = [ogr2ogr(), "-f", driver, str(out), str(src), "-nln", name]
    # GeoJSON is WGS84 by definition; -a_srs assigns the CRS the coordinates really are in.
    args += ["-a_srs", crs] if crs else ["-a_srs", "EPSG:4326"]
    subprocess.run(args, check=True, capture_output=True, timeout=60)
    if crs is None and suffix == ".shp":
        out.with_suffix(".prj").unlink()
    return out


def write_zipped_shapefile(tmp: Path, name: str, features: Sequence[Feature], *, crs: str | None) -> Path:
    folder = tmp / f"{name}-shp"
    folder.mkdir()
    shp = write_layer(folder, name, features, crs=crs, driver="ESRI Shapefile", suffix=".shp")
    archive = tmp / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for part in sorted(shp.parent.glob(f"{name}.*")):
            zf.write(part, arcname=part.name)
    return archive
