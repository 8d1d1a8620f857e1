"""Django admin for the water-utility data: every model browse-only.

Operators browse the network, SCADA, baselines and analysis results; they never edit measured or
computed data by hand (it is written by the importer and the producing systems), so add, change and
delete are refused for everyone, superusers included. The large series tables use a paginator that
does not COUNT(*) tens of millions of rows on an unfiltered list page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar, cast

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from contexts.admin import ReadOnlyAdmin as NoWriteAdmin
from contexts.models import AccessEvent
from queries import models as m
from queries.admin_chart import device_chart_svg
from queries.admin_run_chart import chart_link, run_chart
from queries.jobrunner.registry import find_spec
from queries.jobrunner.runner import NotCancellable, request_cancel
from queries.units import scada_shown


class EstimatedCountPaginator(Paginator[Any]):
    """Unfiltered pages use the planner's row estimate (``pg_class.reltuples``) instead of COUNT(*)."""

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if query is None or query.where:
            return super().count
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [cast("QuerySet[Any]", self.object_list).model._meta.db_table],
            )
            row = cursor.fetchone()
        estimate = int(row[0]) if row else -1
        return estimate if estimate >= 0 else super().count


class ReadOnlyAdmin(NoWriteAdmin):
    """No add, change or delete — for anyone (``contexts.admin.ReadOnlyAdmin``) — and no bulk actions:
    operators browse measured and modelled data, they never edit it."""

    list_per_page = 50

    def get_actions(self, request: HttpRequest) -> dict[str, tuple[Callable[..., str], str, str] | None]:
        return {}


class LargeTableAdmin(ReadOnlyAdmin):
    paginator = EstimatedCountPaginator
    show_full_result_count = False


class ElementAdmin(ReadOnlyAdmin):
    list_filter: ClassVar[tuple[str, ...]] = ("project",)
    search_fields = ("=element_id",)
    exclude = ("geog",)


@admin.register(m.Junction)
class JunctionAdmin(ElementAdmin):
    list_display = ("element_id", "project", "elevation", "base_demand", "demand_pattern")


@admin.register(m.Reservoir)
class ReservoirAdmin(ElementAdmin):
    list_display = ("element_id", "project", "base_head", "head_pattern")


@admin.register(m.Tank)
class TankAdmin(ElementAdmin):
    list_display = ("element_id", "project", "elevation", "init_level", "min_level", "max_level", "diameter")


@admin.register(m.Pipe)
class PipeAdmin(ElementAdmin):
    list_display = ("element_id", "project", "start_node_id", "end_node_id", "length", "diameter", "roughness",
                    "initial_status")  # fmt: skip
    list_filter = ("project", "initial_status", "check_valve")


@admin.register(m.Pump)
class PumpAdmin(ElementAdmin):
    list_display = ("element_id", "project", "start_node_id", "end_node_id", "pump_type", "pump_curve", "power")
    list_filter = ("project", "pump_type")


@admin.register(m.Valve)
class ValveAdmin(ElementAdmin):
    list_display = ("element_id", "project", "valve_type", "diameter", "setting", "initial_status")
    list_filter = ("project", "valve_type")


@admin.register(m.Pattern)
class PatternAdmin(ReadOnlyAdmin):
    list_display = ("pattern_id", "project")
    list_filter = ("project",)
    search_fields = ("=pattern_id",)


@admin.register(m.Curve)
class CurveAdmin(ReadOnlyAdmin):
    list_display = ("curve_id", "project", "curve_type")
    list_filter = ("project", "curve_type")
    search_fields = ("=curve_id",)


@admin.register(m.NetworkOptions)
class NetworkOptionsAdmin(ReadOnlyAdmin):
    list_display = ("project", "kind", "pump_id")
    list_filter = ("project", "kind")


@admin.register(m.NetworkSchema)
class NetworkSchemaAdmin(ReadOnlyAdmin):
    list_display = ("project", "kind", "description")
    list_filter = ("project", "kind")


@admin.register(m.ScadaDevice)
class ScadaDeviceAdmin(ReadOnlyAdmin):
    list_display = (
        "device_id", "project", "name", "quantity", "shown_unit", "native_unit", "element_type", "element_id",
    )  # fmt: skip
    list_filter = ("project", "quantity")
    list_select_related = ("project",)
    search_fields = ("=device_id", "name")
    readonly_fields = ("readings_against_the_model",)

    @admin.display(description="unit")
    def shown_unit(self, obj: m.ScadaDevice) -> str:
        """The unit the project reads this device in (its unit system's: ``queries.units``), as the tools."""
        how = scada_shown(obj.quantity, obj.project.unit_system)
        return how[0].label if how is not None else obj.unit

    @admin.display(description="Last 24 h: readings against the model baseline")
    def readings_against_the_model(self, obj: m.ScadaDevice) -> str:
        return mark_safe(device_chart_svg(obj))  # noqa: S308 - built by device_chart_svg, every text escaped


@admin.register(m.NetworkSource)
class NetworkSourceAdmin(ReadOnlyAdmin):
    """Model versions: one per import_network, newest first (issue 42 item 1)."""

    list_display = ("project", "version", "file_name", "short_sha256", "imported_by", "imported_at")
    list_filter = ("project",)
    list_select_related = ("project",)
    exclude = ("inp_text",)

    @admin.display(description="SHA-256")
    def short_sha256(self, obj: m.NetworkSource) -> str:
        return f"{obj.sha256[:12]}…"


@admin.register(m.Job)
class JobAdmin(ReadOnlyAdmin):
    """Jobs per project (imports, simulations, analyses): what, status (a dry run shows as one), rows,
    rejects, how long, who — and, for a failed job, why (``message``, with its ``error_code``)."""

    list_display = ("created_at", "project", "kind_name", "subject", "run_status", "rows", "rejects", "duration",
                    "started_by", "message")  # fmt: skip
    list_filter = ("project", "kind", "status", "dry_run")
    search_fields = ("subject", "task_id")
    list_select_related = ("project",)
    readonly_fields = ("first_rejects",)

    actions = ("cancel_jobs",)

    def get_actions(self, request: HttpRequest) -> dict[str, tuple[Callable[..., str], str, str] | None]:
        # ReadOnlyAdmin drops every bulk action; this one changes no data, it stops running jobs.
        return admin.ModelAdmin.get_actions(self, request)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("queries.change_job")

    @admin.display(description="kind", ordering="kind")
    def kind_name(self, obj: m.Job) -> str:
        return obj.kind_label

    @admin.action(description="Cancel the selected jobs (they write nothing)", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[m.Job]) -> None:
        """The job runner's one cancel, for every kind it runs (the SCADA imports too: a readings import
        stops at its next batch); a network or GIS import runs outside the runner, in its command: not here."""
        actor = f"operator {request.user.get_username()}"
        for job in queryset.select_related(None).only("pk", "kind", "status", "task_id").order_by("pk"):
            spec = find_spec(job.kind)
            if spec is None or not spec.run:
                self.message_user(request, f"Job {job.pk} ({job.kind_label}) runs in its command: "
                                  "stop the command instead.", messages.WARNING)  # fmt: skip
                continue
            try:
                job = request_cancel(job, actor=actor)
            except NotCancellable as exc:
                self.message_user(request, str(exc), messages.WARNING)
            else:
                said = job.message if job.status == m.JobStatus.CANCELLED else job.status_message
                self.message_user(request, f"Job {job.pk} ({job.kind_label}): {said}", messages.SUCCESS)

    @admin.display(description="status", ordering="status")
    def run_status(self, obj: m.Job) -> str:
        # A dry run's rows were counted, not written: say so where the status is read.
        return f"{obj.get_status_display()} (dry run)" if obj.dry_run else obj.get_status_display()

    @admin.display(description="duration")
    def duration(self, obj: m.Job) -> str:
        seconds = obj.duration_s
        return "—" if seconds is None else f"{seconds:.1f} s"

    @admin.display(description="first rejected lines")
    def first_rejects(self, obj: m.Job) -> str:
        return format_html("<pre>{}</pre>", "\n".join(obj.reject_lines) or "none")


@admin.register(m.ScadaReading)
class ScadaReadingAdmin(LargeTableAdmin):
    list_display = ("device", "time", "monitored_value", "cleaned_value", "quality")
    list_filter = ("quality",)
    search_fields = ("=device__device_id",)
    list_select_related = ("device",)
    date_hierarchy = None


@admin.register(m.NodeBaseline)
class NodeBaselineAdmin(LargeTableAdmin):
    list_display = ("element_type", "element_id", "time", "pressure", "head", "demand", "quality")
    list_filter = ("element_type",)
    search_fields = ("=element_id",)


@admin.register(m.LinkBaseline)
class LinkBaselineAdmin(LargeTableAdmin):
    list_display = ("element_type", "element_id", "time", "flow", "velocity", "headloss", "status", "setting")
    list_filter = ("element_type",)
    search_fields = ("=element_id",)


class RunStatusFilter(admin.SimpleListFilter):
    """A run's status is its job's (one state machine, issue 42); the demo's seeded runs have no job and
    keep their own."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in m.RunStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(Q(job__status=value) | Q(job=None, status=value))


@admin.register(m.AnalysisRun)
class AnalysisRunAdmin(ReadOnlyAdmin):
    """Analysis runs (issue 42 item 6): kind, status, who, the model version, the estimated CPU seconds
    against the actual ones, age; read-only. The one action cancels through the job runner's one cancel
    (as the Jobs list does), audited like ``cancel_analysis_run``. The page of a run charts its series
    against the model baseline (``queries.admin_run_chart``)."""

    list_display = ("run_id", "project", "kind", "run_status", "who", "model_version_label", "estimate_vs_actual",
                    "age")  # fmt: skip
    list_filter = ("kind", RunStatusFilter, "project")
    search_fields = ("=run_id",)
    list_select_related = ("project", "job", "principal", "model_version")
    # The page shows the job's status (``run_status``), not the run's mirror of it a second time.
    exclude = ("status",)
    readonly_fields = ("run_status", "who", "estimate_vs_actual")
    actions = ("cancel_runs",)
    change_form_template = "admin/queries/analysisrun/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[m.AnalysisRun]:
        # A model version's .inp text (megabytes for a large network) and a job's detail (its canonical
        # inputs and grant) are never shown here: not read with every row.
        runs = super().get_queryset(request).select_related(*self.list_select_related)
        return runs.defer("model_version__inp_text", "job__detail", "job__reject_lines")

    def get_actions(self, request: HttpRequest) -> dict[str, tuple[Callable[..., str], str, str] | None]:
        # ReadOnlyAdmin drops every bulk action; this one changes no data, it stops queued or running runs.
        return admin.ModelAdmin.get_actions(self, request)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("queries.change_job")  # the Jobs list's cancel: the same jobs

    @admin.action(description="Cancel the selected runs (they write nothing)", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[m.AnalysisRun]) -> None:
        """The job runner's one cancel (``request_cancel``), audited as ``analysis_cancelled`` with the
        operator as actor — the row ``analyses.submit.cancel`` writes for an operator. It is written here,
        not by calling ``analyses``: nothing imports that app (README "Layout"); the job's own change of
        state is audited by the kind's ``on_state`` hook, as for every cancel."""
        actor = f"operator {request.user.get_username()}"
        for run in queryset.select_related("job").order_by("pk")[:500]:
            if run.job is None:
                self.message_user(request, f"Run {run.run_id} was not run by a job (a seeded run): nothing to "
                                  "cancel.", messages.WARNING)  # fmt: skip
                continue
            try:
                with transaction.atomic():
                    job = request_cancel(run.job, actor=actor)
                    AccessEvent.objects.create(
                        action=AccessEvent.Action.ANALYSIS_CANCELLED,
                        actor=actor[:300],
                        project_id=run.project_id,
                        details={"kind": run.kind, "run_id": run.run_id, "requested": True},
                    )
            except NotCancellable:
                self.message_user(request, f"Run {run.run_id} is {run.job.status}; only a queued or running run "
                                  "can be cancelled.", messages.WARNING)  # fmt: skip
            else:
                said = job.message if job.status == m.JobStatus.CANCELLED else job.status_message
                self.message_user(request, f"Run {run.run_id}: {said}", messages.SUCCESS)

    @admin.display(description="status", ordering="job__status")
    def run_status(self, obj: m.AnalysisRun) -> str:
        status = obj.job.status if obj.job is not None else obj.status
        return str(m.RunStatus(status).label) if status in m.RunStatus.values else status

    @admin.display(description="who")
    def who(self, obj: m.AnalysisRun) -> str:
        # The principal that submitted it; an operator's command has none: its job names the actor.
        if obj.principal is not None:
            return str(obj.principal)
        return obj.job.started_by if obj.job is not None and obj.job.started_by else "—"

    @admin.display(description="model version", ordering="model_version__version")
    def model_version_label(self, obj: m.AnalysisRun) -> str:
        version = obj.model_version
        return "—" if version is None else f"v{version.version} {version.file_name}"

    @admin.display(description="CPU s est. / actual")
    def estimate_vs_actual(self, obj: m.AnalysisRun) -> str:
        """The estimate made before the run was queued against what it cost (issue 42 item 4), and their
        ratio (actual ÷ estimated: above 1, the estimate was low)."""
        estimated, actual = _seconds(obj.estimate, "cpu_seconds"), _seconds(obj.cost, "cpu_seconds")
        if estimated is None and actual is None:
            return "—"
        shown = f"{_s(estimated)} / {_s(actual)}"
        if estimated and actual is not None:
            shown += f" (×{actual / estimated:.2f})"
        return shown

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: m.AnalysisRun) -> str:
        return timesince(obj.created_at)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: m.AnalysisRun | None = None,
    ) -> HttpResponse:
        if obj is not None:
            chart = run_chart(obj, request.GET)
            context["run_chart"] = chart
            context["run_chart_markup"] = mark_safe(chart.html)  # noqa: S308 - built by run_chart, every text escaped
            context["run_chart_types"] = [*m.NODE_TYPES, *m.LINK_TYPES]
            context["run_chart_links"] = [(f"{t} {i}", chart_link((t, i))) for t, i in chart.candidates]
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


def _seconds(values: Any, key: str) -> float | None:
    value = values.get(key) if isinstance(values, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _s(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.2f} s"


@admin.register(m.AnalysisResult)
class AnalysisResultAdmin(ReadOnlyAdmin):
    list_display = ("run", "sequence", "result_type")
    list_filter = ("result_type",)
    list_select_related = ("run",)
    search_fields = ("=run__run_id",)


@admin.register(m.AnalysisNodeSeries)
class AnalysisNodeSeriesAdmin(LargeTableAdmin):
    list_display = ("run", "element_type", "element_id", "time", "pressure", "demand", "leak_demand")
    list_filter = ("element_type",)
    list_select_related = ("run",)
    search_fields = ("=element_id",)


@admin.register(m.AnalysisLinkSeries)
class AnalysisLinkSeriesAdmin(LargeTableAdmin):
    list_display = ("run", "element_type", "element_id", "time", "flow", "velocity", "status")
    list_filter = ("element_type",)
    list_select_related = ("run",)
    search_fields = ("=element_id",)


@admin.register(m.SensorPlacementRun)
class SensorPlacementRunAdmin(ReadOnlyAdmin):
    list_display = ("run_id", "project", "status", "objective", "objective_value", "created_at")
    list_filter = ("project", "status", "objective")


@admin.register(m.ElementGisProperties)
class ElementGisPropertiesAdmin(ReadOnlyAdmin):
    list_display = ("element_type", "element_id", "project", "material", "install_year", "diameter_class",
                    "district", "road")  # fmt: skip
    list_filter = ("project", "element_type", "material", "district")
    search_fields = ("=element_id", "road")


@admin.register(m.GisLayer)
class GisLayerAdmin(ReadOnlyAdmin):
    list_display = ("layer_key", "project", "name", "geometry_type", "source_crs", "exported_at")
    list_filter = ("project",)


@admin.register(m.GisFeature)
class GisFeatureAdmin(ReadOnlyAdmin):
    list_display = ("source_fid", "layer", "element_type", "element_id")
    list_filter = ("layer",)
    list_select_related = ("layer",)
    search_fields = ("=source_fid", "=element_id")


@admin.register(m.IsolationValve)
class IsolationValveAdmin(ReadOnlyAdmin):
    """The isolation valves of valve layers (``import_gis --as-valves``): the link and the node of each."""

    list_display = ("source_fid", "layer", "link_id", "node_id")
    list_filter = ("layer",)
    list_select_related = ("layer",)
    search_fields = ("=source_fid", "=link_id", "=node_id")


@admin.register(m.ValveSegments)
class ValveSegmentsAdmin(ReadOnlyAdmin):
    list_display = ("model_version", "layer", "computed_at")
    list_select_related = ("model_version", "layer")
    exclude = ("node_segments", "link_segments")


@admin.register(m.WorkbenchRuntime)
class WorkbenchRuntimeAdmin(ReadOnlyAdmin):
    list_display = ("project", "simulation_clock", "active_scenario", "mode", "captured_at")


@admin.register(m.PeripheralPoint)
class PeripheralPointAdmin(ReadOnlyAdmin):
    list_display = ("point_id", "project", "name", "kind", "synthetic")
    list_filter = ("project", "kind", "synthetic")
    search_fields = ("=point_id", "name")


@admin.register(m.WorkOrder)
class WorkOrderAdmin(ReadOnlyAdmin):
    list_display = ("order_id", "project", "point", "kind", "status", "priority", "recorded_at", "synthetic")
    list_filter = ("project", "status", "kind", "synthetic")
    list_select_related = ("point",)


@admin.register(m.Observation)
class ObservationAdmin(ReadOnlyAdmin):
    list_display = ("point", "recorded_at", "quantity", "value", "unit", "synthetic")
    list_filter = ("project", "quantity", "synthetic")
    list_select_related = ("point",)


@admin.register(m.TestData)
class TestDataAdmin(ReadOnlyAdmin):
    list_display = ("sample_id", "point", "recorded_at", "parameter", "value", "unit", "synthetic")
    list_filter = ("project", "parameter", "synthetic")
    list_select_related = ("point",)
