"""A utility's own network for the analyses (Net3 imported, analyses on, a valve layer, two members:
alice may run analyses, bob may only view), against the real database and Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
import wntr
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.management import call_command

from analyses.submit import Submitter
from contexts.models import Membership, Principal, Project, ProjectCompute
from queries.importer.epanet import import_network, wntr_network_path
from tjwater.celery import app

NET3 = wntr_network_path("Net3.inp")
ISSUER = "https://idp.analyses.test"
RUNNER = ["simulation.run", "simulation.view", "webgis.view"]
VIEWER = ["simulation.view", "webgis.view"]


def valve_rows() -> list[tuple[str, str]]:
    """A strategic valve layer of Net3 (two valves per node's pipes, fixed seed): (link, node)."""
    wn = wntr.network.WaterNetworkModel(str(NET3))
    layer = wntr.network.layer.generate_valve_layer(wn, "strategic", 2, seed=123)
    return list(zip(layer["link"], layer["node"], strict=True))


def import_valves(project: Project, tmp: Path, rows: list[tuple[str, str]]) -> None:
    features = [
        {
            "type": "Feature",
            "properties": {"VALVE_ID": f"V-{i}", "PIPE": link, "NODE": node},
            "geometry": {"type": "Point", "coordinates": [-85.5 + i * 1e-5, 38.0]},
        }
        for i, (link, node) in enumerate(rows)
    ]
    path = tmp / "valves.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    call_command(
        "import_gis",
        str(path),
        "--project",
        project.slug,
        "--layer-key",
        "valves",
        "--as-valves",
        "--link-field",
        "PIPE",
        "--node-field",
        "NODE",
        stdout=StringIO(),
        stderr=StringIO(),
    )


def running_worker(django_db_blocker: Any) -> Iterator[None]:
    """A real Celery worker of both queues (``celery``, ``analysis``) in this process, with its own database
    connection (it sees committed rows), Redis emptied before and after: a module fixture's body."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    queues = app.amqp.queues.copy()
    with (
        django_db_blocker.unblock(),
        start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10, queues=["celery", "analysis"]),
    ):
        yield
    app.amqp.queues.clear()
    app.amqp.queues.update(queues)
    client.flushdb()
    client.close()


def enable(project: Project, *, cpu: int = 3600, concurrent: int = 4, max_run: int = 300) -> None:
    ProjectCompute.objects.update_or_create(
        project=project,
        defaults={
            "enabled": True,
            "cpu_seconds_per_day": cpu,
            "max_concurrent": concurrent,
            "max_run_seconds": max_run,
        },
    )


def member(project: Project, subject: str, permissions: list[str]) -> Submitter:
    principal, _ = Principal.objects.get_or_create(issuer=ISSUER, subject=subject)
    Membership.objects.update_or_create(principal=principal, project=project, defaults={"permissions": permissions})
    return Submitter(
        actor=subject, principal_id=principal.pk, permissions=frozenset(permissions), purpose="ordinary_chat"
    )


@pytest.fixture
def net3(db: None, tmp_path: Path, test_redis: redis.Redis) -> Project:
    project = Project.objects.create(slug="analyses-net3", name="Analyses Net3")
    import_network(project=project, inp_path=NET3, center=(-85.5, 38.0), scale=30.0, baseline_hours=0)
    import_valves(project, tmp_path, valve_rows())
    enable(project)
    return project


@pytest.fixture
def alice(net3: Project) -> Submitter:
    return member(net3, "alice", RUNNER)


@pytest.fixture
def bob(net3: Project) -> Submitter:
    return member(net3, "bob", RUNNER)
