"""Two tenants interleaved under load (issue 9, "The resilience suite").

alice (project ``resil-alice``) and bob (project ``resil-bob``) hold the same EPANET Net1 network, so
every element id exists in both, but every junction carries a tenant-identifying elevation (1111.25 for
alice, 2222.75 for bob). 50 concurrent callers interleave both tenants' calls over two server processes
on the same private database and Redis; every single response is checked for its tenant marker: the
element or page must carry the caller's own elevation, its ``source_ref`` the caller's own project, and
the body must not contain the other tenant's slug or elevation anywhere. Zero crossings allowed.

15 seconds in ``make test``; 2 minutes under ``make resilience`` (``resilience_slow``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.resilience.load import VIOLATION, LoadRun, Probe, once_each
from tests.support.resilience import TENANT_ELEVATION, Figures, Processes, World, bind, dev_token

pytestmark = pytest.mark.e2e

CALLERS = 50
TENANTS = {"resil-alice": "resil-alice", "resil-bob": "resil-bob"}  # subject → project
ELEMENTS = ["10", "11", "12", "21", "22", "23", "31", "32"]  # Net1 junctions (present in both projects)
CROSSING = "tenant_crossing"


def other(project: str) -> str:
    return next(p for p in TENANT_ELEVATION if p != project)


def tenant_check(project: str, element_id: str | None) -> Callable[[dict[str, Any]], str | None]:
    """The tenant marker of one response: own elevation and project everywhere, nothing of the other."""
    mine, theirs = TENANT_ELEVATION[project], TENANT_ELEVATION[other(project)]

    def check(structured: dict[str, Any]) -> str | None:
        text = json.dumps(structured)
        if other(project) in text or repr(theirs) in text:
            return CROSSING
        if not str(structured.get("source_ref", "")).startswith(f"project:{project}/"):
            return f"{CROSSING}:source_ref"
        data = structured.get("data") or {}
        items = data.get("items") if element_id is None else [data]
        if not items:
            return "empty_result"
        for item in items:
            if (item.get("properties") or {}).get("elevation") != mine:
                return CROSSING if (item.get("properties") or {}).get("elevation") == theirs else "wrong_properties"
        if element_id is not None and data.get("element_id") != element_id:
            return "wrong_element"
        return None

    return check


def tenant_probes(servers: list[Any]) -> list[Probe]:
    """Per server and tenant: element lookups by id and a page of junctions; alternate tenants so
    neighbouring callers belong to different tenants."""
    probes: list[Probe] = []
    handles = {}
    bearers = {subject: dev_token(subject) for subject in TENANTS}
    for server in servers:
        for subject, project in TENANTS.items():
            handles[(server.port, subject)] = bind(server, bearers[subject], project)
    for n, element in enumerate(ELEMENTS):
        for server in servers:
            for subject, project in TENANTS.items():
                handle = handles[(server.port, subject)]
                if n % 4 == 3:
                    tool, arguments, check = (
                        "list_elements",
                        {"context_handle": handle, "element_type": "junction", "limit": 5, "offset": n % 5},
                        tenant_check(project, None),
                    )
                else:
                    tool, arguments, check = (
                        "get_element_properties",
                        {"context_handle": handle, "element_type": "junction", "element_id": element},
                        tenant_check(project, element),
                    )
                probes.append(
                    Probe(
                        label=f"{subject}:{server.port}:{tool}",
                        url=server.url,
                        bearer=bearers[subject],
                        tool=tool,
                        arguments=arguments,
                        expect=check,
                    )
                )
    return probes


def interleave(processes: Processes, figures: Figures, duration_s: float, name: str) -> None:
    env = {"TJWATER_MCP_MAX_CONCURRENT": "64"}  # the per-principal limit is tested elsewhere
    servers = [processes.server(**env), processes.server(**env)]
    probes = tenant_probes(servers)
    # Warm-up, not counted: one call per probe, so the servers' first-call costs (pool connections,
    # compiled queries) do not eat a short run.
    warmup = asyncio.run(once_each(probes))
    run = LoadRun(probes, callers=CALLERS, call_timeout_s=30, pause_s=0.0)
    asyncio.run(run.run(duration_s))

    crossings = [s for s in run.samples if CROSSING in s.outcome]
    per_tenant = {subject: run.outcomes(f"{subject}:") for subject in TENANTS}
    latencies = sorted(s.elapsed for s in run.samples)
    figures.record(
        name,
        {
            "warmup_outcomes": dict(Counter(warmup)),
            "median_latency_s": latencies[len(latencies) // 2] if latencies else None,
            "max_latency_s": latencies[-1] if latencies else None,
            "callers": CALLERS,
            "duration_s": duration_s,
            "responses_checked": len(run.samples),
            "by_tenant": per_tenant,
            "tenant_crossings": len(crossings),
            "violation_examples": sorted({s.outcome for s in run.violations()})[:10],
        },
    )
    assert crossings == []
    assert [s for s in run.samples if s.outcome.startswith(VIOLATION)] == [], run.report()
    assert [o for o in warmup if CROSSING in o] == []
    for subject in TENANTS:
        assert per_tenant[subject].get("ok", 0) >= CALLERS, per_tenant  # both tenants really were served


def test_two_tenants_interleaved_15s(processes: Processes, world: World, figures: Figures) -> None:
    interleave(processes, figures, 15, "tenants.interleaved_15s")


@pytest.mark.resilience_slow
def test_two_tenants_interleaved_2min(processes: Processes, world: World, figures: Figures) -> None:
    interleave(processes, figures, 120, "tenants.interleaved_2min")
