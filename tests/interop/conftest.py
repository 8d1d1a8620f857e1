"""Fixtures of the interop tier: a real Keycloak-shaped OpenID provider process (devtools/idp)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from tests.conftest import ServerProcess
from tests.interop.idp import ADMIN_CLIENT_ID, ADMIN_CLIENT_SECRET, IdentityProvider, start_provider


@pytest.fixture(scope="session")
def provider_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., IdentityProvider]]:
    """``provider_factory(**env)`` starts a provider on a free port; all are stopped at session end."""
    started: list[IdentityProvider] = []
    logs = tmp_path_factory.mktemp("idp")

    def _start(**extra_env: str) -> IdentityProvider:
        provider = start_provider(logs / f"idp-{len(started)}.log", **extra_env)
        started.append(provider)
        return provider

    yield _start
    for provider in started:
        provider.stop()


@pytest.fixture(scope="session")
def idp(provider_factory: Callable[..., IdentityProvider]) -> IdentityProvider:
    """One shared provider for tests that do not rotate its keys or stop it."""
    return provider_factory()


def idp_env(idp: IdentityProvider, **extra: str) -> dict[str, str]:
    """Server environment trusting ``idp`` as the one issuer: bearer tokens on /mcp and the context API
    (the dev issuer off) and operator sign-in to the admin (mozilla-django-oidc)."""
    return {
        "TJWATER_OIDC_ISSUER": idp.issuer,
        "TJWATER_DEV_ISSUER": "0",
        "TJWATER_MCP_AUDIENCE": idp.audience,
        "OIDC_RP_CLIENT_ID": ADMIN_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": ADMIN_CLIENT_SECRET,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": idp.endpoint("auth"),
        "OIDC_OP_TOKEN_ENDPOINT": idp.endpoint("token"),
        "OIDC_OP_USER_ENDPOINT": idp.endpoint("userinfo"),
        "OIDC_OP_JWKS_ENDPOINT": idp.endpoint("certs"),
        "OIDC_OP_END_SESSION_ENDPOINT": idp.endpoint("logout"),
        **extra,
    }


@pytest.fixture(scope="session")
def idp_server(start_server: Callable[..., ServerProcess], idp: IdentityProvider) -> ServerProcess:
    """One server trusting the shared provider (shared by the admin and the /mcp interop tests)."""
    return start_server(**idp_env(idp))


@pytest.fixture(autouse=True)
def _test_database_only(request: pytest.FixtureRequest) -> None:
    """The servers these tests start must run against the test database, never a developer's."""
    if "start_server" in request.fixturenames:
        from django.conf import settings

        name = str(settings.DATABASES["default"]["NAME"])
        assert name.startswith("test_"), f"the e2e server would use database {name!r}, not the test database"


@dataclass
class Members:
    """A project with members committed to the shared test database (the server processes see them)."""

    project_slug: str
    principals: dict[str, int]


@pytest.fixture(scope="session")
def members_factory(django_db_setup: None, django_db_blocker: Any) -> Iterator[Callable[..., Members]]:
    """``members_factory(issuer, {subject: permissions})`` commits a fresh project with those members;
    everything it created is deleted at session end."""
    from contexts.models import Membership, Principal, Project

    created: list[Members] = []

    def _make(issuer: str, subjects: dict[str, list[str]]) -> Members:
        slug = f"interop-{secrets.token_hex(4)}"
        with django_db_blocker.unblock():
            project = Project.objects.create(slug=slug, name=f"Interop {slug}")
            ids: dict[str, int] = {}
            for subject, permissions in subjects.items():
                principal, _ = Principal.objects.get_or_create(issuer=issuer, subject=subject)
                Membership.objects.create(principal=principal, project=project, permissions=permissions)
                ids[subject] = principal.pk
        members = Members(project_slug=slug, principals=ids)
        created.append(members)
        return members

    yield _make
    with django_db_blocker.unblock():
        for members in created:
            Project.objects.filter(slug=members.project_slug).delete()
            Principal.objects.filter(pk__in=members.principals.values(), memberships__isnull=True).delete()


def create_context(server_url: str, token: str, project: str, *, session_id: str | None = None) -> str:
    """Bind an ordinary_chat context through the real REST API and return its handle."""
    response = httpx2.post(
        f"{server_url}/api/v1/mcp-query-contexts",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "project": project,
            "session_id": session_id or f"interop-{secrets.token_hex(4)}",
            "purpose": "ordinary_chat",
        },
        timeout=15,
    )
    assert response.status_code == 201, (response.status_code, response.text)
    return str(response.json()["context_handle"])
