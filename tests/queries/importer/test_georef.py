"""Georeferencing: UTM zone choice and metric scaling about the drawing's centre."""

from __future__ import annotations

import numpy as np
import pytest
from pyproj import Geod

from queries.importer.georef import Georeferencer, utm_epsg

GEOD = Geod(ellps="WGS84")


def test_utm_zone_of_tianjin_is_50n() -> None:
    assert utm_epsg(117.2, 39.1) == 32650
    assert utm_epsg(-70.6, -33.4) == 32719


def test_centre_maps_to_centre_and_units_become_metres() -> None:
    georef = Georeferencer.for_points([(0, 0), (200, 100)], center=(117.2, 39.1), scale=70.0)
    (lon_c, lat_c), (lon_e, lat_e) = georef.transform(np.array([[100.0, 50.0], [110.0, 50.0]]))
    assert (lon_c, lat_c) == pytest.approx((117.2, 39.1), abs=1e-9)
    _, _, dist = GEOD.inv(lon_c, lat_c, lon_e, lat_e)
    assert dist == pytest.approx(700.0, rel=1e-3)  # 10 drawn units × 70 m, UTM scale error < 0.1 %


def test_bad_centre_or_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale"):
        Georeferencer(center=(117.2, 39.1), scale=0, origin=(0, 0))
    with pytest.raises(ValueError, match="centre"):
        Georeferencer(center=(117.2, 89.0), scale=1, origin=(0, 0))


def test_lon_lat_of_a_town_is_geographic_and_a_drawing_is_refused() -> None:
    from queries.importer.georef import geographic_or_refusal

    assert geographic_or_refusal([(-85.60, 38.01), (-85.52, 38.09)], file_name="town.inp") == ""
    metres = geographic_or_refusal([(4971350.0, 3905604.0), (4990000.0, 3920000.0)], file_name="ky4.inp")
    assert metres == (
        "ky4.inp has coordinates x 4.97135e+06..4.99e+06, y 3.9056e+06..3.92e+06, which are not longitude/"
        "latitude degrees: give their CRS with --crs EPSG:NNNN, or place a schematic drawing with "
        "--center LON,LAT (and --scale metres per drawn unit)"
    )
    # Inside the degree ranges, but 60 "degrees" wide: a schematic drawing, not a water network's extent.
    assert "x 10..70, y 10..70" in geographic_or_refusal([(10, 10), (70, 70)], file_name="Net1.inp")
    assert "has no coordinates" in geographic_or_refusal([], file_name="empty.inp")
