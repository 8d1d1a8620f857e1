"""``mcp_app.checks.check_verified_versions`` through Django's check framework (issue 18 §3): the
installed mcp and Django are the releases the fenced private parts were verified against."""

from __future__ import annotations

import django
import pytest
from django.core.checks import Error, Tags, run_checks

from mcp_app import checks, django_internals, sdk

VERSION_CHECKS = ("mcp_app.E008", "mcp_app.E009")


def version_errors() -> list[Error]:
    return [m for m in run_checks(tags=[Tags.compatibility]) if m.id in VERSION_CHECKS]


def test_the_pinned_versions_pass() -> None:
    assert checks.installed_version("mcp") == sdk.VERIFIED_MCP_VERSION == "2.3.0"
    assert django.VERSION[:2] == django_internals.VERIFIED_DJANGO == (5, 2)
    assert version_errors() == []


def test_another_mcp_is_refused_naming_what_to_reverify(monkeypatch: pytest.MonkeyPatch) -> None:
    real = checks.installed_version
    monkeypatch.setattr(checks, "installed_version", lambda dist: "2.4.0" if dist == "mcp" else real(dist))
    [error] = version_errors()
    assert error.id == "mcp_app.E008"
    assert error.is_serious()
    assert "mcp 2.4.0 is installed" in error.msg and "2.3.0" in error.msg
    for name in sdk.FENCED:
        assert name in error.hint


def test_another_django_release_is_refused_naming_what_to_reverify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(django, "VERSION", (6, 0, 0, "final", 0))
    [error] = version_errors()
    assert error.id == "mcp_app.E009"
    assert "verified against Django 5.2.x" in error.msg
    for name in django_internals.FENCED:
        assert name in error.hint


def test_a_django_patch_release_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(django, "VERSION", (5, 2, 99, "final", 0))
    assert version_errors() == []
