"""The analysis kinds (issue 42 item 2): what each one asks (its input schema, in the project's units),
how a request becomes the canonical SI parameters that are hashed for idempotency, what a run costs, and
how the computation of ``queries.runs`` becomes results in the project's units.

Importing this package is light (no WNTR, no pandas): the submission path, the registries and the tool
catalog read the names below without loading the engine; ``kinds()`` imports the per-kind modules on its
first call. ``KINDS`` is the same mapping, built on first access.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyses.kinds.base import AnalysisKind, Payload

__all__ = ["KINDS", "KIND_NAMES", "LABELS", "REST_PATHS", "TOOL_NAMES", "kinds", "result_models"]

KIND_NAMES = ("simulation", "burst", "valve_isolation", "flushing", "contaminant")
#: The MCP tool that submits each kind.
TOOL_NAMES: dict[str, str] = {
    "simulation": "run_simulation",
    "burst": "run_burst_analysis",
    "valve_isolation": "run_valve_isolation_analysis",
    "flushing": "run_flushing_analysis",
    "contaminant": "run_contaminant_simulation",
}
#: Each kind's label (its job kind's, in the admin and the commands).
LABELS: dict[str, str] = {
    "simulation": "What-if simulation",
    "burst": "Burst analysis",
    "valve_isolation": "Valve isolation analysis",
    "flushing": "Flushing analysis",
    "contaminant": "Contaminant simulation",
}
#: The REST collection of each kind (``/api/projects/<slug>/<path>/``).
REST_PATHS: dict[str, str] = {
    "simulation": "simulation-runs",
    "burst": "burst-analyses",
    "valve_isolation": "valve-isolation-analyses",
    "flushing": "flushing-analyses",
    "contaminant": "contaminant-simulations",
}


@cache
def kinds() -> dict[str, AnalysisKind]:
    """Every analysis kind by name, in ``KIND_NAMES`` order (built once per process)."""
    from analyses.kinds.burst import BurstKind
    from analyses.kinds.contaminant import ContaminantKind
    from analyses.kinds.flushing import FlushingKind
    from analyses.kinds.simulation import SimulationKind
    from analyses.kinds.valve_isolation import ValveIsolationKind

    built: list[AnalysisKind] = [SimulationKind(), BurstKind(), ValveIsolationKind(), FlushingKind(), ContaminantKind()]
    by_name = {kind.name: kind for kind in built}
    return {name: by_name[name] for name in KIND_NAMES}


def result_models() -> dict[str, dict[str, type[Payload]]]:
    """Each kind's payload model of each result type it writes (``list_analysis_results`` publishes them:
    ``queries.schemas.result_payloads``)."""
    return {name: dict(kind.results) for name, kind in kinds().items()}


def __getattr__(name: str) -> dict[str, AnalysisKind]:
    """``KINDS``, built on first access (PEP 562), so that importing the package stays light."""
    if name == "KINDS":
        return kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
