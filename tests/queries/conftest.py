"""Fixtures for the queries data tests: the demo utility, loaded once per test session."""

from __future__ import annotations

import pytest

from contexts.models import Project


@pytest.fixture
def project(db: None) -> Project:
    return Project.objects.create(slug="import-test", name="Import test")
