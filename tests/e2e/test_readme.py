"""The README's shell blocks, run as written in a new shell (no variables but PATH and HOME, plus where the
server and its database are) against a real server: the commands a newcomer pastes cannot drift again.
The only change to a block is the server's address: ``127.0.0.1:8000`` (``make run``'s port) becomes the
test server's."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from contexts.models import Project, ProjectCompute
from queries.models import AnalysisRun, Job
from tests.support.servers import ROOT, ServerProcess, subprocess_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("demo_loaded")]


def readme_blocks() -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)


def _run(block: str, server: ServerProcess) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/root",
        # Where `make run`'s server keeps its state; here the test server's (same database, Redis, dev key:
        # tests/settings.py has set this process's REDIS_URL and TJWATER_DATA_DIR, the server inherits them).
        "DATABASE_URL": subprocess_database_url(),
        "REDIS_URL": os.environ["REDIS_URL"],
        "TJWATER_DATA_DIR": os.environ["TJWATER_DATA_DIR"],
        "PORT": str(server.port),
    }
    script = block.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_readme_has_the_blocks_this_test_knows() -> None:
    blocks = readme_blocks()
    assert len(blocks) == 5
    assert "mcp_token --sub alice" in blocks[0] and "--audience tjwater-api" in blocks[1]
    assert "--crs EPSG:3089" in blocks[2] and "import_gis" in blocks[2]
    assert "run_analysis burst --project my-utility" in blocks[3]
    assert "run_analysis valve_isolation --project tianjin-demo" in blocks[4]


def test_every_readme_block_runs_as_written(start_server: Callable[..., ServerProcess], django_db_blocker: Any) -> None:
    server = start_server()
    first, rest, onboard, analysis, on_demo = readme_blocks()

    out = _run(first, server)
    assert out.returncode == 0, out.stderr
    assert '"context_handle"' in out.stdout and "context revoked" in out.stdout
    assert "context revoked by DELETE: HTTP 204" in out.stdout  # the context the block creates is not left live

    out = _run(rest, server)
    assert out.returncode == 0, out.stderr
    assert '"element_id":"LINK-1523"' in out.stdout.replace(" ", "")

    out = _run(onboard, server)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "project created: my-utility (America/New_York, US units)" in lines
    assert any(line.startswith("imported ky4.inp into my-utility (EPSG:3089 → EPSG:4326)") for line in lines), (
        out.stdout
    )
    assert any("12 features, 0 skipped, 12 linked to pipes" in line for line in lines), out.stdout
    assert "context created: project=my-utility purpose=ordinary_chat" in out.stdout
    assert '"source": "model_network"' in out.stdout and lines[-1] == "context revoked"
    # Run twice: the walk starts afresh (project_delete) and gives the same answer.
    again = _run(onboard, server)
    assert again.returncode == 0, again.stderr
    # Running an analysis on it (issue 42): in the command's process, through the same runner as a worker.
    ran = _run(analysis, server)
    assert ran.returncode == 0, ran.stderr
    assert '"kind": "burst"' in ran.stdout and re.search(
        r"run burst-\S+ succeeded: 3 results, \d+ series rows", ran.stdout
    )
    with django_db_blocker.unblock():
        assert Project.objects.get(slug="my-utility").unit_system == "US"
        subprocess.run(
            ["scripts/dev", "manage.py", "project_delete", "my-utility", "--reason", "test over"],
            cwd=ROOT, env={"PATH": "/usr/bin:/bin", "DATABASE_URL": subprocess_database_url()}, check=True,
            capture_output=True,
        )  # fmt: skip
    # A valve isolation on the demo's own model version and valve layer; the demo is put back as it was
    # (its analyses off, none of the block's runs left) for the tests that share it.
    with django_db_blocker.unblock():
        had = set(AnalysisRun.objects.filter(project__slug="tianjin-demo").values_list("pk", flat=True))
    try:
        ran = _run(on_demo, server)
        assert ran.returncode == 0, ran.stderr
        assert re.search(r"run valve-isolation-\S+ succeeded: 3 results, 0 series rows", ran.stdout), ran.stdout
    finally:
        with django_db_blocker.unblock():
            added = AnalysisRun.objects.filter(project__slug="tianjin-demo").exclude(pk__in=had)
            jobs = list(added.values_list("job_id", flat=True))
            added.delete()
            Job.objects.filter(pk__in=[j for j in jobs if j is not None]).delete()
            ProjectCompute.objects.filter(project__slug="tianjin-demo").delete()


def test_manage_py_without_configuration_is_one_clear_line() -> None:
    proc = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "manage.py", "mcp_token", "--sub", "alice"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "TJWATER_READ_ENV_FILE": "0"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "manage.py: SECRET_KEY must be set when DEBUG=False (for local use run it through scripts/dev, which sets "
        "the demo configuration: scripts/dev manage.py mcp_token …)"
    ]
    help_out = subprocess.run(
        ["scripts/dev", "manage.py", "help"], cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert help_out.returncode == 0, help_out.stderr
    for command in ("project_create", "project_delete", "import_network", "import_gis", "mcp_token", "seed_demo"):
        assert f"    {command}\n" in help_out.stdout


def test_the_run_banner_and_the_client_docstring_print_commands_that_work_in_a_new_shell() -> None:
    banner = (ROOT / "scripts" / "run.sh").read_text()
    token_line = next(line for line in banner.splitlines() if line.strip().startswith("token:"))
    command = token_line.split("token:", 1)[1].strip()
    assert command.startswith("scripts/dev manage.py mcp_token ")
    proc = subprocess.run(
        ["bash", "-e", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": subprocess_database_url(),
             "TJWATER_DATA_DIR": os.environ["TJWATER_DATA_DIR"]},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().count(".") == 2  # one JWT, header.payload.signature
    doc = (ROOT / "scripts" / "example_client.py").read_text().split('"""')[1]
    assert "scripts/dev scripts/example_client.py" in doc and ".venv/bin/python scripts/example_client.py" not in doc
