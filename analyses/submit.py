"""Submitting and cancelling analysis runs (issue 42 items 3–5): every check is made before anything is
queued, in one transaction that locks the project's compute row so concurrent submissions count right.

A submission: analyses on for the project (``ComputeOff``) → the pinned model version (the current one)
→ the kind's validation in the project's units (``InvalidParameter`` naming the field; nothing queued) →
the canonical inputs' SHA-256 → the same question already asked (idempotency: the earlier run back) →
the estimate against the per-run cap and what is left of the project's day (``CostLimit``) → at most
``PER_PRINCIPAL`` runs queued or running per principal × project and the project's ``max_concurrent``
(``RateLimited``) → the run and its job, queued after commit. The grant (who, which permissions) is fixed
here, in the job; the run re-checks only that it was not revoked before it writes.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from analyses import audit
from analyses.errors import ComputeOff, CostLimit, StorageLimit
from analyses.kinds import kinds
from analyses.network import shared
from analyses.storage import WRITE_S_PER_ROW, check_storage
from contexts.errors import InvalidParameter, NotFound, RateLimited
from contexts.models import Project, ProjectCompute
from queries.errors import CapabilityGap
from queries.jobrunner.runner import NotCancellable, enqueue, request_cancel
from queries.models import AnalysisRun, Job, JobStatus, NetworkSource
from queries.models.baseline import current_model_version
from queries.runs.inputs import input_sha256

#: Runs queued or running at once per principal × project (issue 42 item 4).
PER_PRINCIPAL = 2
#: A succeeded run this recent answers the same question again (issue 42 item 5).
SAME_RUN_WINDOW = timedelta(minutes=10)
ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
#: Soft limit = (the estimate's CPU + writing its series) × this, at least ``MIN_LIMIT_S``; the hard limit
#: is ``max_run_seconds``.
LIMIT_FACTOR = 3.0
MIN_LIMIT_S = 30


def soft_limit_s(cpu_seconds: float, series_rows: int, hard_limit_s: int) -> int:
    """A run's soft time limit: its estimated CPU and the writing of its series rows (a run whose limit
    left out the COPY of two million rows was stopped inside it), times ``LIMIT_FACTOR``, within
    ``MIN_LIMIT_S`` and 5 s under the hard limit."""
    needed = cpu_seconds + series_rows * WRITE_S_PER_ROW
    return min(max(math.ceil(needed * LIMIT_FACTOR), MIN_LIMIT_S), max(hard_limit_s - 5, 1))


@dataclass(frozen=True)
class Submitter:
    """Who submits, fixed at acceptance: the principal (None for an operator's command), the permissions
    held then, the context it came through (an investigation's task run and execution request) and the
    actor named in the audit log."""

    actor: str
    principal_id: int | None = None
    permissions: frozenset[str] = frozenset()
    purpose: str = ""
    context_id: int | None = None
    task_id: int | None = None
    task_run_id: int | None = None
    execution_request_id: int | None = None

    def grant(self) -> dict[str, Any]:
        return {
            "principal_id": self.principal_id,
            "permissions": sorted(self.permissions),
            "purpose": self.purpose,
            "context_id": self.context_id,
            "task_id": self.task_id,
            "task_run_id": self.task_run_id,
            "execution_request_id": self.execution_request_id,
        }


@dataclass(frozen=True)
class Submission:
    run: AnalysisRun
    job: Job
    created: bool  # False: an earlier run of the same question came back

    def answer(self) -> dict[str, Any]:
        """The job answer of every surface: ``{run_id, status, estimate, poll_after_ms, created}``."""
        cpu = float(self.run.estimate.get("cpu_seconds", 1.0))
        poll = int(min(max(cpu * 250, 250), 5000))
        return {
            "run_id": self.run.run_id,
            "kind": self.run.kind,
            "status": self.job.status,
            "estimate": self.run.estimate,
            "poll_after_ms": poll,
            "created": self.created,
        }


def _refuse(project: Project, who: Submitter, kind: str, exc: Exception) -> None:
    code = getattr(exc, "code", "INVALID")
    audit.record("analysis_refused", project_id=project.pk, who=who, kind=kind, reason=code)


def submit(
    *, project: Project, kind: str, params: dict[str, Any], who: Submitter, request_key: str = "", send: bool = True
) -> Submission:
    """Accept (or refuse, raising) one run of ``kind`` with ``params`` in the project's units; ``send=False``
    records it without sending it to a worker (``run_analysis --sync`` runs it in its own process)."""
    spec = kinds().get(kind)
    if spec is None:
        raise InvalidParameter(f"Unknown analysis kind {kind!r}.", details={"field": "kind", "known": sorted(kinds())})
    params = dict(params)
    request_key = str(params.pop("request_key", "") or request_key)[:100]
    try:
        with transaction.atomic():
            return _submit(project, spec, params, who, request_key, send)
    except (InvalidParameter, CostLimit, StorageLimit, RateLimited, ComputeOff, CapabilityGap) as exc:
        _refuse(project, who, kind, exc)
        raise


def _submit(
    project: Project, spec: Any, params: dict[str, Any], who: Submitter, request_key: str, send: bool
) -> Submission:
    # The engine's stack (WNTR, pandas, SciPy) is loaded by a process's first submission, not at its start.
    from queries.runs.cost import engine_version, estimate
    from queries.runs.segments import valve_layer

    compute = ProjectCompute.objects.select_for_update().filter(project=project).first()
    if compute is None or not compute.enabled:
        raise ComputeOff(
            f"Analyses are off for project {project.slug}; an operator turns them on with "
            f"`manage.py project_compute {project.slug} --enable --cpu-seconds-per-day N --max-concurrent N`."
        )
    version = current_model_version(project.pk)
    if version is None:
        raise CapabilityGap(f"Project {project.slug} has no imported network: run import_network first.")
    if spec.name == "valve_isolation":
        valve_layer(project)  # no valve layer: CAPABILITY_NOT_AVAILABLE naming it, never invented valves
    wn = shared(version)
    si = spec.validate(params, wn=wn, unit_system=project.unit_system, project=project)
    engine = engine_version()
    digest = input_sha256(kind=spec.name, parameters=si, model_sha256=version.sha256, engine=engine)
    earlier = _same_question(project, spec.name, who, digest, version, request_key)
    if earlier is not None:
        return Submission(earlier, earlier.job, created=False)  # type: ignore[arg-type]
    cost = estimate(spec.shape(si, wn))
    _check_cost(project, compute, cost.cpu_seconds)
    series_rows = check_storage(project, compute, spec, si, wn)  # the project's series cap (item 8)
    _check_concurrency(project, compute, who)
    now = datetime.now(UTC)
    run_id = f"{spec.name.replace('_', '-')}-{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    job = Job.objects.create(
        project=project,
        kind=spec.name,
        subject=run_id,
        status=JobStatus.QUEUED,
        started_by=who.actor[:200],
        detail={"run_id": run_id, "si": si, "grant": who.grant(), "unit_system": project.unit_system},
    )
    run = AnalysisRun.objects.create(
        project=project,
        run_id=run_id,
        kind=spec.name,
        status=JobStatus.QUEUED,
        title=spec.title,
        parameters={k: v for k, v in params.items() if k != "request_key"},
        created_at=now,
        model_version=version,
        engine=engine,
        input_sha256=digest,
        job=job,
        principal_id=who.principal_id,
        request_key=request_key,
        estimate={
            **cost.as_dict(),
            "series_rows": series_rows,
            "write_seconds": round(series_rows * WRITE_S_PER_ROW, 2),
        },  # fmt: skip
    )
    hard = int(compute.max_run_seconds)
    soft = soft_limit_s(cost.cpu_seconds, series_rows, hard)
    if send:
        enqueue(job, soft_limit_s=soft, hard_limit_s=hard)
    else:
        Job.objects.filter(pk=job.pk).update(time_limit_s=hard)
    audit.record(
        "analysis_submitted",
        project_id=project.pk,
        who=who,
        kind=spec.name,
        run_id=run_id,
        input_sha256=digest,
        estimate_cpu_s=cost.cpu_seconds,
    )
    return Submission(run, job, created=True)


def _same_question(
    project: Project, kind: str, who: Submitter, digest: str, version: NetworkSource, request_key: str
) -> AnalysisRun | None:
    runs = AnalysisRun.objects.select_related("job").filter(project=project)
    runs = runs.filter(principal=None) if who.principal_id is None else runs.filter(principal_id=who.principal_id)
    if request_key:
        keyed = runs.filter(request_key=request_key).first()
        if keyed is not None:
            if keyed.input_sha256 != digest or keyed.kind != kind:
                raise InvalidParameter(
                    "request_key was used before for another question; use a new key for new inputs.",
                    details={"field": "request_key"},
                )
            return keyed
    recent = Q(status=JobStatus.SUCCEEDED, finished_at__gte=datetime.now(UTC) - SAME_RUN_WINDOW)
    return (
        runs.filter(kind=kind, input_sha256=digest, model_version=version)
        .filter(Q(status__in=ACTIVE) | recent)
        .order_by("-created_at")
        .first()
    )


def _day_start(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def spent_today(project: Project) -> float:
    """CPU seconds of the project's day: what finished runs cost, and what queued or running ones are
    estimated to (so two submissions cannot both take the last of the day)."""
    since = _day_start(datetime.now(UTC))
    runs = AnalysisRun.objects.filter(project=project, created_at__gte=since).exclude(job=None)
    total = 0.0
    for status, est, cost in runs.values_list("status", "estimate", "cost"):
        if status in ACTIVE:
            total += float(est.get("cpu_seconds", 0.0))
        else:
            total += float(cost.get("cpu_seconds", 0.0))
    return total


def _check_cost(project: Project, compute: ProjectCompute, cpu_seconds: float) -> None:
    left = compute.cpu_seconds_per_day - spent_today(project)
    details: dict[str, object] = {
        "estimate_cpu_seconds": cpu_seconds,
        "max_run_seconds": compute.max_run_seconds,
        "cpu_seconds_left_today": round(max(left, 0.0), 3),
    }
    if cpu_seconds > compute.max_run_seconds:
        raise CostLimit(
            f"The run is estimated at {cpu_seconds:.1f} CPU seconds, over the per-run cap of "
            f"{compute.max_run_seconds} s; ask for a shorter window or fewer elements.",
            details=details,
        )
    if cpu_seconds > left:
        raise CostLimit(
            f"The run is estimated at {cpu_seconds:.1f} CPU seconds and project {project.slug} has "
            f"{max(left, 0.0):.1f} left today (of {compute.cpu_seconds_per_day}); it was not queued.",
            details=details,
        )


def _check_concurrency(project: Project, compute: ProjectCompute, who: Submitter) -> None:
    active = AnalysisRun.objects.filter(project=project, status__in=ACTIVE).exclude(job=None)
    if who.principal_id is not None and active.filter(principal_id=who.principal_id).count() >= PER_PRINCIPAL:
        raise RateLimited(
            f"You have {PER_PRINCIPAL} runs queued or running in project {project.slug}; wait for one to end.",
            details={"limit": PER_PRINCIPAL},
            retry_after_s=5,
        )
    if active.count() >= compute.max_concurrent:
        raise RateLimited(
            f"Project {project.slug} has {compute.max_concurrent} runs queued or running, its limit; try shortly.",
            details={"limit": compute.max_concurrent},
            retry_after_s=5,
        )


def cancel(*, project: Project, run_id: str, who: Submitter, operator: bool = False) -> AnalysisRun:
    """Cancel run ``run_id``: only its owner (or an operator) can; anyone else's run answers as not found."""
    run = AnalysisRun.objects.select_related("job").filter(project=project, run_id=run_id).first()
    if run is None or run.job is None or (not operator and run.principal_id != who.principal_id):
        raise NotFound(f"No analysis run {run_id!r} of yours in this project.")
    try:
        request_cancel(run.job, actor=who.actor)
    except NotCancellable as exc:
        raise InvalidParameter(
            f"Run {run_id} is {run.job.status}; only a queued or running run can be cancelled.",
            details={"field": "run_id", "status": run.job.status},
        ) from exc
    audit.record("analysis_cancelled", project_id=project.pk, who=who, kind=run.kind, run_id=run_id, requested=True)
    run.refresh_from_db()
    return run
