"""The task-run checks of a binding (SPEC §8, R-CTX-3, R-EVID-3): which task fields each purpose names,
the task and its current run with the lease held, the pinned report revision. Reads only; the writes are
in ``contexts.services``. (A bound context's run is re-checked on every call by
``contexts.selectors.check_context``, and by the evidence claim and save in SQL:
``evidence.services._run_check``.)
"""

from __future__ import annotations

from datetime import datetime

from contexts import access
from contexts.errors import InvalidParameter, NotFound, RunNotCurrent
from contexts.models import ContextPurpose, ExecutionRequest, Task, TaskReport, TaskRun


def pinned_revision(task: Task, report_revision: int | None) -> int | None:
    """The report revision a task binding pins: the one asked for, which must be a revision of the bound
    task (of another task, or none at all, is "not found" — the field is named), else the newest."""
    revisions = TaskReport.objects.filter(task=task)
    if report_revision is None:
        return revisions.order_by("-revision").values_list("revision", flat=True).first()
    if not revisions.filter(revision=report_revision).exists():
        raise NotFound("No such report revision of this task.", details={"field": "report_revision"})
    return report_revision


def check_purpose_fields(
    *,
    purpose: str,
    task_id: int | None,
    run_id: int | None,
    execution_request_id: str | None,
    parent_session_id: str | None,
    report_revision: int | None = None,
) -> None:
    """Each purpose names exactly the task fields it needs; anything else is a client error.
    ``report_revision`` is optional for both task purposes and refused for ordinary chat."""
    given = {
        "task_id": task_id is not None,
        "run_id": run_id is not None,
        "execution_request_id": bool(execution_request_id),
        "parent_session_id": bool(parent_session_id),
        "report_revision": report_revision is not None,
    }
    required: set[str]
    allowed: set[str]
    if purpose == ContextPurpose.ORDINARY_CHAT:
        required, allowed = set(), set()
    elif purpose == ContextPurpose.TASK_EXECUTION:
        required = {"task_id", "run_id", "execution_request_id"}
        allowed = required | {"report_revision"}
    else:
        required = {"task_id", "parent_session_id"}
        allowed = required | {"run_id", "report_revision"}
    missing = sorted(f for f in required if not given[f])
    unexpected = sorted(f for f, present in given.items() if present and f not in allowed)
    if missing or unexpected:
        raise InvalidParameter(
            f"Purpose {purpose} needs exactly: {', '.join(sorted(required)) or 'no task fields'}.",
            details={"missing": missing, "unexpected": unexpected},
        )


def bind_task(
    *,
    project_id: int,
    principal_id: int,
    purpose: str,
    session_id: str,
    task_id: int | None,
    run_id: int | None,
    execution_request_id: str | None,
    parent_session_id: str,
    now: datetime,
) -> tuple[Task, TaskRun, ExecutionRequest | None]:
    """Resolve and check the task, its current run, the lease and the execution request, every lookup
    scoped by the project (and task) so an id from another project is "not found". An investigation
    belongs to its runs' owner (``contexts.access.owns_run``): a principal that owns no run of the task
    gets the same ``NotFound`` as for a task that does not exist, before any other check can tell the
    two apart; a named run it does not own is "not found" too."""
    task = Task.objects.filter(pk=task_id, project_id=project_id).first() if task_id is not None else None
    owned = (
        TaskRun.objects.filter(task=task, owner_id=principal_id).values_list("pk", flat=True)
        if task is not None
        else []
    )
    owned_ids = frozenset(owned)
    if task is None or not owned_ids:
        raise access.task_not_found()
    current = TaskRun.objects.filter(task=task, superseded_at__isnull=True).first()
    if run_id is not None and run_id not in owned_ids:
        raise access.task_not_found()
    if run_id is not None and (current is None or run_id != current.pk):
        raise RunNotCurrent("The run is not the task's current run.")
    if current is None:
        raise RunNotCurrent("The task has no current run.")
    if not access.owns_run(run_owner_id=current.owner_id, principal_id=principal_id):
        raise RunNotCurrent("The task's current run belongs to another principal.")
    lease_session = session_id if purpose == ContextPurpose.TASK_EXECUTION else parent_session_id
    if not _lease_held(current, lease_session, now):
        raise RunNotCurrent("The run's lease is not held by this session.")
    execution_request: ExecutionRequest | None = None
    if purpose == ContextPurpose.TASK_EXECUTION:
        execution_request = ExecutionRequest.objects.filter(request_id=execution_request_id, run=current).first()
        if execution_request is None:
            raise NotFound("No such execution request for this run.")
    return task, current, execution_request


def _lease_held(run: TaskRun, session: str, now: datetime) -> bool:
    return (
        bool(session)
        and run.lease_holder == session
        and run.lease_expires_at is not None
        and (run.lease_expires_at > now)
    )
