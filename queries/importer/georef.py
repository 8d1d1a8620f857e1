"""Georeferencing of EPANET coordinates: exact for a network drawn in a CRS, placed for a schematic one.

A utility's model is usually drawn in its own projected CRS (e.g. Kentucky state plane in US feet,
EPSG:3089): ``CrsGeoreferencer`` transforms those coordinates exactly to EPSG:4326 with pyproj
(``always_xy``: EPANET's X is the easting, Y the northing, whatever axis order the CRS declares), in
whatever linear unit the CRS has.

A schematic network has drawn units without a CRS. ``Georeferencer`` places the drawing on the ground:
the bounding-box centre of the drawing goes to ``center`` (lon, lat), every drawn unit becomes ``scale``
metres in the UTM zone of that centre (a conformal projection, so lengths are true to ~0.04 % near the
central meridian), and the result goes back to EPSG:4326 (SDK_NOTES "Data").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pyproj import CRS, Transformer
from pyproj.exceptions import CRSError


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


#: How far (degrees) transformed coordinates may lie outside the CRS's declared area of use before the
#: import is refused as "wrong --crs" (state-plane zones are used a little past their borders).
AREA_OF_USE_MARGIN_DEG = 1.0


@dataclass
class CrsGeoreferencer:
    """Maps ``(x, y)`` in ``crs`` (anything pyproj accepts, e.g. ``EPSG:3089``) exactly to ``(lon, lat)``.

    Refuses (``ValueError`` with a one-line reason) an unknown CRS, one that is neither projected nor
    geographic, and coordinates that land outside the CRS's area of use — the usual sign that the file
    is drawn in another CRS or is schematic."""

    crs: str
    epsg: int | None = field(init=False)
    _to_wgs: Transformer = field(init=False, repr=False)
    _area: tuple[float, float, float, float] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            crs = CRS.from_user_input(self.crs)
        except CRSError:
            raise ValueError(f"unknown CRS {self.crs!r} (give it as EPSG:NNNN)") from None
        if not (crs.is_projected or crs.is_geographic) or crs.is_geocentric:
            raise ValueError(f"{self.crs} is a {crs.type_name}, not a projected or geographic CRS")
        self.epsg = crs.to_epsg()
        self._to_wgs = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
        aou = crs.area_of_use
        self._area = None if aou is None else (aou.west, aou.south, aou.east, aou.north)

    def transform(self, xy: np.ndarray) -> np.ndarray:
        """``(n, 2)`` CRS coordinates → ``(n, 2)`` lon/lat."""
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        lon, lat = self._to_wgs.transform(xy[:, 0], xy[:, 1])
        out = np.column_stack([np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)])
        if len(out) and not np.all(np.isfinite(out)):
            raise ValueError(f"some coordinates cannot be transformed from {self.crs} (outside the projection)")
        if self._area is not None and len(out):
            west, south, east, north = self._area
            m = AREA_OF_USE_MARGIN_DEG
            lo, hi = out.min(axis=0), out.max(axis=0)
            if lo[0] < west - m or hi[0] > east + m or lo[1] < south - m or hi[1] > north + m:
                raise ValueError(
                    f"the coordinates fall outside {self.crs}'s area of use "
                    f"({west:g}..{east:g} E, {south:g}..{north:g} N) once transformed "
                    f"(lon {lo[0]:.3f}..{hi[0]:.3f}, lat {lo[1]:.3f}..{hi[1]:.3f}): is the CRS right?"
                )
        return out


#: The widest bounding box (degrees, in longitude or latitude) coordinates may span and still be read as
#: EPSG:4326 lon/lat when the file comes with neither a CRS nor a centre: ~5° is ~550 km, far more than any
#: water network serves, so a wider box is a drawing in metres, feet or schematic units.
GEOGRAPHIC_MAX_SPAN_DEG = 5.0


def geographic_or_refusal(points: Iterable[Sequence[float]], *, file_name: str) -> str:
    """``""`` when ``points`` are evidently lon/lat degrees of a water network (inside [-180, 180] ×
    [-90, 90], no wider than ``GEOGRAPHIC_MAX_SPAN_DEG`` either way), else the sentence refusing them,
    naming the file, the bbox it saw and the two flags that would place it."""
    arr = np.asarray(list(points), dtype=float).reshape(-1, 2)
    if len(arr) == 0:
        return f"{file_name} has no coordinates to place: give --crs EPSG:NNNN or --center LON,LAT"
    (xmin, ymin), (xmax, ymax) = arr.min(axis=0), arr.max(axis=0)
    inside = -180.0 <= xmin and xmax <= 180.0 and -90.0 <= ymin and ymax <= 90.0
    span = GEOGRAPHIC_MAX_SPAN_DEG
    if inside and xmax - xmin <= span and ymax - ymin <= span:
        return ""
    return (
        f"{file_name} has coordinates x {xmin:g}..{xmax:g}, y {ymin:g}..{ymax:g}, which are not longitude/"
        "latitude degrees: give their CRS with --crs EPSG:NNNN, or place a schematic drawing with "
        "--center LON,LAT (and --scale metres per drawn unit)"
    )


def placement_of(georef: Georeferencer | CrsGeoreferencer, *, scale: float) -> str:
    """How ``georef`` places coordinates on the ground, in words for an import's summary."""
    if isinstance(georef, CrsGeoreferencer):
        return "coordinates read as EPSG:4326 lon/lat" if georef.crs == "EPSG:4326" else f"{georef.crs} → EPSG:4326"
    lon, lat = georef.center
    return f"schematic drawing placed about {lon:g},{lat:g} at {scale:g} m per drawn unit"
