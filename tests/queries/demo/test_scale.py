"""The tiled benchmark network: N×N copies of Net6 with baseline and readings, and nearby queries
that use the geography GiST index."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from contexts.models import Project
from queries.models import Junction, LinkBaseline, NodeBaseline, Pipe, ScadaDevice, ScadaReading


@pytest.mark.django_db
def test_two_by_two_tiles(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("generate_scale_network", "--tiles", "2", "--project", "scale-2", "--baseline-hours", "2")
    assert "2x2 tiles" in capsys.readouterr().out
    project = Project.objects.get(slug="scale-2")
    assert Junction.objects.filter(project=project).count() == 4 * 3323
    assert Pipe.objects.filter(project=project).count() == 4 * 3829
    assert Pipe.objects.filter(project=project, element_id="T0101-LINK-0").exists()
    # 2 h at 60-minute steps = 3 instants per element, for every tile.
    assert NodeBaseline.objects.filter(project=project).count() == 4 * 3356 * 3
    assert LinkBaseline.objects.filter(project=project, element_id="T0100-LINK-0").count() == 3
    assert ScadaDevice.objects.filter(project=project).count() == 4 * 40
    assert ScadaReading.objects.filter(device__project=project).count() == 4 * 40 * 24
    # Tiles sit side by side: the same element in two tiles is kilometres apart.
    a = Junction.objects.get(project=project, element_id="T0000-JUNCTION-0").geog
    b = Junction.objects.get(project=project, element_id="T0100-JUNCTION-0").geog
    with connection.cursor() as cursor:
        cursor.execute("SELECT ST_Distance(%s::geography, %s::geography)", [a.ewkt, b.ewkt])
        assert cursor.fetchone()[0] > 10_000
    # A device on a copied tile sits on its own tile's element.
    device = ScadaDevice.objects.get(project=project, device_id="T0101-PT-001")
    element = Junction.objects.get(project=project, element_id=device.element_id)
    assert device.location.coords == pytest.approx(element.geom.coords)

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queries_pipe")
        cursor.execute(
            "EXPLAIN SELECT element_id FROM queries_pipe WHERE project_id = %s "
            "AND ST_DWithin(geog, ST_GeogFromText(%s), 200) "
            "ORDER BY ST_Distance(geog, ST_GeogFromText(%s)), element_id LIMIT 5",
            [project.pk, element.geom.ewkt, element.geom.ewkt],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pipe_geog_gist" in plan
