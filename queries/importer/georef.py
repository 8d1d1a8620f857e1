"""Georeferencing of schematic EPANET coordinates.

EPANET coordinates are drawn units without a CRS. We place the drawing on the ground: the bounding-box
centre of the drawing goes to ``center`` (lon, lat), every drawn unit becomes ``scale`` metres in the
UTM zone of that centre (a conformal projection, so lengths are true to ~0.04 % near the central
meridian), and the result goes back to EPSG:4326 (SDK_NOTES "Data").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pyproj import CRS, Transformer


def utm_epsg(lon: float, lat: float) -> int:
    """EPSG code of the WGS84 UTM zone containing ``(lon, lat)`` (326xx north, 327xx south)."""
    zone = int((lon + 180.0) // 6.0) % 60 + 1
    return (32600 if lat >= 0 else 32700) + zone


@dataclass
class Georeferencer:
    """Maps drawn ``(x, y)`` to ``(lon, lat)``: scale about ``origin`` (the drawing's bbox centre) in
    the UTM zone of ``center``."""

    center: tuple[float, float]
    scale: float
    origin: tuple[float, float]
    epsg: int = field(init=False)
    _to_utm: Transformer = field(init=False, repr=False)
    _to_wgs: Transformer = field(init=False, repr=False)
    _center_utm: tuple[float, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lon, lat = self.center
        if not (-180.0 <= lon <= 180.0 and -80.0 <= lat <= 84.0):
            raise ValueError("centre must be a longitude in [-180, 180] and a latitude in [-80, 84] (UTM)")
        if not self.scale > 0:
            raise ValueError("scale must be a positive number of metres per drawn unit")
        self.epsg = utm_epsg(lon, lat)
        utm = CRS.from_epsg(self.epsg)
        self._to_utm = Transformer.from_crs("EPSG:4326", utm, always_xy=True)
        self._to_wgs = Transformer.from_crs(utm, "EPSG:4326", always_xy=True)
        e, n = self._to_utm.transform(lon, lat)
        self._center_utm = (float(e), float(n))

    @classmethod
    def for_points(
        cls, points: Iterable[Sequence[float]], *, center: tuple[float, float], scale: float
    ) -> Georeferencer:
        arr = np.asarray(list(points), dtype=float).reshape(-1, 2)
        if len(arr) == 0:
            origin = (0.0, 0.0)
        else:
            lo, hi = arr.min(axis=0), arr.max(axis=0)
            origin = (float((lo[0] + hi[0]) / 2), float((lo[1] + hi[1]) / 2))
        return cls(center=center, scale=scale, origin=origin)

    def transform(self, xy: np.ndarray) -> np.ndarray:
        """``(n, 2)`` drawn coordinates → ``(n, 2)`` lon/lat."""
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        e = self._center_utm[0] + (xy[:, 0] - self.origin[0]) * self.scale
        n = self._center_utm[1] + (xy[:, 1] - self.origin[1]) * self.scale
        lon, lat = self._to_wgs.transform(e, n)
        return np.column_stack([lon, lat])
