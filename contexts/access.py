"""Who may use what: the one access decision of the product (SPEC R-AUTH-3, R-TOOL-1, R-CTX-1/4, R-EVID-4).

Every edge asks here and nowhere else:

- **OAuth scopes** — which token scope opens which MCP method (``/mcp``'s bearer layer) and the REST read
  scope (``/api/v1/projects/…``): ``missing_method_scope``, ``REST_READ_SCOPE``.
- **Binding time** (``contexts.services.context_create``, i.e. the binding API): which tools a binding
  gets (catalog ∩ the principal's permissions ∩ the purpose, ``tools_for_binding``), who may bind a task
  purpose (``require_task_client``) and which task runs a principal may bind (``owns_run``: only the run's
  owner — a refusal for anyone else says nothing about whether the task or run exists).
- **Call time** (MCP ``tools/call``, REST, and the sync resolver): the tool is in the binding and every
  permission it needs — its declared ones plus those its arguments add — is held *now*, by the live
  membership re-read on every call (``may_call`` / ``require_call``).
- **Evidence reads** (the task tools, ``resources/list``, ``resources/read``): which snapshots a scope may
  read (``evidence_reach``): the bound task (a reader: its parent run only), and only snapshots whose
  recorded permissions the reader still holds now — a reader never sees more than its principal could
  query directly.

Pure functions on plain values (no I/O, no imports of higher layers), so ``contexts``, ``queries``,
``evidence`` and ``mcp_app`` all call them, and one matrix test (``tests/contexts/test_access.py``)
drives every rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from contexts.errors import InvalidParameter, NotFound, PermissionDenied, ToolNotInContext
from contexts.models import TASK_PURPOSES, ContextPurpose, Permission
from contexts.scope import QueryScope

# --- OAuth scopes (R-AUTH-3) ------------------------------------------------------------------------

SCOPE_CATALOG = "mcp.catalog.read"
SCOPE_QUERY = "mcp.query"
SCOPE_CONTEXT_BIND = "mcp.context.bind"
#: The scope an API-audience token needs to read project data over REST.
REST_READ_SCOPE = "api.read"
#: The scopes that start and cancel analysis runs (issue 42 item 3), besides ``simulation.run``: on MCP
#: (the ``run_*`` tools and ``cancel_analysis_run``) and on REST (the POSTs).
SCOPE_ANALYSIS_RUN = "mcp.analysis.run"
REST_ANALYSIS_SCOPE = "api.analysis.run"

# The scopes that open each class of MCP method (any one suffices; the first is the one a 403 challenge
# names). Methods not named here (unknown methods, notifications) need only a valid token; the SDK
# answers them (-32601, 202).
#
# `mcp.query` also opens server/discover and tools/list: the official SDK client (and most hosts) lists
# the tools before every call to validate results against their outputSchema, and the catalog is the
# same generic, publicly cacheable document for everyone (R-PROTO-5), so hiding it from a caller who may
# call tools protects nothing. `mcp.catalog.read` alone opens only those two methods.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "server/discover": (SCOPE_CATALOG, SCOPE_QUERY),
    "tools/list": (SCOPE_CATALOG, SCOPE_QUERY),
    "tools/call": (SCOPE_QUERY,),
    "resources/list": (SCOPE_QUERY,),
    "resources/read": (SCOPE_QUERY,),
    "resources/templates/list": (SCOPE_QUERY,),
}


def missing_method_scope(scopes: Collection[str], method: str | None) -> str | None:
    """The scope to name in a 403 when none of ``scopes`` opens ``method``; ``None`` when the method is
    open to these scopes."""
    opening = METHOD_SCOPES.get(method or "")
    if opening is None or not frozenset(scopes).isdisjoint(opening):
        return None
    return opening[0]


# --- binding time (R-TOOL-1, R-CTX-1, R-CTX-4) --------------------------------------------------------

# What a task_reader may never get: a reader (a read-only sub-agent of a run) gets query tools and the
# system's evidence append — which is not a tool: evidence is saved by the dispatch path for task
# contexts (R-EVID-1). It never gets report publishing, approvals, device control, shell or delegation.
# None of those tools exist in this server; the rules below make sure that if one is ever added to the
# registry, no reader receives it:
#  1. every permission a reader's tool requires must be a *query* permission (the product's read
#     permission codes) — a publishing/approval/control tool needs some other permission code;
#  2. a tool that requires no permission at all is only given to a reader if it is task-scoped (the
#     bound task's own context and evidence);
#  3. whatever the permissions say, a tool whose name marks one of the forbidden capability classes is
#     never given to a reader.
#: Permissions that start work rather than read data (issue 42 item 3): never a reader's, and implied by
#: no view permission (nor do they imply one). Sensor placement's ``optimization.run`` also gates reading
#: its results, so it stays a query permission.
RUN_PERMISSIONS: frozenset[str] = frozenset({Permission.SIMULATION_RUN.value})
READER_QUERY_PERMISSIONS: frozenset[str] = frozenset(p.value for p in Permission) - RUN_PERMISSIONS
READER_FORBIDDEN_NAME_MARKERS: tuple[str, ...] = (
    "publish",
    "approve",
    "approval",
    "device_control",
    "control_device",
    "set_device",
    "shell",
    "exec_command",
    "delegate",
    "spawn",
)


def tools_for_binding(
    *,
    catalog: Mapping[str, Collection[str]],
    permissions: Collection[str],
    purpose: str,
    task_scoped: Collection[str] = (),
    action_tools: Collection[str] = (),
    scopes: Collection[str] = (),
    approved: Collection[str] = (),
) -> list[str]:
    """The tools one binding may call: catalog ∩ the principal's permissions ∩ the purpose (R-TOOL-1,
    R-CTX-4), sorted by name. ``catalog`` maps tool name → the permission codes the tool requires;
    ``task_scoped`` names tools that only make sense inside a bound task (never given to ordinary chat).

    ``action_tools`` (start or cancel a run) also need the token's ``mcp.analysis.run`` among ``scopes``;
    a ``task_reader`` never gets one, and a ``task_execution`` binding only when the execution request
    approved their permissions (``approved``)."""
    if purpose not in ContextPurpose.values:
        raise InvalidParameter("Unknown purpose.", details={"purpose": purpose})
    held = frozenset(permissions)
    task_only = frozenset(task_scoped)
    actions = frozenset(action_tools)
    tools: list[str] = []
    for name, required in catalog.items():
        needs = frozenset(required)
        if not needs <= held:
            continue
        if name in actions and not may_bind_action(needs, purpose=purpose, scopes=scopes, approved=approved):
            continue
        if purpose == ContextPurpose.ORDINARY_CHAT and name in task_only:
            continue
        if purpose == ContextPurpose.TASK_READER and not _reader_may_use(name, needs, task_only):
            continue
        tools.append(name)
    return sorted(tools)


def may_bind_action(
    needs: Collection[str], *, purpose: str, scopes: Collection[str], approved: Collection[str]
) -> bool:
    """Whether a binding gets one action tool (its permissions already held): the run scope in the token;
    never a reader; an execution's request must have approved what the tool needs."""
    if SCOPE_ANALYSIS_RUN not in scopes or purpose == ContextPurpose.TASK_READER:
        return False
    return purpose != ContextPurpose.TASK_EXECUTION or frozenset(needs) <= frozenset(approved)


def may_act(scopes: Collection[str]) -> bool:
    """Call time: an action tool also needs the run scope in the token presented now (a token without
    it is answered as if the tool did not exist, like any tool outside the binding)."""
    return SCOPE_ANALYSIS_RUN in scopes


def _reader_may_use(name: str, needs: frozenset[str], task_only: frozenset[str]) -> bool:
    """R-CTX-4 for one tool (see the rules at ``READER_QUERY_PERMISSIONS``)."""
    if not needs <= READER_QUERY_PERMISSIONS:
        return False
    if not needs and name not in task_only:
        return False
    lowered = name.lower()
    return not any(marker in lowered for marker in READER_FORBIDDEN_NAME_MARKERS)


def require_task_client(*, purpose: str, client_id: str, host_client: str) -> None:
    """Task purposes are bound only through the configured host client (R-CTX-1)."""
    if purpose in TASK_PURPOSES and client_id != host_client:
        raise PermissionDenied("Only the host client may create task contexts.")


def owns_run(*, run_owner_id: int | None, principal_id: int) -> bool:
    """An investigation run belongs to the principal that runs it (the worker's service identity in the
    seed): only that principal binds ``task_execution`` or ``task_reader`` contexts on it. A run with no
    owner binds for nobody (refuse by default)."""
    return run_owner_id is not None and run_owner_id == principal_id


def task_not_found() -> NotFound:
    """The one refusal for a task or run the principal may not bind — the same whether it exists or not."""
    return NotFound("No such task in this project.")


# --- call time (R-TOOL-1) -----------------------------------------------------------------------------


def may_call(scope: QueryScope, *, tool: str, permissions: Collection[str], bound: bool = True) -> bool:
    """True when every permission in ``permissions`` is held now and — for a context binding (``bound``)
    — ``tool`` is in the binding's tools. An empty binding allows nothing. (The hot path's check: a
    ``False`` is answered as an unknown tool on MCP, R-PROTO-3.)"""
    if bound and tool not in scope.allowed_tools:
        return False
    held = scope.permissions
    return all(p in held for p in permissions)


def require_call(scope: QueryScope, *, tool: str, permissions: Collection[str], bound: bool = True) -> None:
    """``may_call`` as a refusal: ``ToolNotInContext`` for a tool outside the binding (whatever the
    permissions say: a wider membership never widens a binding), else ``PermissionDenied`` naming the
    missing codes."""
    if bound and tool not in scope.allowed_tools:
        raise ToolNotInContext()
    require_permissions(scope, permissions)


def holds_permissions(scope: QueryScope, permissions: Collection[str]) -> bool:
    """True when ``scope`` holds every permission in ``permissions`` now (the arguments' added
    permissions, asked without raising: the edge that sends a statement ahead declines instead)."""
    held = scope.permissions
    return all(p in held for p in permissions)


def require_permissions(scope: QueryScope, permissions: Collection[str]) -> None:
    """The permissions a call's *arguments* add to its tool's (e.g. the history comparison modes read
    simulation data): ``PermissionDenied`` naming the missing codes (a business refusal on every edge,
    not an unknown tool — the caller may use the tool, not this mode of it)."""
    missing = sorted(p for p in permissions if p not in scope.permissions)
    if missing:
        raise PermissionDenied(details={"missing_permissions": missing})


# --- operators (the Django admin) -------------------------------------------------------------------


def is_operator(user: Any) -> bool:
    """True for an operator: an active staff user (the OIDC admin backend makes only operators staff).
    Every admin page and action that operators alone may use asks this."""
    return bool(user.is_active and user.is_staff)


# --- evidence reads (R-EVID-4, R-CTX-4) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvidenceReach:
    """What one scope may read of saved evidence: snapshots of ``task_id`` in ``project_id`` (of
    ``run_id`` only, when set: a reader reads its parent run) whose recorded permissions are all in
    ``permissions`` (the reader's live permissions, sorted: a SQL ``<@`` filter)."""

    project_id: int
    task_id: int
    run_id: int | None
    permissions: list[str]


def evidence_reach(scope: QueryScope) -> EvidenceReach | None:
    """The evidence ``scope`` may read, or ``None`` (ordinary chat and REST read none)."""
    if scope.purpose not in TASK_PURPOSES or scope.task_id is None:
        return None
    return EvidenceReach(
        project_id=scope.project_id,
        task_id=scope.task_id,
        run_id=scope.run_id if scope.purpose == ContextPurpose.TASK_READER else None,
        permissions=sorted(scope.permissions),
    )


def may_read_snapshot(reach: EvidenceReach | None, *, required_permissions: Collection[str]) -> bool:
    """The Python form of the SQL filter (for a snapshot already in hand, e.g. a replayed receipt)."""
    return reach is not None and frozenset(required_permissions) <= frozenset(reach.permissions)
