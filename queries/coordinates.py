"""A point's longitude and latitude read in SQL (``ST_X``/``ST_Y``), not through GEOS per row.

A ``.values()`` page of points that selects the geometry gets a GEOS ``Point`` per row (Django's
converter parses the EWKB through ctypes) only for the service to read ``.x``/``.y`` back — issue 25
measured that as ≈ 45 % of a 500-item ``list_elements`` page. ``ST_X``/``ST_Y`` return the stored
doubles themselves (float8, sent with the shortest exact text), so the numbers are the same.

Both are plain ``Func`` calls of a column with no values of their own: the MCP driver caches their
statement shape like any other (``mcp_app.executor._expression_key``).
"""

from __future__ import annotations

from django.db.models import F, FloatField, Func


def coordinates(field: str = "geom") -> dict[str, Func]:
    """``{"longitude": ST_X(field), "latitude": ST_Y(field)}`` for ``.values(**coordinates())`` (EPSG:4326
    degrees; null when the point is null)."""
    return {
        "longitude": Func(F(field), function="ST_X", output_field=FloatField()),
        "latitude": Func(F(field), function="ST_Y", output_field=FloatField()),
    }


def rounded(value: float | None) -> float | None:
    """A coordinate as results give it: 7 decimals (≈ 1 cm), null stays null."""
    return None if value is None else round(value, 7)
