"""Result data of the network family (get_element_properties, list_elements, get_network_options,
get_network_schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import Page, ResultEnvelope
from queries.units import BY_FIELD, declared

ElementType = Literal["junction", "pipe", "valve", "pump", "tank", "reservoir"]
OptionKindName = Literal["hydraulic", "time", "energy", "pump_energy"]
SchemaKindName = Literal[
    "junction",
    "reservoir",
    "tank",
    "pipe",
    "pump",
    "valve",
    "scada-device",
    "hydraulic",
    "time",
    "energy",
    "pump_energy",
]
Scalar = str | float | int | bool | None


class ElementProperties(BaseModel):
    """One element's EPANET properties in SI units (``units`` of the envelope names them)."""

    element_type: ElementType
    element_id: str
    properties: dict[str, Scalar] = Field(json_schema_extra=declared(BY_FIELD))


class ElementPage(Page[ElementProperties]):
    """A page of elements of one type, ordered by element id."""


class NetworkOptionsData(BaseModel):
    """One kind of network options; ``pump_id`` is set only for pump energy options."""

    kind: OptionKindName
    pump_id: str | None
    values: dict[str, Scalar] = Field(json_schema_extra=declared(BY_FIELD))


class SchemaProperty(BaseModel):
    name: str
    type: str
    unit: str
    enum: list[str] | None
    description: str


class NetworkSchemaData(BaseModel):
    """What the properties of one kind mean: type, unit and allowed values."""

    kind: SchemaKindName
    description: str
    properties: list[SchemaProperty]


class ElementPropertiesResult(ResultEnvelope[ElementProperties]):
    pass


class ElementListResult(ResultEnvelope[ElementPage]):
    pass


class NetworkOptionsResult(ResultEnvelope[NetworkOptionsData]):
    pass


class NetworkSchemaResult(ResultEnvelope[NetworkSchemaData]):
    pass
