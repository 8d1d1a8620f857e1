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
