"""Fixtures of the browser tests: the real OpenID provider (tests/interop), real uvicorn servers trusting
it, and a fresh headless Chromium per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth import get_user_model

from tests.e2e.browser import Browser
from tests.evidence.factories import EvidenceWorld, evidence_world
from tests.support.idp import USERS, IdentityProvider, idp_env
from tests.support.servers import ServerProcess


@pytest.fixture
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """A new browser profile (no cookies) with headless Chromium."""
    started = Browser(tmp_path_factory.mktemp("browser") / "driver.log")
    yield started
    started.close()


@pytest.fixture
def sso_users(django_db_blocker: object) -> Iterator[None]:
    """Users the server process creates at sign-in are removed afterwards (the database is shared)."""
    yield
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        get_user_model().objects.filter(username__in=[sub for sub, _ in USERS.values()]).delete()


@pytest.fixture(scope="module")
def admin_server(start_server: Callable[..., ServerProcess], idp: IdentityProvider) -> ServerProcess:
    """A server (DEBUG on, as `make run`) whose admin signs operators in through the provider."""
    return start_server(**idp_env(idp))


@pytest.fixture(scope="module")
def world(db_unblocked: None) -> Iterator[EvidenceWorld]:
    """The evidence world of tests/evidence/factories.py (test_evidence_resources.py)."""
    with evidence_world() as built:
        yield built
