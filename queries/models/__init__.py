"""The water-utility data model (SPEC §1 "queries"), one module per data family.

Every row belongs to a project; element ids are the network's own ids, unique per project and type.
See ``README.md`` beside this file for how to look things up.
"""

from queries.models.analysis import (
    AnalysisKind,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
    RunStatus,
)
from queries.models.baseline import LinkBaseline, NetworkSource, NodeBaseline, current_model_version
from queries.models.gis import ElementGisProperties, GisFeature, GisLayer, IsolationValve, ValveSegments
from queries.models.jobs import Job, JobKind, JobStatus
from queries.models.network import (
    ELEMENT_MODELS,
    ELEMENT_TYPES,
    LINK_TYPES,
    NODE_TYPES,
    Curve,
    Junction,
    LinkStatus,
    Pattern,
    Pipe,
    Pump,
    Reservoir,
    Tank,
    Valve,
)
from queries.models.options import NETWORK_SCHEMAS, NetworkOptions, NetworkSchema, OptionKind, SchemaKind
from queries.models.peripheral import Observation, PeripheralPoint, TestData, WorkOrder
from queries.models.runtime import WorkbenchRuntime
from queries.models.scada import Quantity, ReadingQuality, ScadaDevice, ScadaReading
from queries.models.sensor_placement import SensorPlacementRun

__all__ = [
    "ELEMENT_MODELS",
    "ELEMENT_TYPES",
    "LINK_TYPES",
    "NETWORK_SCHEMAS",
    "NODE_TYPES",
    "AnalysisKind",
    "AnalysisLinkSeries",
    "AnalysisNodeSeries",
    "AnalysisResult",
    "AnalysisRun",
    "Curve",
    "ElementGisProperties",
    "GisFeature",
    "GisLayer",
    "IsolationValve",
    "ValveSegments",
    "Job",
    "JobKind",
    "JobStatus",
    "Junction",
    "LinkBaseline",
    "LinkStatus",
    "NetworkOptions",
    "NetworkSource",
    "current_model_version",
    "NetworkSchema",
    "NodeBaseline",
    "Observation",
    "OptionKind",
    "Pattern",
    "PeripheralPoint",
    "Pipe",
    "Pump",
    "Quantity",
    "ReadingQuality",
    "Reservoir",
    "RunStatus",
    "ScadaDevice",
    "ScadaReading",
    "SchemaKind",
    "SensorPlacementRun",
    "Tank",
    "TestData",
    "Valve",
    "WorkOrder",
    "WorkbenchRuntime",
]
