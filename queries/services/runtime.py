"""The workbench runtime snapshot of the caller's project, read only (seed 001: "workbench/runtime；只读取").

The workbench writes one snapshot per project (``queries.models.WorkbenchRuntime``): the simulation
clock, the active scenario, the mode, and per data source its last sync and freshness. This service
only reads it. Its one optional input, ``data_source``, narrows ``data_sources`` to one named source
(an unknown name is "not found", so a typo never reads as "no sources"); there are no other business
inputs — project comes from the context binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from contexts.errors import NotFound
from contexts.scope import QueryScope
from queries.models import WorkbenchRuntime
from queries.plan import Plan, service, statement_factory
from queries.schemas.runtime import DataSourceStatus, WorkbenchRuntimeResult
from queries.schemas.runtime import WorkbenchRuntime as WorkbenchRuntimeData

SOURCE = "workbench_runtime"


def _utc(value: object) -> datetime | None:
    """An ISO 8601 time from the snapshot's JSON, in UTC; None when absent, naive or malformed."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def _status(name: str, entry: object) -> DataSourceStatus:
    info: Mapping[str, Any] = entry if isinstance(entry, Mapping) else {}
    freshness = info.get("freshness_s")
    status = info.get("status")
    return DataSourceStatus(
        name=name,
        last_sync=_utc(info.get("last_sync")),
        freshness_s=int(freshness) if isinstance(freshness, int | float) and not isinstance(freshness, bool) else None,
        status=status if isinstance(status, str) else None,
    )


@statement_factory
def _snapshot(project_id: int) -> Any:
    """The project's runtime snapshot: a statement factory, compiled once."""
    snapshots = WorkbenchRuntime.objects.filter(project_id=project_id)
    return snapshots.values("simulation_clock", "active_scenario", "mode", "data_sources", "captured_at")[:1]


@service
def get_workbench_runtime(*, scope: QueryScope, data_source: str | None = None) -> Plan[WorkbenchRuntimeResult]:
    """The caller's project's workbench runtime snapshot (one query)."""
    rows = yield _snapshot(scope.project_id)
    if not rows:
        raise NotFound("This project has no workbench runtime snapshot.")
    row = rows[0]
    sources: Mapping[str, object] = row["data_sources"] if isinstance(row["data_sources"], Mapping) else {}
    if data_source is not None:
        if data_source not in sources:
            raise NotFound("No data source of that name in this project's workbench runtime.")
        sources = {data_source: sources[data_source]}
    return WorkbenchRuntimeResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/workbench/runtime"
        + (f"/data_sources/{data_source}" if data_source else ""),
        queried_at=datetime.now(UTC),
        # Runtime state, not data about the network; Origin has no runtime value yet (reported).
        origin="diagnostic",
        data=WorkbenchRuntimeData(
            simulation_clock=row["simulation_clock"].astimezone(UTC),
            active_scenario=row["active_scenario"] or None,
            mode=row["mode"],
            captured_at=row["captured_at"].astimezone(UTC),
            data_sources=[_status(name, sources[name]) for name in sorted(sources)],
        ),
        units={"freshness_s": "s"},
    )
