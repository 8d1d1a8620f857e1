"""The embedded dev issuer (R-AUTH-6): key file, served documents, minted tokens, refusal when off."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.test.utils import override_settings

from contexts import dev_issuer, tokens
from tests.support.caches import reset_process_caches


@pytest.fixture
def data_dir(tmp_path: Path, settings: object, fresh_caches: None) -> Iterator[Path]:
    settings.TJWATER_DATA_DIR = tmp_path  # type: ignore[attr-defined]
    reset_process_caches()
    yield tmp_path


def test_key_file_is_created_0600_and_reused(data_dir: Path) -> None:
    first = dev_issuer.public_jwk()
    path = data_dir / dev_issuer.KEY_FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    dev_issuer.reset_caches()
    assert dev_issuer.public_jwk() == first  # read back, not regenerated
    assert [p.name for p in data_dir.iterdir()] == [dev_issuer.KEY_FILENAME]  # no temp files left


def test_concurrent_first_start_agrees_on_one_key(data_dir: Path) -> None:
    path = data_dir / dev_issuer.KEY_FILENAME
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda _: dev_issuer._create_key_file(path), range(4)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in data_dir.iterdir()] == [dev_issuer.KEY_FILENAME]


def test_world_readable_key_is_refused(data_dir: Path) -> None:
    dev_issuer.public_jwk()
    (data_dir / dev_issuer.KEY_FILENAME).chmod(0o644)
    dev_issuer.reset_caches()
    with pytest.raises(ImproperlyConfigured):
        dev_issuer.public_jwk()


def test_minted_token_verifies_with_local_keys(data_dir: Path) -> None:
    raw = dev_issuer.mint_token(subject="alice", client_id="tjwater-agent-mcp", scopes=["mcp.query"], ttl_s=60)
    verified = tokens.verify_token(raw)
    assert (verified.issuer, verified.subject, verified.client_id) == (
        "http://127.0.0.1:8000/dev-issuer",
        "alice",
        "tjwater-agent-mcp",
    )
    assert verified.scopes == frozenset({"mcp.query"})


def test_documents_are_served_when_enabled(data_dir: Path) -> None:
    client = Client()
    discovery = client.get("/dev-issuer/.well-known/openid-configuration").json()
    assert discovery["issuer"] == "http://127.0.0.1:8000/dev-issuer"
    assert discovery["jwks_uri"] == "http://127.0.0.1:8000/dev-issuer/jwks"
    jwks = client.get("/dev-issuer/jwks").json()
    assert jwks == dev_issuer.public_jwks()
    assert "d" not in jwks["keys"][0]  # public part only


@override_settings(TJWATER_DEV_ISSUER=False)
def test_disabled_issuer_serves_nothing_and_mints_nothing(data_dir: Path) -> None:
    client = Client()
    assert client.get("/dev-issuer/.well-known/openid-configuration").status_code == 404
    assert client.get("/dev-issuer/jwks").status_code == 404
    with pytest.raises(ImproperlyConfigured):
        dev_issuer.mint_token(subject="a", client_id="c", scopes=[])


def test_settings_refuse_dev_issuer_without_debug() -> None:
    env = {
        **os.environ,
        "DEBUG": "0",
        "TJWATER_DEV_ISSUER": "1",
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "example.org",
    }
    env.update(TJWATER_READ_ENV_FILE="0", DJANGO_SETTINGS_MODULE="tjwater.settings")
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "TJWATER_DEV_ISSUER is a development aid" in result.stderr
