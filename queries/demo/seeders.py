"""Seeders of higher apps (e.g. evidence's DEMO sample), registered from their ``AppConfig.ready()``.

A module of its own, without the seed's imports (WNTR, pandas, pyarrow): registering at start-up must not
load the simulation stack into every server process (it tripled a worker's RSS). ``queries.demo.seed``
runs them with the demo project after the demo's own rows, and again from ``ensure_demo_loaded`` on a demo
seeded before they existed — each adds only what is missing and returns the rows it added by kind.

The demo's analysis runs are computed by the app that runs analyses (its kinds and writer, so that the
demo's runs and a utility's cannot drift apart); ``queries`` does not import it: the app registers the
dotted path of its runner here (``register_demo_runner``) and the seed calls ``demo_runner()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DEMO_SEEDERS: list[Callable[..., dict[str, int]]] = []
_DEMO_RUNNER: list[str] = []


def register_demo_seeder(seeder: Callable[..., dict[str, int]]) -> None:
    if seeder not in DEMO_SEEDERS:
        DEMO_SEEDERS.append(seeder)


def register_demo_runner(dotted_path: str) -> None:
    """The function that computes and stores one of the demo's analysis runs (a dotted path, imported on
    first use: registering loads nothing)."""
    _DEMO_RUNNER[:] = [dotted_path]


def demo_runner() -> Callable[..., Any]:
    """The registered runner of the demo's analysis runs (``LookupError`` when no app registered one)."""
    from django.utils.module_loading import import_string

    if not _DEMO_RUNNER:
        raise LookupError("no app registered the demo's analysis runner (is 'analyses' in INSTALLED_APPS?)")
    runner: Callable[..., Any] = import_string(_DEMO_RUNNER[0])
    return runner
