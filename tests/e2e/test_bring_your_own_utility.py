"""Issue 21, done when: a new utility onboards ky4 (to-scale, EPSG:3089 coordinates), imports a generated
devices CSV (positions in EPSG:3089) and a historian-style wide CSV in psi and gpm with naive local times
across the spring-forward change (the nonexistent hour rejected by line), imports it again (no change),
imports a long-format Parquet file, simulates yesterday in the project's zone, and over MCP reads the
readings converted right (psi → m head within 0.1 %), their gaps, the comparison with the baseline, and
a window without a baseline reported as a model gap.

Committed rows (the uvicorn process reads the same test database), removed afterwards. Until issue 20
lands (``Project.timezone``, ``import_network --crs``) the project's zone is UTC and ky4 is placed by
its drawing scale (feet) — the devices' EPSG:3089 positions are transformed by ``import_scada_devices``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import httpx2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import wntr
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from contexts import dev_issuer
from contexts.grants import tool_catalog
from contexts.models import ContextEvent, Membership, Principal, Project, QueryContext
from contexts.services import context_create
from contexts.tokens import VerifiedToken
from queries.importer.baseline_window import simulate_baseline_window
from queries.importer.epanet import wntr_network_path
from queries.timezones import project_zone
from tests.support.net1 import call_tool_raw
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

SLUG = "byou-ky4"
SUBJECT = "byou-operator"
CLIENT = "tjwater-agent-mcp"
NY = "America/New_York"
PSI = 0.7030695796391595
GPM = 6.30901964e-05
KY4 = wntr_network_path("ky4.inp")
WIDE_START = datetime(2026, 3, 7, 12, 0)  # naive local (New York); the clocks spring forward at 02:00 on the 8th


def psi_at(i: int) -> float:
    return round(55 + 0.2 * ((i * 7) % 9), 2)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("byou")
    wn = wntr.network.WaterNetworkModel(str(KY4))
    lines = ["device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s,accuracy"]
    for n, jid in enumerate(("J-1", "J-10", "J-100"), start=1):
        x, y = wn.get_node(jid).coordinates  # EPSG:3089, US survey feet
        lines.append(f"PT-{n},Pressure {jid},pressure,psi,junction,{jid},{x},{y},300,0.3")
    lines.append("FT-1,Flow P-1,flow,gpm,pipe,P-1,,,300,2")
    (out / "devices.csv").write_text("\n".join(lines) + "\n")
    rows = ["time,PT-1,PT-2,FT-1"]
    for i in range(24 * 12):  # 24 h of 5-minute rows on the wall clock, 02:00–02:55 on the 8th included
        t = WIDE_START + timedelta(minutes=5 * i)
        pt1 = "" if datetime(2026, 3, 8, 10, 0) <= t < datetime(2026, 3, 8, 10, 20) else f"{psi_at(i)}"
        rows.append(f"{t:%Y-%m-%d %H:%M},{pt1},{psi_at(i + 3)},{500 + i % 7}")
    (out / "historian.csv").write_text("\n".join(rows) + "\n")
    return {"devices": out / "devices.csv", "wide": out / "historian.csv", "dir": out}


@pytest.fixture(scope="module")
def utility(django_db_setup: None, django_db_blocker: Any, files: dict[str, Path]) -> Iterator[dict[str, Any]]:
    with django_db_blocker.unblock():
        Project.objects.filter(slug=SLUG).delete()
        call_command("project_create", SLUG, "--name", "Bring your own utility (ky4)", stdout=StringIO())
        call_command("import_network", str(KY4), "--project", SLUG, "--scale", "0.3048", "--center=-85.57,38.05",
                     "--baseline-hours", "0", stdout=StringIO())  # fmt: skip
        project = Project.objects.get(slug=SLUG)
        principal, _ = Principal.objects.get_or_create(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT)
        Membership.objects.create(principal=principal, project=project, permissions=["scada.view", "simulation.view"])
        with override_settings(TJWATER_CONTEXT_TTL_S=3600):
            catalog, task_scoped = tool_catalog()
            handle = context_create(
                token=VerifiedToken(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT, client_id=CLIENT,
                                    scopes=frozenset({"mcp.context.bind"}), audience=(settings.TJWATER_MCP_AUDIENCE,),
                                    expires_at=0),  # fmt: skip
                project_slug=SLUG, session_id="byou", purpose="ordinary_chat", catalog=catalog, task_scoped=task_scoped,
            ).handle  # fmt: skip
    yield {"project": project, "handle": handle}
    with django_db_blocker.unblock():
        QueryContext.objects.filter(project=project).delete()
        ContextEvent.objects.filter(project_id=project.pk).delete()
        Project.objects.filter(pk=project.pk).delete()
        Principal.objects.filter(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT).delete()


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], utility: dict[str, Any]) -> ServerProcess:
    return start_server(REDIS_URL=settings.REDIS_URL)


def import_json(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("import_scada", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def call(server: ServerProcess, utility: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    bearer = dev_issuer.mint_token(subject=SUBJECT, client_id=CLIENT, scopes=["mcp.query"], ttl_s=600)
    reply = call_tool_raw(server, tool, arguments, bearer=bearer, context_handle=utility["handle"], timeout=60)
    assert reply["result"].get("isError") is not True, reply
    return reply["result"]["structuredContent"]


def test_a_new_utility_end_to_end(
    server: ServerProcess, utility: dict[str, Any], files: dict[str, Path], django_db_blocker: Any
) -> None:
    project = utility["project"]
    with django_db_blocker.unblock():
        call_command("import_scada_devices", str(files["devices"]), "--project", SLUG, "--crs", "EPSG:3089",
                     stdout=StringIO())  # fmt: skip
        wide = [str(files["wide"]), "--project", SLUG, "--timezone", NY]
        with pytest.raises(Exception, match=r"line 170: time: 2026-03-08 02:00 does not exist in America/New_York"):
            import_json(*wide)  # the nonexistent hour, refused by line (header = line 1, 02:00 is row 168 → line 170)
        first = import_json(*wide, "--max-rejects", "12")
        assert (first["rejects"], first["layout"]) == (12, "wide")
        again = import_json(*wide, "--max-rejects", "12")
        assert (again["inserted"], again["updated"]) == (0, 0)  # idempotent

        zone = project_zone(project)
        today = datetime.now(zone).replace(hour=0, minute=0, second=0, microsecond=0)
        yesterday = today - timedelta(days=1)
        times = [yesterday + timedelta(minutes=5 * i) for i in range(288) if not 100 <= i < 106]
        parquet = files["dir"] / "yesterday.parquet"
        pq.write_table(
            pa.table({
                "device_id": ["PT-1"] * len(times),
                "time": pa.array([t.astimezone(UTC) for t in times], type=pa.timestamp("us", tz="UTC")),
                "value": [psi_at(i) for i in range(len(times))],
            }),
            parquet,
        )  # fmt: skip
        assert import_json(str(parquet), "--project", SLUG)["layout"] == "long"
        summary = simulate_baseline_window(project=project, start=yesterday, hours=24, step_s=900)
        assert summary.instants == 97

    # Readings over MCP: psi → m head within 0.1 %, the empty cells reported as a gap (the file's last row
    # is 11:55 EDT = 15:55Z, so the window ends at 16:00Z).
    march = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # 00:00 EST
    readings = call(server, utility, "query_scada_readings", {
        "device_ids": ["PT-1"], "start": march.isoformat(), "end": (march + timedelta(hours=11)).isoformat(),
        "field": "monitored_value",
    })  # fmt: skip
    assert readings["units"] == {"PT-1": "m"}
    by_time = {p["time"]: p["value"] for p in readings["data"]["items"]}
    i0 = 12 * 12  # 00:00 EST on the 8th is the 145th wall-clock row
    assert by_time["2026-03-08T05:00:00Z"] == pytest.approx(psi_at(i0) * PSI, rel=1e-3)
    assert by_time["2026-03-08T07:00:00Z"] == pytest.approx(psi_at(i0 + 36) * PSI, rel=1e-3)  # 03:00 EDT
    assert [(g["start"], g["end"]) for g in readings["data_gaps"]] == [("2026-03-08T14:00:00Z", "2026-03-08T14:20:00Z")]

    # Yesterday against the model baseline: model points, the hole in the readings a gap, no model gap.
    element = [{"element_type": "junction", "element_id": "J-1"}]
    span = {"start": yesterday.isoformat(), "end": today.isoformat()}
    items: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    offset, more = 0, True
    while more:  # the measured, cleaned and model series, paged in one global order
        arguments = {"elements": element, **span, "mode": "realtime_comparison", "limit": 500, "offset": offset}
        compared = call(server, utility, "query_element_history", arguments)
        items += compared["data"]["items"]
        gaps += compared["data_gaps"]
        offset, more = offset + len(compared["data"]["items"]), compared["data"]["has_more"]
    model = [p for p in items if p["origin"] == "model_baseline"]
    measured = {p["time"]: p["value"] for p in items if p["origin"] == "measured"}
    assert len(model) == 96 and {p["origin"] for p in items} == {"measured", "cleaned", "model_baseline"}
    assert len(measured) == 288 and sum(v is None for v in measured.values()) == 6  # 6 slots never sent: gaps
    # (Each page reports the gaps of its own points: the same range may be listed by two pages.)
    assert sorted({(g["start"], g["end"]) for g in gaps if "nothing received" in g["reason"]}) == [
        (f"{(yesterday + timedelta(minutes=500)).astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
         f"{(yesterday + timedelta(minutes=530)).astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}")
    ]  # fmt: skip
    compared = {"data_gaps": gaps}
    assert not [g for g in compared["data_gaps"] if "model baseline" in g["reason"]]

    # March has readings but no baseline: reported as a model gap naming what the baseline covers.
    march_history = call(server, utility, "query_element_history", {
        "elements": element, "start": march.isoformat(), "end": (march + timedelta(hours=6)).isoformat(),
        "mode": "realtime_comparison", "limit": 50,
    })  # fmt: skip
    model_gaps = [g for g in march_history["data_gaps"] if "model baseline" in g["reason"]]
    assert [(g["start"], g["end"]) for g in model_gaps] == [("2026-03-08T05:00:00Z", "2026-03-08T11:00:00Z")]
    assert f"covers {yesterday.astimezone(UTC):%Y-%m-%dT%H:%MZ}" in model_gaps[0]["reason"]
    # The REST edge answers the same (one service, two edges).
    token = dev_issuer.mint_token(subject=SUBJECT, client_id=CLIENT, scopes=["api.read"],
                                  audience=settings.TJWATER_API_AUDIENCE, ttl_s=600)  # fmt: skip
    answer = httpx2.get(
        f"{server.url}/api/v1/projects/{SLUG}/timeseries/element-history",
        params={"elements": json.dumps(element), "start": march.isoformat(),
                "end": (march + timedelta(hours=6)).isoformat(), "mode": "realtime_comparison", "limit": "50"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["data_gaps"] == march_history["data_gaps"]
