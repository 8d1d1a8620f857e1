"""The worked investigation (issue 12) runs as written against a real server on the demo: a worker's
task_execution context, queries with request keys saved as evidence, a forced disconnect retried with the
same key (one evidence), a task_reader reading the parent run's evidence, an ordinary_chat context reading
none of it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from evidence.models import EvidenceSnapshot, QueryReceipt
from tests.support.servers import ROOT, ServerProcess, subprocess_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]


def test_investigation_walk(start_server: Callable[..., ServerProcess], django_db_blocker: object) -> None:
    server = start_server()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        before = EvidenceSnapshot.objects.count()
    result = subprocess.run(
        [sys.executable, "scripts/investigation_walk.py", "--url", server.url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    assert "→ evidence" in out
    assert "disconnected call + retry with the same request key → one evidence" in out
    assert "reader: resources/read →" in out
    assert "ordinary_chat: resources/read refused" in out
    assert out.rstrip().endswith("contexts revoked")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        made = EvidenceSnapshot.objects.count() - before
        assert made >= 3
        # Every snapshot this walk saved has exactly one complete receipt (the retry made none).
        newest = EvidenceSnapshot.objects.order_by("-created_at")[:made]
        for snapshot in newest:
            assert QueryReceipt.objects.filter(snapshot=snapshot, state="complete").count() == 1
