"""Running an accepted analysis (the job runner's function for every analysis kind) and the run's mirror
of its job's state.

A run computes on a copy of the model version it was submitted on (a re-import meanwhile changes
nothing), checks that its grant still holds, and writes its results, its series (COPY) and its cost in
one transaction with its ``succeeded`` — so a cancelled, failed or killed run has written nothing.
EPANET's refusal ends it ``failed`` with EPANET's code (``EPANET_110``) and a sentence saying what to try.
"""

from __future__ import annotations

import resource
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from analyses import audit
from analyses.kinds import kinds
from analyses.network import fresh, shared
from analyses.storage import kept_elements
from contexts.errors import InvalidParameter
from contexts.models import Membership, Permission, Project
from queries.errors import CapabilityGap
from queries.importer.copy import copy_lines
from queries.importer.epanet import (
    LINK_SERIES_COLUMNS,
    NODE_SERIES_COLUMNS,
    link_series_lines,
    node_series_lines,
    with_leak_column,
)
from queries.jobrunner.runner import JobCancelled, JobContext, JobFailed
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun, IsolationValve, Job
from queries.models.jobs import JobStatus
from queries.runs.engine import EngineFailure, EngineStopped, stopping

#: EPANET's "insufficient memory": under the job's memory limit, the run's MEMORY_LIMIT.
EPANET_OUT_OF_MEMORY = 101
#: What to try, by EPANET error code (EPANET 2.2's manual, "Error messages").
ENGINE_ADVICE = {
    110: "EPANET could not solve the hydraulic equations: a demand may be cut off from every source; "
    "try the pressure-driven demand model (PDD) or fewer changes",
    200: "EPANET found errors in the model input",
    223: "the network has too few nodes for EPANET",
    233: "a node is not connected to any link",
}


def mirror_state(job: Job, status: str) -> None:
    """The run follows its job (called by the runner in the job's own transaction); ``progress`` is the
    job's progress write, not a change of state."""
    fields: dict[str, Any] = {"progress": job.progress, "status_message": job.status_message}
    if status != "progress":
        fields["status"] = status
        if status == JobStatus.RUNNING:
            fields["started_at"] = job.started_at
        if job.finished_at is not None:
            fields["finished_at"] = job.finished_at
        if status in (JobStatus.FAILED, JobStatus.CANCELLED):
            fields["error_code"] = job.error_code or ("CANCELLED" if status == JobStatus.CANCELLED else "FAILED")
            fields["error_message"] = job.message[:500]
    AnalysisRun.objects.filter(job_id=job.pk).update(**fields)
    if status == "progress":
        return
    action = {
        str(JobStatus.RUNNING): "analysis_started",
        JobStatus.SUCCEEDED: "analysis_succeeded",
        JobStatus.FAILED: "analysis_failed",
        JobStatus.CANCELLED: "analysis_cancelled",
    }.get(status)
    if action is not None:
        extra: dict[str, Any] = {"error_code": job.error_code} if job.error_code else {}
        audit.record(
            action,
            project_id=job.project_id,
            grant=job.detail.get("grant"),
            actor=job.started_by,
            kind=job.kind,
            run_id=job.detail.get("run_id", ""),
            **extra,
        )


def _grant_holds(grant: dict[str, Any], project_id: int) -> bool:
    principal = grant.get("principal_id")
    if principal is None:
        return True  # an operator's command: no membership to revoke
    return Membership.objects.filter(
        principal_id=principal,
        project_id=project_id,
        revoked_at=None,
        permissions__contains=[Permission.SIMULATION_RUN.value],
    ).exists()


def run_analysis_job(ctx: JobContext) -> None:
    """The job runner's function for every analysis kind."""
    job = ctx.job
    run = AnalysisRun.objects.select_related("model_version").get(job_id=job.pk)
    project = Project.objects.get(pk=job.project_id)
    spec = kinds()[job.kind]
    si: dict[str, Any] = job.detail["si"]
    unit_system = job.detail.get("unit_system", project.unit_system)
    cpu0, wall0 = time.process_time(), time.monotonic()
    version = run.model_version
    assert version is not None  # a submitted run is always pinned
    ctx.progress(0.02, f"Reading model version {version.version}.")
    wn = fresh(version)
    valves = None
    if job.kind == "valve_isolation":
        from queries.runs.segments import valve_layer

        try:
            layer = valve_layer(project)
        except CapabilityGap as exc:  # removed since the submission
            raise JobFailed(exc.code, f"{exc.message} Nothing was written.") from None
        valves = list(
            IsolationValve.objects.filter(layer=layer).order_by("pk").values_list("source_fid", "link_id", "node_id")
        )
    ctx.stop_if_asked()

    def progress(fraction: float, message: str) -> None:
        ctx.progress(0.05 + 0.85 * fraction, message)
        ctx.stop_if_asked()

    try:
        with stopping(ctx.should_stop):  # asked between two of EPANET's time steps: a cancel stops a solve
            outcome = spec.compute(wn, si, project=project, progress=progress, unit_system=unit_system, valves=valves)
    except EngineStopped:
        raise JobCancelled("Cancelled while EPANET ran; nothing was written.") from None
    except EngineFailure as exc:
        if exc.code == EPANET_OUT_OF_MEMORY:  # EPANET's malloc failed under the job's memory limit
            raise MemoryError from None
        advice = ENGINE_ADVICE.get(exc.code or -1, "EPANET refused the scenario; try fewer changes")
        raise JobFailed(
            exc.error_code,
            f"{exc}: {advice}. Nothing was written.",
        ) from None
    except InvalidParameter as exc:
        raise JobFailed(exc.code, f"{exc.message} Nothing was written.") from None
    ctx.stop_if_asked()
    if not _grant_holds(job.detail.get("grant", {}), project.pk):
        raise JobFailed(
            "PERMISSION_REVOKED",
            "The submitter's simulation.run permission was revoked before the "
            "run wrote its results; nothing was written.",
        )
    ctx.progress(0.92, "Writing results.")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cost = {
        "cpu_seconds": round(time.process_time() - cpu0, 4),
        "wall_seconds": round(time.monotonic() - wall0, 4),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }
    with transaction.atomic():
        rows = write_outcome(run, outcome, shared(version), si)
        cost["series_rows"] = rows
        AnalysisRun.objects.filter(pk=run.pk).update(summary=outcome.summary, cost=cost)
        ctx.succeed(rows=rows, detail={**job.detail, "cost": cost}, message="Done.")


def write_outcome(run: AnalysisRun, outcome: Any, wn: Any, si: dict[str, Any]) -> int:
    """Write ``outcome``'s results and its series (COPY) for ``run``; the series rows written. The caller
    holds the transaction (a job: with its success; the demo seeder: its own)."""
    AnalysisResult.objects.bulk_create(
        AnalysisResult(
            run=run, sequence=i, result_type=row.result_type, payload=row.payload, element_refs=row.element_refs
        )
        for i, row in enumerate(outcome.results, start=1)
    )
    return _write_series(run, outcome, wn, si)


def _write_series(run: AnalysisRun, outcome: Any, wn: Any, si: dict[str, Any]) -> int:
    results = outcome.series
    if results is None:
        return 0
    # The rule the submission estimated by (``analyses.storage``).
    keep = kept_elements(wn, si, kinds()[run.kind].window_minutes(si))
    if keep is None:
        return 0
    nodes, links = keep
    start: datetime = outcome.start
    node_lines = node_series_lines(results, wn, start=start, head=(run.pk,), names=nodes)
    leak_node, leak = outcome.leak if outcome.leak is not None else (None, None)
    if leak_node is not None and leak_node not in wn.node_name_list and si.get("pipe_id") in wn.link_name_list:
        # The burst point is a node of the split pipe, not of the model: its flow is stored at the
        # pipe's end nearer to it (the ``leak`` result names the point itself).
        pipe = wn.get_link(si["pipe_id"])
        leak_node = pipe.start_node_name if float(si.get("position", 0.5)) < 0.5 else pipe.end_node_name
    by_time = (
        {} if leak is None else {(start + timedelta(seconds=int(t))).isoformat(): float(v) for t, v in leak.items()}
    )
    rows = copy_lines(
        AnalysisNodeSeries._meta.db_table,
        ["run_id", *NODE_SERIES_COLUMNS, "leak_demand"],
        with_leak_column(node_lines, leak_node, by_time),
    )
    rows += copy_lines(
        AnalysisLinkSeries._meta.db_table,
        ["run_id", *LINK_SERIES_COLUMNS],
        link_series_lines(results, wn, start=start, head=(run.pk,), names=links),
    )
    return rows
