"""The project's own Python sources, for tests that read the code itself (``ast`` scans of imports)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def project_sources() -> list[str]:
    """Every Python file of the project, tests included, relative to the root: what git tracks plus files
    not yet added (never ignored ones such as ``.venv``)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [path for path in out.splitlines() if (ROOT / path).is_file()]


def read_source(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")
