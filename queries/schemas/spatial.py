"""Result data of the spatial family (query_nearby_elements, SPEC R-GEO)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.schemas.network import ElementType, Scalar
from queries.units import BY_FIELD, declared


class NearbyElement(BaseModel):
    """One element within the radius: its id, the WGS84 spheroid distance in metres from the centre to
    the nearest point of its whole geometry, and its EPANET properties (SI units)."""

    element_id: str
    distance_m: float = Field(json_schema_extra=declared("m"))
    properties: dict[str, Scalar] = Field(json_schema_extra=declared(BY_FIELD))


class NearbyPage(Page[NearbyElement]):
    """Elements of one type within ``radius_m`` of ``center``, nearest first (ties by element id).
    ``total`` counts every element within the radius; the radius is never widened."""

    source: Literal["model_network"]
    element_type: ElementType
    center: list[float] = Field(
        json_schema_extra=declared("degree"), min_length=2, max_length=2, description="[longitude, latitude]"
    )
    center_crs: Literal["EPSG:4326"]
    distance_method: Literal["WGS84_spheroid"]
    radius_m: float = Field(json_schema_extra=declared("m"))


class NearbyElementsResult(ResultEnvelope[NearbyPage]):
    pass
