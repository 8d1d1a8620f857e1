"""Result data of the SCADA family (list_scada_devices, get_scada_device, query_scada_readings).

Readings are either what the devices sent (``field=monitored_value``, origin ``measured``) or what
cleaning made of it (``field=cleaned_value``, origin ``cleaned``) — one result never mixes the two.
Every stored slot is a point with its quality flag; a slot without a value has ``value=null`` and is
also part of a gap range in the envelope's ``data_gaps`` (never filled with an invented value).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from queries.schemas.common import DataGap, Page, ResultEnvelope
from queries.units import BY_DEVICE, BY_DEVICE_DELTA, DEVICE_UNIT, declared

ReadingField = Literal["monitored_value", "cleaned_value"]
#: Every quantity the database accepts (its CHECK constraint and ``queries.scada_units.QUANTITIES``; a test
#: keeps the three equal, so one odd device can never make a device list fail validation).
QuantityName = Literal[
    "pressure", "flow", "level", "pump_status", "pump_speed", "valve_position", "chlorine", "temperature"
]
QualityFlag = Literal["good", "spike", "stuck", "gap"]


class ScadaDeviceData(BaseModel):
    """One measuring device: what it measures (quantity; ``unit`` = the unit its readings are given in,
    the project's unit system's for the quantity; ``native_unit`` = what its historian reports), on which
    network element, where it is installed (EPSG:4326), how often it reports and its standard
    uncertainty (in ``unit``; null when the device list gave none)."""

    device_id: str
    name: str
    quantity: QuantityName
    unit: str = Field(json_schema_extra=declared(DEVICE_UNIT))
    native_unit: str
    element_type: str
    element_id: str
    longitude: float | None = Field(json_schema_extra=declared("degree"))
    latitude: float | None = Field(json_schema_extra=declared("degree"))
    sample_interval_s: int = Field(json_schema_extra=declared("s"))
    accuracy: float | None = Field(json_schema_extra=declared(BY_DEVICE_DELTA))


class ScadaDevicePage(Page[ScadaDeviceData]):
    """A page of the project's devices, ordered by device id."""


class ScadaReadingPoint(BaseModel):
    """One reporting slot of one device. ``value`` is the requested field — null when the slot has no
    value of that kind (nothing received, or removed by cleaning); ``quality`` is the slot's flag."""

    device_id: str
    time: datetime
    value: float | None = Field(json_schema_extra=declared(BY_DEVICE))
    quality: QualityFlag


class ScadaReadingPage(Page[ScadaReadingPoint]):
    """Points of the requested devices in the result's window, ordered by device id then time (the
    page is over these points). ``field``/``origin`` say which kind of value every point carries."""

    field: ReadingField
    origin: Literal["measured", "cleaned"]
    device_ids: list[str]


class ScadaDataGap(DataGap):
    """A range ``[start, end)`` of one device without a value of the requested field: consecutive
    slots of one kind merged. ``reason``: "no reading received" (quality gap), "no reading stored" (no
    row at all), and for cleaned values also "removed by cleaning: spike" / "removed by cleaning: stuck
    value"."""

    device_id: str


class ScadaDeviceListResult(ResultEnvelope[ScadaDevicePage]):
    pass


class ScadaDeviceResult(ResultEnvelope[ScadaDeviceData]):
    pass


class ScadaReadingsResult(ResultEnvelope[ScadaReadingPage]):
    data_gaps: list[ScadaDataGap] = Field(default_factory=list)  # type: ignore[assignment]  # gaps name the device
