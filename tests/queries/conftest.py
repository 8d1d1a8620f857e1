"""Fixtures for the queries data tests: the demo utility, loaded once per test session."""

from __future__ import annotations

import pytest

from contexts.models import Project
from queries.demo.seed import ensure_demo_loaded


@pytest.fixture(scope="session")
def demo_loaded(django_db_setup: None, django_db_blocker: object) -> None:
    """The demo (tianjin-demo, demo-b) committed in the test database, once per session. A lead-level
    ``django_db_setup`` may already have loaded it; ``ensure_demo_loaded`` then does nothing."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        ensure_demo_loaded()


@pytest.fixture
def project(db: None) -> Project:
    return Project.objects.create(slug="import-test", name="Import test")
