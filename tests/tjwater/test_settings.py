"""Settings refuse unsafe production configurations at start (SPEC §12)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "TJWATER_"))
    }
    clean.update(env)
    clean["DJANGO_SETTINGS_MODULE"] = "tjwater.settings"
    clean["TJWATER_READ_ENV_FILE"] = "0"
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)",
        ],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "0"}, "SECRET_KEY must be set"),
        ({"DEBUG": "0", "SECRET_KEY": "x" * 50}, "ALLOWED_HOSTS must name"),
        (
            {"DEBUG": "0", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "127.0.0.1,localhost,[::1]"},
            "ALLOWED_HOSTS must name",
        ),
        (
            {"DEBUG": "0", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "mcp.example.org", "TJWATER_DEV_ISSUER": "1"},
            "TJWATER_DEV_ISSUER is a development aid",
        ),
    ],
)
def test_production_settings_refuse_unsafe_values(env: dict[str, str], message: str) -> None:
    result = load_settings(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_production_settings_start_with_required_values() -> None:
    result = load_settings(DEBUG="0", SECRET_KEY="x" * 50, ALLOWED_HOSTS="mcp.example.org")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_mcp_endpoint_and_dev_issuer_are_off_by_default() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.TJWATER_MCP_ENABLED, settings.TJWATER_DEV_ISSUER, settings.TJWATER_OIDC_ISSUER == '')",
        ],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "DEBUG": "1",
            "DJANGO_SETTINGS_MODULE": "tjwater.settings",
            "TJWATER_READ_ENV_FILE": "0",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "True"]
