"""Settings refuse unsafe production configurations at start (SPEC §12)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import ROOT


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


PRODUCTION = {"DEBUG": "0", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "mcp.example.org"}
OIDC_ADMIN = {
    "OIDC_RP_CLIENT_ID": "tjwater-admin",
    "OIDC_RP_CLIENT_SECRET": "not-a-real-secret",
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.test/realms/t/auth",
    "OIDC_OP_TOKEN_ENDPOINT": "https://sso.example.test/realms/t/token",
    "OIDC_OP_USER_ENDPOINT": "https://sso.example.test/realms/t/userinfo",
    "OIDC_OP_JWKS_ENDPOINT": "https://sso.example.test/realms/t/certs",
    "OIDC_OP_ISSUER": "https://sso.example.test/realms/t",
}


def settings_values(expression: str, **env: str) -> list[str]:
    """``repr`` of ``expression`` (over ``settings``) in a fresh process whose environment is ``env``
    only (no ``.env`` file either), one line per comma-separated value."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        f"print(*[repr(v) for v in ({expression},)], sep='\\n')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "tjwater.settings",
            "TJWATER_READ_ENV_FILE": "0",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_with_no_configuration_debug_the_mcp_endpoint_and_the_dev_issuer_are_off() -> None:
    # Issue 9: nothing but the two values production requires; every switch stays at its safe default.
    values = settings_values(
        "settings.DEBUG, settings.TJWATER_MCP_ENABLED, settings.TJWATER_DEV_ISSUER, settings.SECRET_KEY",
        SECRET_KEY="y" * 50,
        ALLOWED_HOSTS="mcp.example.org",
    )
    assert values == ["False", "False", "False", repr("y" * 50)]


def test_production_cookies_are_secure_and_hsts_is_on() -> None:
    values = settings_values(
        "settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.SESSION_COOKIE_HTTPONLY, "
        "settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_PROXY_SSL_HEADER",
        **PRODUCTION,
    )
    assert values == ["True", "True", "True", str(365 * 24 * 3600), "False", "None"]


def test_the_proxy_header_is_trusted_only_when_a_tls_proxy_is_declared() -> None:
    values = settings_values(
        "settings.SECURE_PROXY_SSL_HEADER, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_HSTS_SECONDS",
        **PRODUCTION,
        TJWATER_BEHIND_TLS_PROXY="1",
        TJWATER_HSTS_INCLUDE_SUBDOMAINS="1",
        TJWATER_HSTS_SECONDS="600",
    )
    assert values == [repr(("HTTP_X_FORWARDED_PROTO", "https")), "True", "600"]


def test_development_keeps_plain_http_cookies_and_no_hsts() -> None:
    values = settings_values("settings.SESSION_COOKIE_SECURE, settings.SECURE_HSTS_SECONDS", DEBUG="1")
    assert values == ["False", "0"]


def test_oidc_admin_sessions_are_refreshed_at_the_provider() -> None:
    expression = (
        "settings.MIDDLEWARE.index('mozilla_django_oidc.middleware.SessionRefresh') - "
        "settings.MIDDLEWARE.index('django.contrib.auth.middleware.AuthenticationMiddleware'), "
        "settings.OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"
    )
    assert settings_values(expression, **PRODUCTION, **OIDC_ADMIN) == ["1", "900"]
    assert settings_values(expression, **PRODUCTION, **OIDC_ADMIN, OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS="120") == [
        "1",
        "120",
    ]
    # Without OIDC admin there is nothing to refresh.
    assert settings_values("'mozilla_django_oidc.middleware.SessionRefresh' in settings.MIDDLEWARE", **PRODUCTION) == [
        "False"
    ]


SESSION_REFRESH_PROBE = """
import time
import django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
user = get_user_model().objects.create_user("session-refresh-probe", is_staff=True)
try:
    client = Client()
    client.force_login(user, backend="tjwater.oidc.OperatorOIDCBackend")
    for renew_at in (time.time() + 60, time.time() - 1):
        session = client.session
        session["oidc_id_token_expiration"] = renew_at
        session.save()
        response = client.get("/admin/")
        print(response.status_code, response.headers.get("Location", ""))
finally:
    user.delete()
"""


@pytest.mark.django_db
def test_an_expired_admin_session_is_sent_back_to_the_provider_silently() -> None:
    from tests.support.servers import subprocess_database_url

    result = subprocess.run(
        [sys.executable, "-c", SESSION_REFRESH_PROBE],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "tjwater.settings",
            "TJWATER_READ_ENV_FILE": "0",
            "DEBUG": "1",
            "DATABASE_URL": subprocess_database_url(),
            "TJWATER_DB_POOL": "0",
            **OIDC_ADMIN,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    fresh, expired = result.stdout.splitlines()
    assert fresh == "200 "
    status, location = expired.split(" ", 1)
    assert status == "302"
    assert location.startswith(OIDC_ADMIN["OIDC_OP_AUTHORIZATION_ENDPOINT"] + "?")
    assert "prompt=none" in location and "client_id=tjwater-admin" in location


def test_logging_installs_the_handle_redaction() -> None:
    expression = (
        "settings.LOGGING_CONFIG, "
        "[type(f).__name__ for f in __import__('logging').getLogger('django.request').filters], "
        "[type(f).__name__ for h in __import__('logging').getLogger().handlers for f in h.filters]"
    )
    assert settings_values(expression, DEBUG="1") == [
        repr("tjwater.logging.configure"),
        repr(["RedactHandlePaths"]),
        repr(["RedactHandlePaths"]),
    ]


LEGACY_DEMO_ENV = (
    "# Local demo configuration written by scripts/setup.sh. Not for production: see .env.example.\n"
    "DEBUG=1\nTJWATER_MCP_ENABLED=1\nTJWATER_DEV_ISSUER=1\n"
)


def run_setup_configuration_step(workdir: Path) -> None:
    """Run the "Local configuration" section of scripts/setup.sh (its own text, up to the next
    section) in ``workdir``."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    start = script.index("# --- Local configuration")
    end = script.index("\n# --- ", start + 1)
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "say() { :; }\n" + script[start:end]],
        cwd=workdir,
        check=True,
        timeout=30,
    )


def test_setup_never_writes_a_dotenv(tmp_path: Path) -> None:
    run_setup_configuration_step(tmp_path)
    assert not (tmp_path / ".env").exists()
    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert not re.search(r"(>|tee|cp\s.*)\s*\.env\b", script)


def test_setup_removes_the_demo_dotenv_an_earlier_version_wrote(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(LEGACY_DEMO_ENV)
    run_setup_configuration_step(tmp_path)
    assert not (tmp_path / ".env").exists()


def test_setup_keeps_an_operators_own_dotenv(tmp_path: Path) -> None:
    own = LEGACY_DEMO_ENV + "SECRET_KEY=operator-chose-this\n"
    (tmp_path / ".env").write_text(own)
    run_setup_configuration_step(tmp_path)
    assert (tmp_path / ".env").read_text() == own


def test_make_run_passes_the_demo_configuration_itself() -> None:
    script = (ROOT / "scripts" / "run.sh").read_text()
    for line in ("export DEBUG=${DEBUG:-1}", "export TJWATER_MCP_ENABLED=${TJWATER_MCP_ENABLED:-1}",
                 "export TJWATER_DEV_ISSUER=${TJWATER_DEV_ISSUER:-1}"):  # fmt: skip
        assert line in script


def _settings_env_reads() -> set[str]:
    """Every variable ``tjwater/settings.py`` reads: the first argument of each ``env.<cast>("NAME", …)``
    call (django-environ), found in the syntax tree so a new read cannot hide behind formatting."""
    import ast

    tree = ast.parse((ROOT / "tjwater" / "settings.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def test_env_example_documents_every_setting_the_code_reads() -> None:
    """Issue 23 item 17: ``.env.example`` lists every variable settings read, and nothing they do not."""
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    reads = _settings_env_reads()
    assert len(reads) > 40  # the parser found the reads (not an empty set that trivially matches)
    assert sorted(reads - documented) == []
    assert sorted(documented - reads) == []
