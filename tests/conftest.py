"""Shared fixtures: real PostGIS, real Redis, real uvicorn processes (``tests/support/servers.py``), the
Net1 world of the MCP tests (``tests/support/net1.py``), the OpenID provider of the interop and browser
tests (``tests/support/idp.py``) and the in-process JWKS issuer (``tests/support/tokens.py``). Fixtures
only: the helpers live in tests/support, and no test module imports a conftest."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from tests.support import net1, servers
from tests.support.caches import reset_process_caches
from tests.support.idp import IdentityProvider, Members, create_members, delete_members, idp_env, start_provider
from tests.support.net1 import PRINCIPALS, PROJECT_SLUG, SERVER_ENV, SUBJECT_PREFIX, E2EProject
from tests.support.servers import ServerProcess, subprocess_database_url
from tests.support.tokens import Issuer

# Rows committed once per session — the demo utility (``demo_loaded``), the Net1 world (``e2e_project``),
# the evidence world — are shared by every package, and a ``transaction=True`` test ends by flushing every
# table: so no test anywhere under tests/ may use one. Enforced here, at collection, not by comment.
TRANSACTIONAL_FIXTURES = frozenset({"transactional_db", "django_db_reset_sequences", "live_server"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail the collection, naming the tests, if any test would flush the database (see above)."""
    offenders = []
    for item in items:
        marker = item.get_closest_marker("django_db")
        flushing = marker is not None and (
            marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences") or (marker.args[:1] == (True,))
        )
        if flushing or TRANSACTIONAL_FIXTURES & set(getattr(item, "fixturenames", ())):
            offenders.append(item.nodeid)
    if offenders:
        raise pytest.UsageError(
            "django_db(transaction=True) (or a transactional fixture) is not allowed in this suite: its flush "
            "would delete the rows committed once per session (the demo, the Net1 world) that other tests use. "
            "Commit rows with django_db_blocker.unblock() and delete them afterwards instead. Offending tests:\n  "
            + "\n  ".join(offenders)
        )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any, django_db_keepdb: bool) -> Iterator[None]:
    """Always create the test database, even when no collected test is marked ``django_db``.

    pytest-django sets up only the aliases that some collected test marks; end-to-end tests reach the
    database through uvicorn processes and committed rows instead, so a run of only those files would
    otherwise point the servers at the developer's own database."""
    from django.test.utils import setup_databases, teardown_databases

    if str(settings.DATABASES["default"]["NAME"]).startswith("test_"):
        yield
        return
    with django_db_blocker.unblock():
        # serialized_aliases=set(): nothing here uses serialized rollback; serializing the demo's tables
        # would take minutes.
        config = setup_databases(
            verbosity=0, interactive=False, aliases={"default"}, keepdb=django_db_keepdb, serialized_aliases=set()
        )
    yield
    if not django_db_keepdb:
        with django_db_blocker.unblock():
            teardown_databases(config, verbosity=0)


@pytest.fixture(scope="session")
def demo_loaded(django_db_setup: None, django_db_blocker: Any) -> None:
    """The demo utility (``tianjin-demo``, ``demo-b``, alice/bob/carol/svc-worker) committed in the test
    database once per session, so uvicorn processes see it too. Tests using it must not flush tables
    (no ``transaction=True``)."""
    from queries.demo.seed import ensure_demo_loaded

    with django_db_blocker.unblock():
        ensure_demo_loaded()


#: Servers started by ``start_server`` and not yet stopped, each with whether it serves the whole session.
_RUNNING: list[tuple[ServerProcess, bool]] = []


@pytest.fixture(scope="session")
def start_server(
    django_db_setup: None, django_db_blocker: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., ServerProcess]]:
    """Start uvicorn processes on free ports against the (committed) test database.

    ``start_server(**env)`` returns a running server; extra keyword arguments become environment
    variables of that process. A server is stopped at the end of the test module that started it
    (``_stop_module_servers``) — each holds its own connection pools, so a session must not accumulate
    one per module — unless it was started with ``_session=True`` for a session-scoped fixture, which
    stops it at the end of the session.
    """
    logs = tmp_path_factory.mktemp("uvicorn")

    def _start(*, _session: bool = False, **extra_env: str) -> ServerProcess:
        server = servers.launch(
            {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
            | extra_env,
            logs,
        )
        _RUNNING.append((server, _session))
        return server

    yield _start
    for server, _ in _RUNNING:
        server.stop()
    _RUNNING.clear()


@pytest.fixture(scope="module", autouse=True)
def _stop_module_servers() -> Iterator[None]:
    """Stop the servers this module started (its module fixtures are torn down before this one)."""
    before = len(_RUNNING)
    yield
    for server, session in _RUNNING[before:]:
        if not session:
            server.stop()
    _RUNNING[before:] = [(server, session) for server, session in _RUNNING[before:] if session]


@pytest.fixture(scope="session")
def live_server_url(start_server: Callable[..., ServerProcess]) -> str:
    """One shared server with the default test settings."""
    return start_server(_session=True).url


@pytest.fixture
def test_redis() -> Iterator[redis.Redis]:
    """The reserved test Redis database, emptied before and after the test."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


# --- the Net1 world of the MCP endpoint tests (tests/support/net1.py) ---------------------------------


@pytest.fixture(scope="session")
def e2e_project(django_db_setup: None, django_db_blocker: Any) -> Iterator[E2EProject]:
    """Committed rows (the uvicorn processes use the same test database), removed at the end: the
    project with Net1 and its members."""
    from contexts.models import ContextEvent, Membership, Principal, Project
    from queries.importer.epanet import import_network

    with django_db_blocker.unblock():
        Project.objects.filter(slug=PROJECT_SLUG).delete()
        project = Project.objects.create(slug=PROJECT_SLUG, name="MCP end-to-end (Net1)")
        import_network(project=project, inp_path=net1.NET1, baseline_hours=0)
        for subject, permissions in PRINCIPALS.items():
            principal, _ = Principal.objects.get_or_create(
                issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT_PREFIX + subject
            )
            if permissions is not None:
                Membership.objects.create(principal=principal, project=project, permissions=permissions)
    yield E2EProject(project_id=project.pk, slug=PROJECT_SLUG)
    with django_db_blocker.unblock():
        ContextEvent.objects.filter(project_id=project.pk).delete()
        Project.objects.filter(pk=project.pk).delete()
        Principal.objects.filter(
            issuer=settings.TJWATER_DEV_ISSUER_ID, subject__in=[SUBJECT_PREFIX + s for s in PRINCIPALS]
        ).delete()


@pytest.fixture(scope="module")
def e2e_handles(e2e_project: E2EProject, django_db_blocker: Any) -> Iterator[dict[str, str]]:
    """One committed ordinary_chat context per member (created like the REST API creates them), for the
    module's tests, by the member's unprefixed name; deleted after the module so other test packages never
    see them."""
    from contexts.models import ContextEvent, QueryContext

    handles: dict[str, str] = {}
    with django_db_blocker.unblock(), override_settings(TJWATER_CONTEXT_TTL_S=3600):
        for subject, permissions in PRINCIPALS.items():
            if permissions is not None:
                handles[subject] = net1.bind_context(subject, f"mcp-e2e-{subject}")
    yield handles
    with django_db_blocker.unblock():
        QueryContext.objects.filter(project_id=e2e_project.project_id).delete()
        ContextEvent.objects.filter(project_id=e2e_project.project_id).delete()


@pytest.fixture
def handle(e2e_handles: dict[str, str]) -> Callable[..., str]:
    """``handle(subject="alice")``: the context handle of one of the e2e members (by its unprefixed name)."""

    def _handle(subject: str = "alice") -> str:
        return e2e_handles[subject]

    return _handle


@pytest.fixture
def call_tool_raw(e2e_handles: dict[str, str]) -> Callable[..., dict[str, Any]]:
    """``net1.call_tool_raw`` with this module's handles: ``call_tool_raw(server, name, arguments, who)``."""
    return functools.partial(net1.call_tool_raw, handles=e2e_handles)


@pytest.fixture(scope="session")
def mcp_server(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    return start_server(_session=True, **SERVER_ENV, REDIS_URL=settings.REDIS_URL)


@pytest.fixture(scope="session")
def product_server(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    """A server in its product configuration — ``tjwater.settings``, so no test-only tool — with the dev
    issuer on only to verify the tests' tokens, and this deployment's service client configured."""
    return start_server(
        _session=True,
        **SERVER_ENV,
        DJANGO_SETTINGS_MODULE="tjwater.settings",
        TJWATER_READ_ENV_FILE="0",
        DEBUG="1",
        TJWATER_MCP_ENABLED="1",
        TJWATER_DEV_ISSUER="1",
        TJWATER_DATA_DIR=str(settings.TJWATER_DATA_DIR),
        REDIS_URL=settings.REDIS_URL,
    )


@pytest.fixture(scope="session")
def mcp_server_b(start_server: Callable[..., ServerProcess], e2e_project: E2EProject) -> ServerProcess:
    """A second process on the same database and Redis (cross-process limits)."""
    return start_server(_session=True, **SERVER_ENV, REDIS_URL=settings.REDIS_URL)


# --- the OpenID provider (tests/support/idp.py) and the in-process issuer (tests/support/tokens.py) --


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


@pytest.fixture(scope="session")
def idp_server(start_server: Callable[..., ServerProcess], idp: IdentityProvider) -> ServerProcess:
    """One server trusting the shared provider (shared by the admin and the /mcp interop tests)."""
    return start_server(_session=True, **idp_env(idp))


@pytest.fixture(scope="session")
def members_factory(django_db_setup: None, django_db_blocker: Any) -> Iterator[Callable[..., Members]]:
    """``members_factory(issuer, {subject: permissions})`` commits a fresh project with those members;
    everything it created is deleted at session end."""
    created: list[Members] = []

    def _make(issuer: str, subjects: dict[str, list[str]]) -> Members:
        with django_db_blocker.unblock():
            members = create_members(issuer, subjects)
        created.append(members)
        return members

    yield _make
    with django_db_blocker.unblock():
        for members in created:
            delete_members(members)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    """An in-process OpenID issuer with one RSA key ``k1`` (tests/support/tokens.py)."""
    server = Issuer()
    server.add_key("k1")
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _test_database_only(request: pytest.FixtureRequest) -> None:
    """Servers the tests start must run against the test database, never a developer's."""
    if "start_server" in request.fixturenames:
        from django.conf import settings

        name = str(settings.DATABASES["default"]["NAME"])
        assert name.startswith("test_"), f"the e2e server would use database {name!r}, not the test database"


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    """The process caches built from settings (tests/support/caches.py) forgotten before and after."""
    reset_process_caches()
    yield
    reset_process_caches()


@pytest.fixture(scope="module")
def db_unblocked(demo_loaded: None, django_db_blocker: Any) -> Iterator[None]:
    """Database access for the whole module, in autocommit (committed rows, deleted by their fixtures: see
    tests/evidence/conftest.py)."""
    with django_db_blocker.unblock():
        yield
