"""Seeders of higher apps (e.g. evidence's DEMO sample), registered from their ``AppConfig.ready()``.

A module of its own, without the seed's imports (WNTR, pandas, pyarrow): registering at start-up must not
load the simulation stack into every server process (it tripled a worker's RSS). ``queries.demo.seed``
runs them with the demo project after the demo's own rows, and again from ``ensure_demo_loaded`` on a demo
seeded before they existed — each adds only what is missing and returns the rows it added by kind.
"""

from __future__ import annotations

from collections.abc import Callable

DEMO_SEEDERS: list[Callable[..., dict[str, int]]] = []


def register_demo_seeder(seeder: Callable[..., dict[str, int]]) -> None:
    if seeder not in DEMO_SEEDERS:
        DEMO_SEEDERS.append(seeder)
