"""Django admin for the contexts app (SPEC R-CTX-5).

Every model is browse-only here, for everyone (superusers and the operator group alike): projects,
principals and memberships change only through the audited onboarding services — the "Create a project"
and "Grant or change a membership" pages and the "Revoke selected memberships" action call them
(``contexts.admin_onboarding``) — (SPEC §10 "Admin never
edits these rows directly" — an admin edit could rewrite a principal's issuer/subject and inherit its
memberships with no audit row); tasks, runs, execution requests and report revisions are written by the
host's workflow (report revisions are immutable in the database). Query contexts are listed and
filtered by project, principal, purpose and state; the handle is never shown (only a short prefix of its
hash), and the only change an operator can make is the "Revoke" action, which asks for a reason and
records the acting operator through ``contexts.services.context_revoke``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from contexts import access, admin_onboarding, services
from contexts.errors import ApplicationError
from contexts.models import (
    AccessEvent,
    ContextEvent,
    ExecutionRequest,
    Membership,
    Principal,
    Project,
    ProjectCompute,
    QueryContext,
    Task,
    TaskReport,
    TaskRun,
)


def actors_as_people(labels: list[str]) -> dict[str, str]:
    """How the audit trail shows who did something: each ``Actor`` label (``operator:<username>#<user
    id>``, ``principal:<id>/<client>``, ``system:<job>``, see ``contexts.services.Actor``) as a person —
    name and principal — looked up in two queries for any number of labels. A label whose user or
    principal is gone is shown as recorded."""
    user_ids: dict[str, int] = {}
    principal_ids: dict[str, tuple[int, str]] = {}
    for label in set(labels):
        kind, _, rest = label.partition(":")
        username, _, user_id = rest.rpartition("#")
        principal_id, _, client = rest.partition("/")
        if kind == "operator" and username and user_id.isdigit():
            user_ids[label] = int(user_id)
        elif kind == "principal" and principal_id.isdigit():
            principal_ids[label] = (int(principal_id), client)
    users = get_user_model().objects.in_bulk(list(set(user_ids.values())))
    principals = Principal.objects.in_bulk([pk for pk, _ in principal_ids.values()])
    people = {label: label.removeprefix("system:") + " (system job)" for label in labels if label.startswith("system:")}
    for label, user_pk in user_ids.items():
        user = users.get(user_pk)
        if user is not None:
            name = user.get_full_name() or user.email or "operator"
            people[label] = f"{name} ({user.get_username()}) · operator"
    for label, (principal_pk, client) in principal_ids.items():
        principal = principals.get(principal_pk)
        if principal is not None:
            people[label] = f"{principal} via {client}"
    return {label: people.get(label, label) for label in labels}


class AuditTrailAdmin(admin.ModelAdmin[Any]):
    """Shows the ``actor`` label of each row as a person (``actors_as_people``), for a whole page at once."""

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)  # evaluates (and caches) the page the template then renders
        people = actors_as_people([row.actor for row in rows])
        for row in rows:
            row.actor_person = people[row.actor]
        return changelist

    @admin.display(description="by", ordering="actor")
    def actor_person(self, obj: Any) -> str:
        return getattr(obj, "actor_person", None) or actors_as_people([obj.actor])[obj.actor]


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Browse-only: rows are written by services, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class OnboardingAdmin(ReadOnlyAdmin):
    """Read-only rows plus one onboarding form (``contexts.admin_onboarding``) for operators."""

    change_list_template = "admin/contexts/onboarding_change_list.html"
    onboarding_path = ""
    onboarding_label = ""
    onboarding_view: Any = None

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self._onboarding)
        name = f"{self.model._meta.app_label}_{self.model._meta.model_name}_{self.onboarding_path}"
        return [path(f"{self.onboarding_path}/", view, name=name), *super().get_urls()]

    def _onboarding(self, request: HttpRequest) -> Any:
        if not admin_onboarding.is_operator(request):
            raise PermissionDenied
        return type(self).onboarding_view(self, request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        meta = self.model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_{self.onboarding_path}")
        extra = {
            "onboarding_url": url if admin_onboarding.is_operator(request) else "",
            "onboarding_label": self.onboarding_label,
        }
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def has_onboard_permission(self, request: HttpRequest) -> bool:
        return admin_onboarding.is_operator(request)

    # Operators browse these (read-only) to onboard, like contexts, without per-model permissions.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return admin_onboarding.is_operator(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin_onboarding.is_operator(request)


@admin.register(Project)
class ProjectAdmin(OnboardingAdmin):
    list_display = ["slug", "name", "timezone", "unit_system", "analyses", "created_at"]
    search_fields = ["slug", "name"]
    list_select_related = ["compute"]
    onboarding_path = "create"
    onboarding_label = "Create a project"
    onboarding_view = admin_onboarding.project_create_view
    actions = [admin_onboarding.delete_projects, admin_onboarding.set_compute]

    @admin.display(description="analyses")
    def analyses(self, obj: Project) -> str:
        """Off, or on with its limits (issue 42 item 3)."""
        compute = getattr(obj, "compute", None)
        if compute is None or not compute.enabled:
            return "off"
        return f"on: {compute.cpu_seconds_per_day} CPU s/day, {compute.max_concurrent} at once"


@admin.register(ProjectCompute)
class ProjectComputeAdmin(ReadOnlyAdmin):
    """Each project's analyses switch and limits (set with the Projects action or ``project_compute``)."""

    list_display = ["project", "enabled", "cpu_seconds_per_day", "max_concurrent", "max_run_seconds",
                    "max_series_rows", "retention_days", "updated_at"]  # fmt: skip
    list_filter = ["enabled"]
    list_select_related = ["project"]


@admin.register(Principal)
class PrincipalAdmin(ReadOnlyAdmin):
    list_display = ["subject", "display_name", "issuer", "is_service", "created_at"]
    list_filter = ["is_service", "issuer"]
    search_fields = ["subject", "display_name"]


@admin.register(Membership)
class MembershipAdmin(OnboardingAdmin):
    onboarding_path = "grant"
    onboarding_label = "Grant or change a membership"
    onboarding_view = admin_onboarding.membership_grant_view
    actions = [admin_onboarding.revoke_memberships]
    list_display = ["principal", "project", "permissions", "revoked_at"]
    list_filter = ["project", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["principal__subject", "principal__display_name", "project__slug"]
    list_select_related = ["principal", "project"]


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "project", "status", "created_at"]
    list_filter = ["project", "status"]
    search_fields = ["title"]
    list_select_related = ["project"]


@admin.register(TaskRun)
class TaskRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "task", "sequence", "status", "lease_holder", "lease_expires_at", "superseded_at"]
    list_filter = ["status", ("superseded_at", admin.EmptyFieldListFilter)]
    list_select_related = ["task"]


@admin.register(ExecutionRequest)
class ExecutionRequestAdmin(ReadOnlyAdmin):
    list_display = ["request_id", "run", "created_at"]
    search_fields = ["request_id"]
    list_select_related = ["run"]


@admin.register(TaskReport)
class TaskReportAdmin(ReadOnlyAdmin):
    list_display = ["task", "revision", "created_at"]
    list_select_related = ["task"]


@admin.register(ContextEvent)
class ContextEventAdmin(AuditTrailAdmin, ReadOnlyAdmin):
    list_display = ["at", "action", "context_id", "handle_prefix", "actor_person", "reason"]
    list_filter = ["action"]
    search_fields = ["actor", "^handle_prefix"]
    search_help_text = "Search by the operator's or principal's subject, or by the start of a hash prefix."
    readonly_fields = ["actor_person"]


@admin.register(AccessEvent)
class AccessEventAdmin(AuditTrailAdmin, ReadOnlyAdmin):
    """The onboarding audit trail (``contexts.onboarding``): projects, principals, memberships."""

    list_display = ["created_at", "action", "project_id", "principal_id", "actor_person", "details"]
    list_filter = ["action"]
    search_fields = ["actor"]
    readonly_fields = ["actor_person"]


class ContextStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("active", "active"), ("expired", "expired"), ("revoked", "revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[QueryContext]) -> QuerySet[QueryContext]:
        now = timezone.now()
        # A context whose membership was revoked no longer works (every call re-checks the membership):
        # it counts as revoked even where its own revoked_at was not set.
        stopped = Q(revoked_at__isnull=False) | Q(membership__revoked_at__isnull=False)
        if self.value() == "active":
            return queryset.exclude(stopped).filter(expires_at__gt=now)
        if self.value() == "expired":
            return queryset.exclude(stopped).filter(expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(stopped)
        return queryset


class RevokeForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 60}))


@admin.action(description="Revoke selected contexts", permissions=["revoke"])
def revoke_contexts(modeladmin: QueryContextAdmin, request: HttpRequest, queryset: QuerySet[QueryContext]) -> Any:
    """Ask for a reason (intermediate page), then revoke through the one revocation service."""
    ids = list(queryset.order_by("pk").values_list("pk", flat=True)[: services.MAX_REVOKE_BATCH])
    form = RevokeForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        actor = services.Actor.operator(username=request.user.get_username(), user_id=request.user.pk)
        try:
            revoked = services.context_revoke(context_ids=ids, actor=actor, reason=form.cleaned_data["reason"])
        except ApplicationError as exc:
            modeladmin.message_user(request, exc.message, messages.ERROR)
            return None
        modeladmin.message_user(request, f"Revoked {len(revoked)} context(s).", messages.SUCCESS)
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Revoke contexts",
        "opts": modeladmin.model._meta,
        "form": form,
        "contexts": list(queryset.select_related("principal", "project").order_by("pk")[: services.MAX_REVOKE_BATCH]),
        "selected_ids": ids,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/contexts/querycontext/revoke_confirmation.html", context)


@admin.register(QueryContext)
class QueryContextAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "hash_prefix",
        "principal",
        "project",
        "purpose",
        "state",
        "client_id",
        "run",
        "created_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = [
        ("project", admin.RelatedOnlyFieldListFilter),
        ("principal", admin.RelatedOnlyFieldListFilter),
        "purpose",
        ContextStateFilter,
    ]
    list_select_related = ["principal", "project", "run", "membership"]
    # "^": the start of the handle's hash, as the hash prefix column and the audit trail show it.
    search_fields = ["principal__subject", "principal__display_name", "project__slug", "session_id", "^handle_hash"]
    search_help_text = "Search by principal, project, session id, or the start of the hash prefix."
    # Never the handle_hash as a whole: at most its short prefix (R-CTX-5).
    exclude = ["handle_hash"]
    readonly_fields = [
        "hash_prefix",
        "principal",
        "client_id",
        "project",
        "membership",
        "session_id",
        "purpose",
        "allowed_tools",
        "task",
        "run",
        "execution_request",
        "parent_session_id",
        "created_at",
        "expires_at",
        "revoked_at",
        "revoked_by_person",
        "revoke_reason",
    ]
    actions = [revoke_contexts]
    list_per_page = 100

    @admin.display(description="hash prefix")
    def hash_prefix(self, obj: QueryContext) -> str:
        return obj.handle_prefix

    @admin.display(description="state")
    def state(self, obj: QueryContext) -> str:
        state = obj.state(timezone.now())
        if state != "revoked" and obj.membership.revoked_at is not None:
            return "revoked (membership)"
        return state

    @admin.display(description="revoked by")
    def revoked_by_person(self, obj: QueryContext) -> str:
        return actors_as_people([obj.revoked_by])[obj.revoked_by] if obj.revoked_by else "-"

    # Operators are the staff users (the OIDC admin backend makes only operators staff): they may
    # browse contexts and revoke them without a per-model permission — revoking is always safe.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return access.is_operator(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return access.is_operator(request.user)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return access.is_operator(request.user)
