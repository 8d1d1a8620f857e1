"""The demo investigation's four questions (issue 22), answered by ``scripts/investigation_questions.py``
over a real server twice — with the 25 original tools and with the new ones: both give the same answers,
each answer is the direct computation (the baseline table and GIS districts, the cleaned readings and the
baseline series interpolated with numpy, a walk over WNTR's graph of the demo's .inp with the baseline's
flows), and the new tools answer each question in at most 2 calls and 12 KB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.models import Max

from contexts.models import ContextEvent, QueryContext
from queries.models import ElementGisProperties, NodeBaseline
from tests.queries.services.test_ranking import BREAK, NOON, reference_deviation
from tests.queries.services.test_topology import link_ends, net6, reference_trace
from tests.support.servers import ROOT, ServerProcess, subprocess_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]

AT = datetime(2026, 11, 1, 9, tzinfo=UTC)


@pytest.fixture
def contexts_made(django_db_blocker: Any) -> Iterator[None]:
    """The contexts the script binds through the server are committed: deleted afterwards, so that later
    tests of the session see none of them."""
    with django_db_blocker.unblock():
        last = QueryContext.objects.aggregate(last=Max("pk"))["last"] or 0
    yield
    with django_db_blocker.unblock():
        made = QueryContext.objects.filter(pk__gt=last)
        ContextEvent.objects.filter(context_id__in=made.values("pk")).delete()
        made.delete()


@pytest.mark.usefixtures("contexts_made")
def test_four_questions(start_server: Callable[..., ServerProcess], django_db_blocker: object) -> None:
    server = start_server()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    result = subprocess.run(
        [sys.executable, "scripts/investigation_questions.py", "--url", server.url, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    rows = report["questions"]
    assert len(rows) == 4 and all(row["agree"] for row in rows)
    for row in rows:
        assert row["new"]["calls"] <= 2 and row["new"]["bytes"] <= 12 * 1024, row["question"]
        assert row["original"]["calls"] > row["new"]["calls"], row["question"]
    q1, q2, q3, q4 = (row["new"]["answer"] for row in rows)
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        hexi = ElementGisProperties.objects.filter(
            project__slug="tianjin-demo", element_type="junction", district="Hexi"
        )
        lowest = (
            NodeBaseline.objects.filter(
                project__slug="tianjin-demo", element_type="junction", time=AT, element_id__in=hexi.values("element_id")
            )
            .order_by("pressure", "element_id")
            .values_list("element_id", "pressure")[:10]
        )
        assert [tuple(a) for a in q1] == list(lowest)
        deviation = reference_deviation(BREAK, NOON, "pressure")
        order = sorted((k for k, v in deviation.items() if v[3]), key=lambda k: (-deviation[k][0], k))[:10]
        assert [d for d, _ in q2] == order
        assert [m for _, m in q2] == pytest.approx([deviation[d][0] for d in order], rel=1e-9)
        _, path = reference_trace("JUNCTION-1304", "upstream", AT)
        assert q3 == path and net6().get_node(q3[-1]).node_type in ("Reservoir", "Tank")
    ends = set(link_ends("LINK-1523"))
    expected = sorted(
        name
        for name, link in net6().pipes()
        if name != "LINK-1523" and {link.start_node_name, link.end_node_name} & ends
    )
    assert q4 == expected
