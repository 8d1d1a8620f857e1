"""The Django admin lists every queries model read-only: no add, change or delete, for anyone."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client, RequestFactory
from django.urls import reverse

from queries.admin import ReadOnlyAdmin

QUERIES_ADMINS = sorted(
    ((model, model_admin) for model, model_admin in admin.site._registry.items() if model._meta.app_label == "queries"),
    key=lambda pair: pair[0]._meta.model_name,
)


def test_every_queries_model_is_registered_read_only() -> None:
    from django.apps import apps

    registered = {model for model, _ in QUERIES_ADMINS}
    assert registered == set(apps.get_app_config("queries").get_models())
    assert all(isinstance(model_admin, ReadOnlyAdmin) for _, model_admin in QUERIES_ADMINS)


@pytest.fixture
def superuser_client(db: None) -> Client:
    user = get_user_model().objects.create_superuser("root-admin", "root@example.org", "x" * 20)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def job_rows(demo_loaded: None, db: None) -> None:
    """A job, a second kept .inp and a second valve layer with its segments for the demo project (the demo
    seeds model version 1 and its isolation_valves layer; rolled back with the test)."""
    from contexts.models import Project
    from queries.models import GisLayer, IsolationValve, Job, NetworkSource, ValveSegments

    project = Project.objects.get(slug="tianjin-demo")
    source = NetworkSource.objects.create(project=project, version=2, file_name="Net6.inp",
                                          inp_text="[TITLE]\n[END]\n", sha256="0" * 64)  # fmt: skip
    valves = GisLayer.objects.create(project=project, layer_key="valves-admin", name="valves", geometry_type="Point",
                                     kind="valves")  # fmt: skip
    IsolationValve.objects.create(layer=valves, source_fid="1", link_id="LINK-1", node_id="NODE-1")
    ValveSegments.objects.create(model_version=source, layer=valves, node_segments={"NODE-1": 1},
                                 link_segments={"LINK-1": 1})  # fmt: skip
    Job.objects.create(project=project, kind="scada_import", subject="historian.csv", status="succeeded", rows=1)


@pytest.mark.usefixtures("demo_loaded", "job_rows")
@pytest.mark.parametrize(("model", "model_admin"), QUERIES_ADMINS, ids=[m._meta.model_name for m, _ in QUERIES_ADMINS])
def test_superuser_can_browse_but_not_edit(
    superuser_client: Client, model: type[models.Model], model_admin: admin.ModelAdmin
) -> None:
    url = f"admin:{model._meta.app_label}_{model._meta.model_name}"
    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="root-admin")
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)

    assert superuser_client.get(reverse(f"{url}_changelist")).status_code == 200
    assert superuser_client.get(reverse(f"{url}_add")).status_code == 403
    obj = model.objects.order_by("pk").first()
    detail = superuser_client.get(reverse(f"{url}_change", args=[obj.pk]))
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
    deleted = superuser_client.post(reverse(f"{url}_delete", args=[obj.pk]), {"post": "yes"})
    assert deleted.status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


# --- issue 21: jobs per project, a device's readings against the baseline ----------------------------


def test_jobs_list_and_a_device_chart(superuser_client: Client, project: object, tmp_path: object) -> None:
    from datetime import UTC, datetime, timedelta
    from pathlib import Path

    from queries.importer.baseline_window import simulate_baseline_window
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.importer.scada_devices import import_scada_devices
    from queries.importer.scada_readings import import_scada
    from queries.models import Job, ScadaDevice
    from queries.services.jobs import job_failed, job_started

    tmp = Path(str(tmp_path))
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    (tmp / "d.csv").write_text(
        "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
        "PT-11,Pressure 11,pressure,psi,junction,11,,,900\n"
    )
    import_scada_devices(project=project, path=tmp / "d.csv")
    day = datetime(2026, 4, 1, tzinfo=UTC)
    rows = "".join(f"{(day + timedelta(minutes=15 * i)).isoformat()},{60 + i % 4}\n" for i in range(96) if i != 40)
    (tmp / "r.csv").write_text("time,PT-11\n" + rows)
    import_scada(project=project, path=tmp / "r.csv")
    simulate_baseline_window(project=project, start=day, hours=12, step_s=900)
    failed = job_started(project=project, kind="scada_import", subject="bad.csv", started_by="alice")
    job_failed(failed, "bad.csv refused, nothing written: 3 rejected sample(s), more than --max-rejects 0.",
               rejects=3, reject_lines=["line 4: time: x is not an ISO 8601 time"])  # fmt: skip

    listing = superuser_client.get(reverse("admin:queries_job_changelist") + f"?project__id__exact={project.pk}")
    body = listing.content.decode()
    assert listing.status_code == 200 and "bad.csv refused, nothing written" in body and "alice" in body
    detail = superuser_client.get(reverse("admin:queries_job_change", args=[failed.pk])).content.decode()
    assert "line 4: time: x is not an ISO 8601 time" in detail
    assert Job.objects.filter(project=project).count() == 1  # jobs are recorded by the commands and tasks

    device = ScadaDevice.objects.get(project=project, device_id="PT-11")
    page = superuser_client.get(reverse("admin:queries_scadadevice_change", args=[device.pk])).content.decode()
    chart = page.index('class="tjw-device-chart"')
    svg = page[chart : page.index("</svg>", chart)]
    assert 'class="tjw-cleaned"' in svg and 'class="tjw-model-baseline"' in svg
    assert svg.count('class="tjw-measured"') == 2  # the missing slot breaks the line, never bridged
    assert "<script" not in svg and "style=" not in svg  # allowed by the admin's strict CSP
    assert " m</text>" in svg and "UTC" in svg  # an SI project on UTC: metres of head, UTC times

    # A US utility in New York (issue 40): the chart in psi, on the local clock, like every tool's answer.
    project.unit_system, project.timezone = "US", "America/New_York"  # type: ignore[attr-defined]
    project.save(update_fields=["unit_system", "timezone"])  # type: ignore[attr-defined]
    page = superuser_client.get(reverse("admin:queries_scadadevice_change", args=[device.pk])).content.decode()
    svg = page[page.index('class="tjw-device-chart"') :]
    svg = svg[: svg.index("</svg>")]
    assert " psi</text>" in svg and " m</text>" not in svg
    assert "EDT" in svg and "(America/New_York)" in svg and "Z</text>" not in svg


def test_an_operator_cancels_simulations_from_the_jobs_list(
    superuser_client: Client, project: object, test_redis: object
) -> None:
    """The Jobs admin's one action: a queued simulation is cancelled (it will write nothing); a finished
    job is left as it is, with a warning saying why."""
    from queries.models import Job

    queued = Job.objects.create(project=project, kind="baseline", subject="w", status="queued", task_id="admin-1",
                                detail={"start": "2026-04-01T00:00:00+00:00", "hours": 1, "step_s": 900})  # fmt: skip
    done = Job.objects.create(project=project, kind="baseline", subject="w", status="succeeded", task_id="admin-2")
    response = superuser_client.post(
        reverse("admin:queries_job_changelist"),
        {"action": "cancel_jobs", "_selected_action": [queued.pk, done.pk]},
        follow=False,
    )
    assert response.status_code == 302
    queued.refresh_from_db()
    done.refresh_from_db()
    assert queued.status == "cancelled"
    assert queued.message.startswith("Cancelled by operator root-admin before it started")
    assert done.status == "succeeded"
