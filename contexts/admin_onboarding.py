"""Onboarding in Django admin (SPEC §10 R-OPS): operators create projects and grant, change and revoke
memberships through the audited services of ``contexts.onboarding`` — the same functions the
``project_create`` / ``membership_grant`` / ``membership_revoke`` commands call — never by editing rows
(the models stay read-only in admin). The acting operator is recorded in each ``AccessEvent``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from contexts import access, onboarding
from contexts.errors import ApplicationError
from contexts.models import Membership, Permission, Project
from contexts.services import Actor

FORM_TEMPLATE = "admin/contexts/onboarding_form.html"


def operator(request: HttpRequest) -> Actor:
    return Actor.operator(username=request.user.get_username(), user_id=request.user.pk)


def is_operator(request: HttpRequest) -> bool:
    """Operators are the active staff users (the OIDC admin backend makes only operators staff)."""
    return access.is_operator(request.user)


class ProjectCreateForm(forms.Form):
    slug = forms.SlugField(max_length=64)
    name = forms.CharField(max_length=200, required=False)


class GrantForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.order_by("slug"), to_field_name="slug")
    subject = forms.CharField(max_length=255, help_text="The principal's sub at the issuer.")
    issuer = forms.CharField(max_length=500, required=False, help_text="Default: the trusted issuer.")
    permissions = forms.MultipleChoiceField(choices=Permission.choices, widget=forms.CheckboxSelectMultiple)
    display_name = forms.CharField(max_length=200, required=False)


class DeleteProjectForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 60}))
    including_evidence = forms.BooleanField(
        required=False, label="including evidence", help_text="Also delete the projects' evidence snapshots."
    )


class ComputeForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="analyses on", help_text="Off refuses every new run.")
    cpu_seconds_per_day = forms.IntegerField(required=False, min_value=1, help_text="CPU seconds of runs per UTC day")
    max_concurrent = forms.IntegerField(required=False, min_value=1, help_text="runs queued or running at once")
    max_run_seconds = forms.IntegerField(required=False, min_value=1, help_text="the hard time limit of one run")
    max_series_rows = forms.IntegerField(required=False, min_value=0, help_text="series rows of all runs at most")
    retention_days = forms.IntegerField(required=False, min_value=1, help_text="days a finished run is kept")


class RevokeMembershipForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 60}))


def _form_page(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, title: str, form: forms.Form, **extra: Any
) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.model._meta,
        "form": form,
        **extra,
    }
    return TemplateResponse(request, FORM_TEMPLATE, context)


def project_create_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    form = ProjectCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = onboarding.project_create(
                slug=form.cleaned_data["slug"], name=form.cleaned_data["name"], actor=operator(request)
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            model_admin.message_user(request, f"Project {project.slug} created.", messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:contexts_project_changelist"))
    return _form_page(model_admin, request, "Create a project", form, submit="Create")


def membership_grant_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    form = GrantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            membership = onboarding.membership_grant(
                project_slug=data["project"].slug,
                issuer=data["issuer"] or settings.TJWATER_OIDC_ISSUER,
                subject=data["subject"],
                permissions=data["permissions"],
                display_name=data["display_name"],
                actor=operator(request),
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            model_admin.message_user(
                request, f"Granted {' '.join(membership.permissions)} to {data['subject']}.", messages.SUCCESS
            )
            return HttpResponseRedirect(reverse("admin:contexts_membership_changelist"))
    return _form_page(model_admin, request, "Grant or change a membership", form, submit="Grant")


@admin.action(description="Revoke selected memberships", permissions=["onboard"])
def revoke_memberships(model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Membership]) -> Any:
    """Ask for a reason (intermediate page), then revoke each through ``membership_revoke``."""
    rows = list(queryset.filter(revoked_at__isnull=True).select_related("principal", "project").order_by("pk")[:200])
    form = RevokeMembershipForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        for membership in rows:
            onboarding.membership_revoke(
                project_slug=membership.project.slug,
                issuer=membership.principal.issuer,
                subject=membership.principal.subject,
                reason=form.cleaned_data["reason"],
                actor=operator(request),
            )
        model_admin.message_user(request, f"Revoked {len(rows)} membership(s).", messages.SUCCESS)
        return None
    return _form_page(
        model_admin,
        request,
        "Revoke memberships",
        form,
        submit="Revoke",
        rows=rows,
        action="revoke_memberships",
        selected_ids=[m.pk for m in rows],
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
    )


@admin.action(description="Delete selected projects and all their data", permissions=["onboard"])
def delete_projects(model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Project]) -> Any:
    """Ask for a reason (and whether evidence may go too), then delete each through ``project_delete``
    (which revokes the project's contexts first and refuses a project holding evidence unless included)."""
    rows = list(queryset.order_by("slug")[:50])
    form = DeleteProjectForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        deleted = 0
        for project in rows:
            try:
                onboarding.project_delete(
                    slug=project.slug,
                    reason=form.cleaned_data["reason"],
                    including_evidence=form.cleaned_data["including_evidence"],
                    actor=operator(request),
                )
            except ApplicationError as exc:
                model_admin.message_user(request, exc.message, messages.ERROR)
            else:
                deleted += 1
        if deleted:
            model_admin.message_user(request, f"Deleted {deleted} project(s).", messages.SUCCESS)
        return None
    return _form_page(
        model_admin,
        request,
        "Delete projects and all their data",
        form,
        submit="Delete",
        rows=rows,
        action="delete_projects",
        selected_ids=[p.pk for p in rows],
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
    )


@admin.action(description="Set analyses (compute) for selected projects", permissions=["onboard"])
def set_compute(model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Project]) -> Any:
    """Ask for the switch and the limits (intermediate page), then set each through ``project_compute``
    (audited; what is left empty stays as it was)."""
    rows = list(queryset.order_by("slug")[:50])
    form = ComputeForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        changed = 0
        for project in rows:
            try:
                onboarding.project_compute(slug=project.slug, actor=operator(request), **form.cleaned_data)
            except ApplicationError as exc:
                model_admin.message_user(request, f"{project.slug}: {exc.message}", messages.ERROR)
            else:
                changed += 1
        if changed:
            model_admin.message_user(request, f"Analyses set for {changed} project(s).", messages.SUCCESS)
        return None
    return _form_page(
        model_admin,
        request,
        "Set analyses (compute)",
        form,
        submit="Set",
        rows=rows,
        action="set_compute",
        selected_ids=[p.pk for p in rows],
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
    )
