"""The legacy CLI → tool table (seed 001, its last table "旧 CLI 与当前后端对照"), as data.

Each of the old CLI's 41 business commands is mapped either to the tool that replaces it, or to an
explicit reason why this server does not offer it (an execution command — the first version of the
query MCP runs no analyses — or a feature with no server behind it). ``manage.py mcp_catalog_check``
reads ``LEGACY_COMMANDS``; ``tests/queries/test_legacy.py`` checks that every tool named here is in the
registry.

Features a caller can still *ask* for through a tool argument (an analysis ``result_type`` or series
``field`` of ``water_age``, ``pipeline_health``) are answered with ``CapabilityGap``
(``CAPABILITY_NOT_AVAILABLE``) naming the feature — never with an empty result, which would read as
"nothing there" (seed 001 acceptance item 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from queries.errors import CapabilityGap

#: ``tool``: the named tool replaces the command. ``execution_candidate``: a POST that runs a computation;
#: listed as a later candidate, not in the query catalog. ``not_offered``: no server capability behind it.
Decision = Literal["tool", "execution_candidate", "not_offered"]


@dataclass(frozen=True, slots=True)
class LegacyCommand:
    """One legacy CLI command: the route it used, and what this server does with it."""

    command: str
    legacy_route: str
    decision: Decision
    tool: str | None = None
    note: str = ""


def _tool(command: str, route: str, tool: str, note: str = "") -> LegacyCommand:
    return LegacyCommand(command=command, legacy_route=route, decision="tool", tool=tool, note=note)


def _exec(command: str, route: str, note: str = "") -> LegacyCommand:
    reason = "An execution command: the query MCP runs no computations (a later candidate, not a query tool)."
    return LegacyCommand(command, route, "execution_candidate", None, f"{reason} {note}".strip())


LEGACY_COMMANDS: tuple[LegacyCommand, ...] = (
    _tool("network get-junction-properties", "GET /junctions/properties", "get_element_properties"),
    _tool("network get-pipe-properties", "GET /pipes/properties", "get_element_properties"),
    _tool("network get-all-pipes-properties", "GET /pipes", "list_elements", "paged"),
    _tool("network get-reservoir-properties", "GET /reservoirs/properties", "get_element_properties"),
    _tool("network get-all-reservoirs-properties", "GET /reservoirs", "list_elements", "paged"),
    _tool("network get-tank-properties", "GET /tanks/properties", "get_element_properties"),
    _tool("network get-all-tanks-properties", "GET /tanks", "list_elements", "paged"),
    _tool("network get-pump-properties", "GET /pumps/properties", "get_element_properties"),
    _tool("network get-all-pumps-properties", "GET /pumps", "list_elements", "paged"),
    _tool("network get-valve-properties", "GET /valves/properties", "get_element_properties"),
    _tool("network get-all-valves-properties", "GET /valves", "list_elements", "paged"),
    _tool("component option schema", "GET /network-schemas/{kind}", "get_network_schema"),
    _tool("component option get", "GET /network-options (time, energy, pump-energy)", "get_network_options"),
    _exec("simulation run", "POST /simulation-runs", "Its duration is in minutes."),
    _exec("analysis burst", "POST /burst-analyses"),
    _exec("analysis valve isolation", "POST /valve-isolation-analyses"),
    _exec("analysis flushing", "POST /flushing-analyses"),
    LegacyCommand(
        "analysis age",
        "/water-age-analyses (not registered)",
        "not_offered",
        None,
        "Water-age analysis: the route is not registered and the algorithm is not assumed to still run.",
    ),
    _exec("analysis contaminant", "POST /contaminant-simulations"),
    _exec("analysis sensor-placement run", "POST /sensor-placement-runs"),
    _tool(
        "analysis sensor-placement list", "GET /sensor-placement-runs", "list_sensor_placement_runs", "bounded in SQL"
    ),
    _tool(
        "analysis sensor-placement get",
        "GET /sensor-placement-runs/{run_id}",
        "get_sensor_placement_run",
        "existing results of the bound project",
    ),
    _tool("analysis runs list", "GET /analysis/runs", "list_analysis_runs"),
    _tool("analysis runs get", "GET /analysis/runs/{run_id}", "get_analysis_run"),
    _tool("analysis runs results", "GET /analysis/runs/{run_id}/results", "list_analysis_results"),
    _exec("analysis leakage identify", "POST /leakage-identifications"),
    _exec("analysis burst-detection detect", "POST /burst-detections"),
    _exec("analysis burst-location locate", "POST /burst-locations"),
    _tool(
        "data timeseries realtime links",
        "GET /timeseries/realtime/links",
        "query_model_baseline_series",
        "at most 20 elements, limited in SQL",
    ),
    _tool(
        "data timeseries realtime nodes",
        "GET /timeseries/realtime/nodes",
        "query_model_baseline_series",
        "at most 20 elements, limited in SQL",
    ),
    _tool(
        "data timeseries realtime simulation-by-id-time",
        "GET /timeseries/realtime/simulation-results",
        "get_model_baseline_at_time",
    ),
    _tool(
        "data timeseries realtime simulation-by-time-property",
        "GET /timeseries/realtime/records",
        "query_model_baseline_field",
    ),
    _tool(
        "data timeseries analysis link-field",
        "GET /timeseries/analysis/runs/{run_id}/links/{link_id}",
        "query_analysis_series",
    ),
    _tool(
        "data timeseries analysis node-field",
        "GET /timeseries/analysis/runs/{run_id}/nodes/{node_id}",
        "query_analysis_series",
    ),
    _tool("data timeseries analysis values", "GET /timeseries/analysis/runs/{run_id}/values", "query_analysis_values"),
    _tool("data timeseries scada query", "GET /timeseries/scada-readings (and fields)", "query_scada_readings"),
    _tool(
        "data timeseries composite",
        "POST /timeseries/views/element-history/query (the three old views are not registered)",
        "query_element_history",
        "re-adapted as the three history modes; not claimed equivalent to the old composite views",
    ),
    LegacyCommand(
        "data pipeline-health",
        "GET /pipeline-health-predictions",
        "not_offered",
        None,
        "Pipeline-health prediction runs a model (it is not a read of saved results); a later computation "
        "candidate (predict_pipeline_health) once model assets, cost and permission are checked.",
    ),
    _tool(
        "data scada get",
        "GET /scada-devices/{device_id} (the old /scada-devices/detail is not registered)",
        "get_scada_device",
    ),
    _tool("data scada list", "GET /scada-devices", "list_scada_devices", "paged"),
    _tool("data scada schema", "GET /network-schemas/scada-device", "get_network_schema"),
)


@dataclass(frozen=True, slots=True)
class UnavailableFeature:
    """A legacy feature a caller may still name in a tool argument; answered as a capability gap."""

    feature: str
    reason: str


UNAVAILABLE_FEATURES: dict[str, UnavailableFeature] = {
    "water_age": UnavailableFeature(
        "water-age analysis", "The legacy water-age analysis is not offered: no server route or algorithm backs it."
    ),
    "pipeline_health": UnavailableFeature(
        "pipeline-health prediction",
        "Pipeline-health prediction runs a model; it is a later computation candidate, not a query.",
    ),
}
#: Spellings a caller may use for them (argument values are compared lower-cased, ``-`` as ``_``).
_ALIASES = {
    "age": "water_age",
    "water_age_analysis": "water_age",
    "pipeline_health_prediction": "pipeline_health",
    "predict_pipeline_health": "pipeline_health",
}


def unavailable_feature(value: str) -> UnavailableFeature | None:
    """The legacy feature ``value`` names (``water_age``, ``water-age``, ``pipeline_health`` …), if any."""
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return UNAVAILABLE_FEATURES.get(_ALIASES.get(key, key))


def refuse_unavailable(value: str | None) -> None:
    """Raise ``CapabilityGap`` (``CAPABILITY_NOT_AVAILABLE``) naming the feature when ``value`` names a
    legacy feature this server does not offer."""
    if value is None:
        return
    gap = unavailable_feature(value)
    if gap is not None:
        raise CapabilityGap(f"{gap.reason}", details={"feature": gap.feature})
