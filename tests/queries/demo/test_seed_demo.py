"""The demo utility: what ``seed_demo`` builds, the SCADA cleaning rules on its readings, and that
running it again yields identical data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, models
from django.test import override_settings

from analyses.kinds import kinds
from analyses.network import shared
from contexts.models import ExecutionRequest, Membership, Principal, Project, Task, TaskReport, TaskRun
from queries.demo.seed import DEMO_B_SLUG, DEMO_SLUG, seed_demo
from queries.models import (
    ELEMENT_MODELS,
    AnalysisLinkSeries,
    AnalysisNodeSeries,
    AnalysisResult,
    AnalysisRun,
    ElementGisProperties,
    GisFeature,
    GisLayer,
    IsolationValve,
    Job,
    Junction,
    LinkBaseline,
    NetworkSource,
    NodeBaseline,
    Observation,
    PeripheralPoint,
    ScadaDevice,
    ScadaReading,
    SensorPlacementRun,
    TestData,
    WorkbenchRuntime,
    WorkOrder,
)
from queries.runs.inputs import input_sha256
from queries.runs.isolation import isolate

pytestmark = pytest.mark.usefixtures("demo_loaded")

BURST_RUN = "burst-20261101-0800"
BURST_AT = datetime(2026, 11, 1, 8, tzinfo=UTC)

# Natural keys that stand in for surrogate ids when hashing (ids differ between runs by design).
NATURAL_KEYS: dict[type[models.Model], tuple[str, ...]] = {
    Project: ("slug",),
    Principal: ("issuer", "subject"),
    Membership: ("principal__subject", "project__slug"),
    Task: ("project__slug", "title"),
    TaskRun: ("task__title", "sequence"),
    ScadaDevice: ("project__slug", "device_id"),
    AnalysisRun: ("project__slug", "run_id"),
    NetworkSource: ("project__slug", "version"),
    GisLayer: ("project__slug", "layer_key"),
    PeripheralPoint: ("project__slug", "point_id"),
    Job: ("project__slug", "kind", "subject"),
}


def _paths(model: type[models.Model]) -> list[str]:
    paths: list[str] = []
    for f in model._meta.concrete_fields:
        if f.primary_key or getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False):
            continue
        if isinstance(f, models.GeneratedField):
            continue
        if f.is_relation:
            paths.extend(f"{f.name}__{k}" for k in NATURAL_KEYS[f.related_model])
        else:
            paths.append(f.name)
    return paths


def table_digest(model: type[models.Model]) -> tuple[int, str]:
    """Row count and an order-independent SHA-256 over every row's content (surrogate ids replaced by
    natural keys, auto timestamps left out), computed in the database."""
    sql, params = model.objects.order_by().values_list(*_paths(model)).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), encode(sha256(convert_to(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), ''),"
            f" 'UTF8')), 'hex') FROM ({sql}) AS r",
            params,
        )
        count, digest = cursor.fetchone()
    return int(count), str(digest)


def database_digest() -> dict[str, tuple[int, str]]:
    demo_models = list(apps.get_app_config("queries").get_models())
    demo_models += [Project, Principal, Membership, Task, TaskRun, ExecutionRequest, TaskReport]
    return {m._meta.label: table_digest(m) for m in demo_models}


def test_projects_principals_and_memberships(db: None) -> None:
    demo, demo_b = Project.objects.get(slug=DEMO_SLUG), Project.objects.get(slug=DEMO_B_SLUG)
    assert (demo.timezone, demo_b.timezone) == ("Asia/Shanghai", "Asia/Shanghai")  # data itself stays in UTC
    assert (demo.unit_system, demo_b.unit_system) == ("SI", "SI")
    issuer = settings.TJWATER_OIDC_ISSUER
    subjects = set(Principal.objects.filter(issuer=issuer).values_list("subject", flat=True))
    assert {"alice", "bob", "carol", "svc-worker"} <= subjects
    assert Principal.objects.get(issuer=issuer, subject="svc-worker").is_service
    grants = {
        (m.principal.subject, m.project.slug): sorted(m.permissions)
        for m in Membership.objects.filter(project__in=[demo, demo_b], revoked_at__isnull=True)
    }
    everything = sorted(["webgis.view", "scada.view", "simulation.view", "optimization.run"])
    assert grants == {
        ("alice", DEMO_SLUG): everything,
        ("bob", DEMO_B_SLUG): everything,
        ("bob", DEMO_SLUG): ["webgis.view"],
        ("svc-worker", DEMO_SLUG): everything,
    }


def test_networks_and_48h_baseline(db: None) -> None:
    demo = Project.objects.get(slug=DEMO_SLUG)
    counts = {t: m.objects.filter(project=demo).count() for t, m in ELEMENT_MODELS.items()}
    assert counts == {"junction": 3323, "reservoir": 1, "tank": 32, "pipe": 3829, "pump": 61, "valve": 2}
    assert Junction.objects.filter(project__slug=DEMO_B_SLUG).count() == 92
    times = NodeBaseline.objects.filter(project=demo, element_type="junction", element_id="JUNCTION-0")
    stamps = list(times.values_list("time", flat=True))
    assert len(stamps) == 193
    assert stamps[0] == datetime(2026, 11, 1, tzinfo=UTC)
    assert stamps[-1] - stamps[0] == timedelta(hours=48)
    assert NodeBaseline.objects.filter(project=demo).count() == 3356 * 193
    assert LinkBaseline.objects.filter(project=demo).count() == 3892 * 193


def test_scada_devices_sit_on_real_elements(db: None) -> None:
    demo = Project.objects.get(slug=DEMO_SLUG)
    devices = list(ScadaDevice.objects.filter(project=demo))
    assert 35 <= len(devices) <= 45
    assert {d.quantity for d in devices} == {"pressure", "flow", "level"}
    assert {(d.quantity, d.element_type) for d in devices} == {
        ("pressure", "junction"),
        ("flow", "pipe"),
        ("level", "tank"),
    }
    for d in devices:
        assert ELEMENT_MODELS[d.element_type].objects.filter(project=demo, element_id=d.element_id).exists()
    assert ScadaReading.objects.filter(device__project=demo).count() == len(devices) * 48 * 12


def test_readings_cleaned_vs_monitored_rules(db: None) -> None:
    readings = ScadaReading.objects.filter(device__project__slug=DEMO_SLUG)
    quality_counts = dict(readings.values_list("quality").annotate(n=models.Count("id")))
    assert set(quality_counts) == {"good", "spike", "stuck", "gap"}
    # Gaps: nothing measured, nothing invented.
    assert readings.filter(monitored_value__isnull=True).count() == quality_counts["gap"]
    assert not readings.filter(monitored_value__isnull=True, cleaned_value__isnull=False).exists()
    # Good values pass through unchanged; removed values (spike, stuck) have no cleaned value.
    assert not readings.filter(quality="good").exclude(cleaned_value=models.F("monitored_value")).exists()
    assert not readings.filter(quality__in=["spike", "stuck", "gap"], cleaned_value__isnull=False).exists()
    # The one stuck sensor repeats one value exactly for hours.
    stuck = readings.filter(quality="stuck")
    assert set(stuck.values_list("device__device_id", flat=True)) == {"PT-004"}
    assert stuck.count() >= 72
    assert stuck.values("monitored_value").distinct().count() == 1


def test_spikes_are_far_from_the_model_and_good_values_close(db: None) -> None:
    """monitored = model + noise, the model being the baseline — or, from the burst to the end of its
    window, what the burst run computed there: good pressure readings stay within a couple of metres of
    it at the same 15-minute instant (a despiking filter can miss a spike that lands on a pump
    switching ramp, so allow one in a thousand); removed spikes are several metres away."""
    burst = AnalysisRun.objects.get(project__slug=DEMO_SLUG, run_id=BURST_RUN)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT r.quality, count(*) FILTER (WHERE abs(r.monitored_value - coalesce(a.pressure, b.pressure)) > 2.5),
                   count(*), min(abs(r.monitored_value - coalesce(a.pressure, b.pressure)))
            FROM queries_scadareading r
            JOIN queries_scadadevice d ON d.id = r.device_id
            JOIN queries_nodebaseline b ON b.project_id = d.project_id AND b.element_type = 'junction'
                 AND b.element_id = d.element_id AND b.time = r.time
            LEFT JOIN queries_analysisnodeseries a ON a.run_id = %s AND a.element_type = 'junction'
                 AND a.element_id = d.element_id AND a.time = r.time AND r.time >= %s
            WHERE d.quantity = 'pressure' AND d.project_id = %s AND r.quality IN ('good', 'spike')
            GROUP BY r.quality
            """,
            [burst.pk, BURST_AT, burst.project_id],
        )
        stats = {q: (far, total, nearest) for q, far, total, nearest in cursor.fetchall()}
    assert stats["good"][0] <= stats["good"][1] / 1000
    assert stats["spike"][1] >= 5
    assert stats["spike"][2] > 3.0


def test_analysis_runs_were_computed(db: None) -> None:
    runs = {r.run_id: r for r in AnalysisRun.objects.filter(project__slug__in=[DEMO_SLUG, DEMO_B_SLUG])}
    burst, isolation = runs["burst-20261101-0800"], runs["isolation-20261101-0830"]
    assert (burst.kind, burst.status) == ("burst", "succeeded")
    assert burst.summary["peak_flow"] > 0.02 and burst.summary["units"]["peak_flow"] == "m3/s"
    assert burst.summary["initial_state"] == "the stored baseline's at 2026-11-01T08:00:00Z"
    # Its results are the burst kind's result types, each a payload its model admits.
    for result in AnalysisResult.objects.filter(run__project__slug=DEMO_SLUG, run__kind__in=list(kinds())):
        kinds()[result.run.kind].results[result.result_type].model_validate(result.payload)
    # The burst point is a quarter along LINK-1523 from JUNCTION-1304; its flow is stored there, from the
    # burst at 08:00Z (R-DEMO-1) to 18:00Z, every 15 minutes, for every link.
    leak = AnalysisNodeSeries.objects.filter(run=burst, leak_demand__isnull=False)
    assert set(leak.values_list("element_id", flat=True)) == {"JUNCTION-1304"}
    assert leak.order_by("time")[0].time == datetime(2026, 11, 1, 8, tzinfo=UTC)
    assert leak.filter(leak_demand__gt=0.02).count() == leak.count() == 41
    assert AnalysisLinkSeries.objects.filter(run=burst).count() == 3892 * 41
    assert (isolation.kind, isolation.status) == ("valve_isolation", "succeeded")
    segment = AnalysisResult.objects.get(run=isolation, result_type="isolation_segment").payload
    assert burst.parameters["pipe_id"] in segment["pipes"]
    # The valves to close are valves of the demo's own valve layer (a layer of kind valves, as
    # import_gis --as-valves makes one), so a demo user's valve isolation runs on the same layer.
    layer = GisLayer.objects.get(project__slug=DEMO_SLUG, kind="valves")
    valves = {(v.source_fid, v.link_id, v.node_id) for v in IsolationValve.objects.filter(layer=layer)}
    closing = {(v["valve_id"], v["pipe_id"], v["node_id"]) for v in segment["valves_to_close"]}
    assert closing and closing <= valves
    demo_version = NetworkSource.objects.get(project=isolation.project)
    direct = isolate(shared(demo_version), sorted(valves), [burst.parameters["pipe_id"]], frozenset())
    assert closing == set(direct.valves_to_close) and segment["pipes"] == direct.pipes
    # One code path: the demo's runs are the kinds' own, pinned to the demo's model version like a
    # submitted run, with the engine and the hash of their canonical inputs.
    for run in (burst, isolation, runs["simulation-20261101-0600"]):
        version = NetworkSource.objects.get(project=run.project)
        assert run.model_version_id == version.pk and run.engine.startswith("EPANET 2.")
        spec = kinds()[run.kind]
        wn = shared(version)
        si = spec.validate(run.parameters, wn=wn, unit_system=run.project.unit_system, project=run.project)
        digest = input_sha256(kind=run.kind, parameters=si, model_sha256=version.sha256, engine=run.engine)
        assert run.input_sha256 == digest and run.job_id is None and run.cost == {}
    failed = [r for r in runs.values() if r.status == "failed"]
    assert len(failed) == 1
    assert failed[0].error_code.startswith("EPANET_")
    assert not AnalysisNodeSeries.objects.filter(run=failed[0]).exists()
    # Every run that claims success has results or series behind it; the daily simulation is the what-if
    # kind's own computation: a day from 06:00 at 15 minutes, every element, a summary result.
    for run in runs.values():
        if run.status == "succeeded":
            assert (
                AnalysisResult.objects.filter(run=run).exists() or AnalysisNodeSeries.objects.filter(run=run).exists()
            )
    daily = runs["simulation-20261101-0600"]
    assert AnalysisResult.objects.get(run=daily).result_type == "summary" and daily.summary["min_pressure_node"]
    times = AnalysisNodeSeries.objects.filter(run=daily, element_id=daily.summary["min_pressure_node"])
    assert times.count() == 24 * 4 + 1 and times.order_by("time")[0].time == datetime(2026, 11, 1, 6, tzinfo=UTC)


def test_two_sensor_placement_runs_with_different_parameters(db: None) -> None:
    runs = list(SensorPlacementRun.objects.filter(project__slug=DEMO_SLUG).order_by("run_id"))
    assert len(runs) == 2
    assert runs[0].parameters != runs[1].parameters
    for run in runs:
        assert len(run.selected_sensors) == run.parameters["n_sensors"]
        gains = [s["marginal_gain"] for s in run.selected_sensors]
        assert gains == sorted(gains, reverse=True)  # greedy: non-increasing marginal gains
        assert 0 < run.objective_value <= 1


def test_gis_attributes_for_every_element_and_a_source_layer(db: None) -> None:
    demo = Project.objects.get(slug=DEMO_SLUG)
    elements = sum(m.objects.filter(project=demo).count() for m in ELEMENT_MODELS.values())
    assert ElementGisProperties.objects.filter(project=demo).count() == elements
    assert not ElementGisProperties.objects.filter(project=demo, element_type="pipe", material="").exists()
    layer = GisLayer.objects.get(project=demo, layer_key="water_mains")
    features = GisFeature.objects.filter(layer=layer)
    assert features.count() > 3000
    pipe_ids = set(ELEMENT_MODELS["pipe"].objects.filter(project=demo).values_list("element_id", flat=True))
    assert not set(features.values_list("source_fid", flat=True)) & pipe_ids
    matched = features.exclude(element_id="")
    assert set(matched.values_list("element_id", flat=True)) <= pipe_ids


def test_runtime_tasks_and_peripheral_data(db: None) -> None:
    demo = Project.objects.get(slug=DEMO_SLUG)
    runtime = WorkbenchRuntime.objects.get(project=demo)
    assert {"scada", "model_baseline", "gis"} <= set(runtime.data_sources)
    task = Task.objects.get(project=demo)
    first, current = list(TaskRun.objects.filter(task=task).order_by("sequence"))
    assert first.superseded_at is not None and current.superseded_at is None
    assert current.lease_holder == "session-demo-1"
    assert current.lease_expires_at > datetime(2090, 1, 1, tzinfo=UTC)
    assert ExecutionRequest.objects.get(request_id="exec-demo-1").run == current
    revisions = list(TaskReport.objects.filter(task=task).order_by("revision"))
    assert [r.revision for r in revisions] == [1, 2]
    assert all(len(r.sections) >= 3 for r in revisions)
    assert revisions[0].sections != revisions[1].sections
    for model in (PeripheralPoint, WorkOrder, Observation, TestData):
        rows = model.objects.filter(project=demo)
        assert rows.exists()
        assert not rows.filter(synthetic=False).exists()


def test_if_empty_does_nothing_when_loaded(db: None, capsys: pytest.CaptureFixture[str]) -> None:
    before = table_digest(ScadaReading)
    call_command("seed_demo", "--if-empty")
    assert "already loaded" in capsys.readouterr().out
    assert table_digest(ScadaReading) == before


@override_settings(TJWATER_OIDC_ISSUER="")
def test_missing_issuer_is_a_clear_error(db: None) -> None:
    with pytest.raises(CommandError, match="TJWATER_OIDC_ISSUER"):
        call_command("seed_demo")


def test_seed_demo_twice_yields_identical_data(db: None) -> None:
    """Re-running replaces the demo with the same content: every table's digest is unchanged."""
    before = database_digest()
    seed_demo()
    after = database_digest()
    assert before[ScadaReading._meta.label][0] > 20000
    assert after == before


def _shifts() -> dict[str, tuple[float, float, float]]:
    """Per pressure device: distance (m) to LINK-1523, and the median of cleaned − baseline before the
    burst and in its first hours (08:30–11:00), at the baseline's 15-minute instants."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT d.device_id,
                   ST_Distance(d.location::geography, p.geog),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY r.cleaned_value - b.pressure)
                       FILTER (WHERE r.time < %s),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY r.cleaned_value - b.pressure)
                       FILTER (WHERE r.time >= %s AND r.time < %s)
            FROM queries_scadadevice d
            JOIN queries_pipe p ON p.project_id = d.project_id AND p.element_id = 'LINK-1523'
            JOIN queries_scadareading r ON r.device_id = d.id AND r.cleaned_value IS NOT NULL
            JOIN queries_nodebaseline b ON b.project_id = d.project_id AND b.element_type = 'junction'
                 AND b.element_id = d.element_id AND b.time = r.time
            WHERE d.quantity = 'pressure' AND d.project_id = (SELECT id FROM contexts_project WHERE slug = %s)
            GROUP BY d.device_id, p.geog, d.location
            """,
            [BURST_AT, BURST_AT + timedelta(minutes=30), BURST_AT + timedelta(hours=3), DEMO_SLUG],
        )
        return {dev: (dist, before, during) for dev, dist, before, during in cursor.fetchall()}


def test_the_burst_shows_in_the_readings_near_link_1523_only(db: None) -> None:
    """From 08:00 the transmitters read what the burst run computed: in the burst's first hours those near
    LINK-1523 drop more than 1 m below the baseline (beyond their constant bias) and those farther than
    15 km stay where they were. (Later the water it drains makes the tanks' pumps switch on earlier,
    which the run computes too, network-wide: the readings follow it.)"""
    shifts = _shifts()
    near = {dev: during - before for dev, (dist, before, during) in shifts.items() if dist <= 1000}
    assert len(near) >= 3, shifts
    assert all(drop < -1.0 for drop in near.values()), near
    far = {dev: during - before for dev, (dist, before, during) in shifts.items() if dist > 15000}
    assert len(far) >= 3
    assert all(abs(shift) < 0.3 for shift in far.values()), far
    burst = AnalysisRun.objects.get(project__slug=DEMO_SLUG, run_id=BURST_RUN)
    district = ElementGisProperties.objects.get(
        project__slug=DEMO_SLUG, element_type="pipe", element_id=burst.parameters["pipe_id"]
    ).district
    assert district == "Hexi"  # the district the investigation task names
