"""Onboarding a utility (SPEC §10 R-OPS "Onboarding"): projects, principals and their memberships.

One function per state change (STYLE "writes"): each is atomic and writes its ``AccessEvent`` audit row in
the same transaction. The manage.py commands (``project_create``, ``membership_grant``,
``membership_revoke``) and the admin actions call these functions; nothing edits these rows directly.

A membership names a principal by ``(issuer, subject)`` — the identity the OpenID provider will put in the
engineer's tokens — so an engineer can be granted access before their first sign-in. Revoking a
membership stops the principal's contexts on their next call (``resolve_context`` re-reads the
membership every call); granting again re-activates it with the new permission codes.
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Callable, Sequence

from django.db import IntegrityError, transaction
from django.utils import timezone

from contexts.errors import InvalidParameter, NotFound
from contexts.models import (
    AccessEvent,
    Membership,
    Permission,
    Principal,
    Project,
    ProjectCompute,
    QueryContext,
    UnitSystem,
)
from contexts.services import MAX_REVOKE_BATCH, Actor, context_revoke, contexts_revoke_for_principal

KNOWN_PERMISSIONS = frozenset(Permission.values)


def _permission_codes(permissions: Sequence[str]) -> list[str]:
    codes = sorted(set(permissions))
    unknown = [code for code in codes if code not in KNOWN_PERMISSIONS]
    if unknown:
        raise InvalidParameter(
            f"Unknown permission codes: {', '.join(unknown)}; known: {', '.join(sorted(KNOWN_PERMISSIONS))}."
        )
    if not codes:
        raise InvalidParameter("A membership needs at least one permission code (revoke it instead).")
    return codes


def _audit(
    action: str, *, actor: Actor, project: Project, principal: Principal | None = None, **details: object
) -> None:
    AccessEvent.objects.create(
        action=action,
        actor=actor.label,
        project_id=project.pk,
        principal_id=principal.pk if principal else None,
        details=details,
    )


def check_timezone(name: str) -> str:
    """An IANA time zone name as the system's tz database knows it (``Asia/Shanghai``, ``UTC``)."""
    if name not in _iana_zones():
        raise InvalidParameter(f"Unknown time zone {name!r}: give an IANA name such as Asia/Shanghai or UTC.")
    return name


@functools.cache
def _iana_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def check_unit_system(value: str) -> str:
    if value not in UnitSystem.values:
        raise InvalidParameter(f"Unknown unit system {value!r}: one of {', '.join(UnitSystem.values)}.")
    return value


@transaction.atomic
def project_create(
    *, slug: str, name: str, actor: Actor, timezone_name: str = "UTC", unit_system: str = UnitSystem.SI
) -> Project:
    """Create an empty project (its network comes from ``import_network``) in an IANA time zone and a
    unit system. A taken slug, an unknown zone or unit system is refused."""
    check_timezone(timezone_name)
    check_unit_system(unit_system)
    try:
        with transaction.atomic():
            project = Project.objects.create(
                slug=slug, name=name or slug, timezone=timezone_name, unit_system=unit_system
            )
    except IntegrityError:
        raise InvalidParameter(f"A project with the slug {slug!r} exists already.") from None
    _audit(
        AccessEvent.Action.PROJECT_CREATED,
        actor=actor,
        project=project,
        slug=slug,
        name=project.name,
        timezone=timezone_name,
        unit_system=unit_system,
    )
    return project


@transaction.atomic
def project_set_unit_system(*, slug: str, unit_system: str, actor: Actor) -> Project:
    """Change the units a project's results are returned in (stored values stay SI). Audited with before
    and after; setting the current system again changes nothing and writes no audit row."""
    check_unit_system(unit_system)
    project = Project.objects.select_for_update().filter(slug=slug).first()
    if project is None:
        raise NotFound(f"No project {slug!r}.")
    before = project.unit_system
    if before == unit_system:
        return project
    project.unit_system = unit_system
    project.save(update_fields=["unit_system"])
    _audit(AccessEvent.Action.PROJECT_UNITS_CHANGED, actor=actor, project=project, before=before, after=unit_system)
    return project


#: What project_compute accepts (issue 42 items 3 and 8): a day's CPU seconds, runs at once, one run's
#: seconds, the series rows of all runs, the days a finished run is kept.
COMPUTE_BOUNDS = {"cpu_seconds_per_day": (1, 10_000_000), "max_concurrent": (1, 64), "max_run_seconds": (1, 86_400),
                  "max_series_rows": (0, 2_000_000_000), "retention_days": (1, 3650)}  # fmt: skip
COMPUTE_FIELDS = ("enabled", *COMPUTE_BOUNDS)


def compute_of(project: Project) -> dict[str, object]:
    """The project's analyses switch and limits as they stand (off, with no limits, before any change)."""
    row = ProjectCompute.objects.filter(project=project).first() or ProjectCompute(project=project)
    return {name: getattr(row, name) for name in COMPUTE_FIELDS}


@transaction.atomic
def project_compute(
    *,
    slug: str,
    actor: Actor,
    enabled: bool | None = None,
    cpu_seconds_per_day: int | None = None,
    max_concurrent: int | None = None,
    max_run_seconds: int | None = None,
    max_series_rows: int | None = None,
    retention_days: int | None = None,
) -> dict[str, object]:
    """Turn a project's analyses on or off and set their limits (what is not given stays): CPU, concurrency
    and time (item 3), the stored-series cap and the retention of finished runs (item 8). Enabling needs
    a day's CPU seconds and a number of concurrent runs (given now or before). Audited with before and
    after; a call that changes nothing writes no audit row. Returns the state after."""
    project = Project.objects.select_for_update().filter(slug=slug).first()
    if project is None:
        raise NotFound(f"No project {slug!r}.")
    given = {"cpu_seconds_per_day": cpu_seconds_per_day, "max_concurrent": max_concurrent,
             "max_run_seconds": max_run_seconds, "max_series_rows": max_series_rows,
             "retention_days": retention_days}  # fmt: skip
    for name, value in given.items():
        low, high = COMPUTE_BOUNDS[name]
        if value is not None and not low <= value <= high:
            flag = "--" + name.replace("_", "-")
            raise InvalidParameter(f"{flag} must be from {low} to {high}, not {value}.", details={"field": name})
    row, _ = ProjectCompute.objects.get_or_create(project=project)
    before = {name: getattr(row, name) for name in COMPUTE_FIELDS}
    for name, value in given.items():
        if value is not None:
            setattr(row, name, value)
    if enabled is not None:
        row.enabled = enabled
    if row.enabled and (row.cpu_seconds_per_day < 1 or row.max_concurrent < 1):
        raise InvalidParameter(
            f"Enabling analyses for {slug!r} needs --cpu-seconds-per-day and --max-concurrent (at least 1 each)."
        )
    after = {name: getattr(row, name) for name in COMPUTE_FIELDS}
    if after != before:
        row.save()
        _audit(AccessEvent.Action.PROJECT_COMPUTE_CHANGED, actor=actor, project=project, before=before, after=after)
    return after


def _project(slug: str) -> Project:
    try:
        return Project.objects.get(slug=slug)
    except Project.DoesNotExist:
        raise NotFound(f"No project {slug!r}.") from None


@transaction.atomic
def membership_grant(
    *,
    project_slug: str,
    issuer: str,
    subject: str,
    permissions: Sequence[str],
    actor: Actor,
    display_name: str = "",
    is_service: bool = False,
) -> Membership:
    """Grant ``permissions`` on a project to the principal ``(issuer, subject)``, registering the principal
    if it has never signed in. An existing membership gets exactly the new codes (a change, audited with
    before and after); a revoked one is re-activated."""
    if not issuer or not subject:
        raise InvalidParameter("A principal is named by its token issuer and subject (sub).")
    codes = _permission_codes(permissions)
    project = _project(project_slug)
    principal, created = Principal.objects.get_or_create(
        issuer=issuer, subject=subject, defaults={"display_name": display_name, "is_service": is_service}
    )
    if created:
        _audit(AccessEvent.Action.PRINCIPAL_REGISTERED, actor=actor, project=project, principal=principal)
    membership = Membership.objects.select_for_update().filter(principal=principal, project=project).first()
    if membership is None:
        membership = Membership.objects.create(principal=principal, project=project, permissions=codes)
        _audit(AccessEvent.Action.MEMBERSHIP_GRANTED, actor=actor, project=project, principal=principal, after=codes)
        return membership
    before = sorted(membership.permissions)
    was_revoked = membership.revoked_at is not None
    membership.permissions = codes
    membership.revoked_at = None
    membership.save(update_fields=["permissions", "revoked_at"])
    _audit(
        AccessEvent.Action.MEMBERSHIP_GRANTED if was_revoked else AccessEvent.Action.MEMBERSHIP_CHANGED,
        actor=actor,
        project=project,
        principal=principal,
        before=[] if was_revoked else before,
        after=codes,
    )
    return membership


@transaction.atomic
def membership_revoke(*, project_slug: str, issuer: str, subject: str, actor: Actor, reason: str) -> Membership:
    """Revoke a principal's membership of a project, and in the same transaction every live context
    that principal holds on the project (issue 17 item 3): a handle never outlives the membership it was
    bound under, so granting the membership again later does not bring an old handle back."""
    if not reason.strip():
        raise InvalidParameter("Revoking a membership needs a reason (it is kept in the audit trail).")
    project = _project(project_slug)
    membership = (
        Membership.objects.select_for_update()
        .select_related("principal")
        .filter(project=project, principal__issuer=issuer, principal__subject=subject, revoked_at__isnull=True)
        .first()
    )
    if membership is None:
        raise NotFound("That principal has no active membership in this project.")
    membership.revoked_at = timezone.now()
    membership.save(update_fields=["revoked_at"])
    contexts_revoke_for_principal(
        project_id=project.pk,
        principal_id=membership.principal_id,
        actor=actor,
        reason=f"membership revoked: {reason.strip()}",
        now=membership.revoked_at,
    )
    _audit(
        AccessEvent.Action.MEMBERSHIP_REVOKED,
        actor=actor,
        project=project,
        principal=membership.principal,
        before=sorted(membership.permissions),
        reason=reason[:500],
    )
    return membership


#: What keeps a project from being deleted unless the operator includes it: name → count of rows for a
#: project id. Registered by the app that owns the rows (``evidence`` registers its snapshots in its
#: ``AppConfig.ready``), so this lower layer never imports a higher one.
DELETE_GUARDS: dict[str, Callable[[int], int]] = {}


def register_delete_guard(name: str, count: Callable[[int], int]) -> None:
    DELETE_GUARDS[name] = count


@transaction.atomic
def project_delete(*, slug: str, actor: Actor, reason: str, including_evidence: bool = False) -> dict[str, int]:
    """Delete a project and everything that belongs to it (network, baseline, SCADA, GIS, tasks, …).

    Refused while it holds evidence snapshots (what investigations saw) unless ``including_evidence``.
    Its contexts are revoked first through ``context_revoke`` (each revocation audited as usual), then
    the deletion is audited (``AccessEvent`` rows keep the project id, so the trail outlives the project)
    and the rows are deleted in the same transaction. Returns the counts the audit row records."""
    if not reason.strip():
        raise InvalidParameter("Deleting a project needs a reason (it is kept in the audit trail).")
    project = Project.objects.select_for_update().filter(slug=slug).first()
    if project is None:
        raise NotFound(f"No project {slug!r}.")
    guarded = {name: count(project.pk) for name, count in DELETE_GUARDS.items()}
    held = {name: n for name, n in guarded.items() if n}
    if held and not including_evidence:
        listed = ", ".join(f"{n} {name}" for name, n in held.items())
        raise InvalidParameter(
            f"Project {slug!r} holds {listed}: delete it with --including-evidence (admin: "
            f"'including evidence') if that record may go too."
        )
    active = list(
        QueryContext.objects.filter(project_id=project.pk, revoked_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    revoked = 0
    for start in range(0, len(active), MAX_REVOKE_BATCH):
        revoked += len(
            context_revoke(context_ids=active[start : start + MAX_REVOKE_BATCH], actor=actor, reason="project deleted")
        )
    counts = {"contexts_revoked": revoked, **guarded}
    _audit(
        AccessEvent.Action.PROJECT_DELETED,
        actor=actor,
        project=project,
        principal=None,
        slug=slug,
        reason=reason[:500],
        **counts,
    )
    Project.objects.filter(pk=project.pk).delete()
    return counts
