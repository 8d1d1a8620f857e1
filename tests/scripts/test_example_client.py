"""The README walk runs as written: mint a token, create a context, call tools with the SDK, revoke."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from contexts.models import QueryContext
from tests.support.servers import ROOT, ServerProcess, subprocess_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]


def test_example_client_walks_the_demo(start_server: Callable[..., ServerProcess], django_db_blocker: object) -> None:
    server = start_server()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    result = subprocess.run(
        [sys.executable, "scripts/example_client.py", "--url", server.url, "--project", "tianjin-demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("context created: project=tianjin-demo purpose=ordinary_chat")
    assert lines[1].startswith('{"source": "model_network", "data": {"items": [{"element_type": "junction"')
    assert lines[2].startswith('{"source": "model_network", "data": {"element_type": "junction", "element_id": ')
    assert lines[-1] == "context revoked"
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        latest = QueryContext.objects.filter(project__slug="tianjin-demo").order_by("-created_at").first()
        assert latest is not None
        assert latest.revoked_at is not None
