"""Operators sign into /admin/ through the real OpenID provider (tjwater/oidc.py, issue 6).

The browser is an HTTP client that follows redirects and posts the provider's login form; the server is
a real uvicorn process configured with the provider's endpoints.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import httpx2
import pytest
from django.contrib.auth import get_user_model

from contexts.models import Permission, QueryContext
from contexts.selectors import hash_handle
from tests.support.idp import USERS, IdentityProvider, Members, create_context, idp_env, submit_login
from tests.support.mcp_http import mcp_request
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

ALICE_SUB, _ = USERS["alice"]
BOB_SUB, _ = USERS["bob"]
LOCAL_PASSWORD = "local-admin-password-for-test"  # noqa: S105 - a throwaway test credential


@pytest.fixture(scope="module")
def sso_server(idp_server: ServerProcess) -> ServerProcess:
    return idp_server


@pytest.fixture
def sso_users(django_db_blocker: object) -> Iterator[None]:
    """The server process writes users into the shared test database: remove them afterwards."""
    yield
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        get_user_model().objects.filter(username__in=[ALICE_SUB, BOB_SUB, "local-admin"]).delete()


@pytest.fixture
def browser() -> Iterator[httpx2.Client]:
    """A cookie-keeping HTTP client that follows redirects, as a browser would."""
    with httpx2.Client(follow_redirects=True, timeout=15, max_redirects=12) as client:
        yield client


def sign_in(browser: httpx2.Client, server: ServerProcess, username: str) -> httpx2.Response:
    """Open /admin/, get sent to the provider, and sign in there as ``username``."""
    _, password = USERS[username]
    login_page = browser.get(f"{server.url}/admin/")
    assert "/login-actions/authenticate/" in login_page.url.path, login_page.url
    return submit_login(browser, login_page, username, password)


def test_operator_signs_in_and_lands_in_the_admin_as_staff(
    sso_server: ServerProcess, sso_users: None, django_db_blocker: object, browser: httpx2.Client
) -> None:
    landed = sign_in(browser, sso_server, "alice")
    assert landed.status_code == 200
    assert str(landed.url) == f"{sso_server.url}/admin/"
    assert "tjwater-mcp operations" in landed.text
    # Back through the provider's redirects: provider → /oidc/callback/ → /admin/.
    assert any(r.url.path == "/oidc/callback/" for r in landed.history)
    # Operators see the product's admin pages (the operator group's view/change permissions).
    assert "Contexts" in landed.text or "contexts" in landed.text
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        user = get_user_model().objects.get(username=ALICE_SUB)
        assert (user.is_staff, user.is_superuser, user.has_usable_password()) == (True, False, False)
        assert user.email == "alice@tjwater.test"


def test_operator_revokes_a_context_in_the_admin_and_it_stops_working(
    sso_server: ServerProcess,
    sso_users: None,
    idp: IdentityProvider,
    members_factory: Callable[..., Members],
    django_db_blocker: object,
    browser: httpx2.Client,
) -> None:
    members = members_factory(idp.issuer, {ALICE_SUB: [p.value for p in Permission]})
    token = idp.exchange(idp.user_token("alice"))
    handle = create_context(sso_server.url, token, members.project_slug)
    call = {"name": "list_elements", "arguments": {"element_type": "pipe", "context_handle": handle}}
    assert mcp_request(f"{sso_server.url}/mcp", token, "tools/call", call).result.get("isError") is not True
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        context_id = QueryContext.objects.get(handle_hash=hash_handle(handle)).pk

    assert sign_in(browser, sso_server, "alice").status_code == 200
    changelist = browser.get(f"{sso_server.url}/admin/contexts/querycontext/")
    assert changelist.status_code == 200
    assert handle not in changelist.text  # the admin never shows handles (R-CTX-5)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', changelist.text)
    assert csrf is not None
    action = {"csrfmiddlewaretoken": csrf.group(1), "action": "revoke_contexts", "_selected_action": str(context_id)}
    confirm = browser.post(f"{sso_server.url}/admin/contexts/querycontext/", data=action)
    assert confirm.status_code == 200 and "Revoke these 1 context(s)?" in confirm.text
    done = browser.post(
        f"{sso_server.url}/admin/contexts/querycontext/",
        data={**action, "confirm": "yes", "reason": "interop test: operator revokes"},
    )
    assert done.status_code == 200 and "Revoked 1 context(s)." in done.text

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        revoked = QueryContext.objects.get(pk=context_id)
    assert revoked.revoked_at is not None
    assert revoked.revoke_reason == "interop test: operator revokes"
    assert ALICE_SUB in revoked.revoked_by
    refused = mcp_request(f"{sso_server.url}/mcp", token, "tools/call", call).result
    assert refused["isError"] is True
    assert refused["structuredContent"]["code"].startswith("CONTEXT_")


def test_non_operator_is_refused_with_a_page_not_a_redirect_loop(
    sso_server: ServerProcess, sso_users: None, django_db_blocker: object, browser: httpx2.Client
) -> None:
    landed = sign_in(browser, sso_server, "bob")
    assert landed.status_code == 403
    assert landed.url.path == "/oidc/callback/"
    assert 'data-reason="not_operator"' in landed.text
    assert "not an operator" in landed.text
    # Opening the admin again ends on the same page (the provider still has bob's session, so it
    # answers at once): a bounded chain of redirects, not a loop.
    again = browser.get(f"{sso_server.url}/admin/")
    assert (again.status_code, again.url.path) == (403, "/oidc/callback/")
    assert len(again.history) <= 6
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        assert not get_user_model().objects.filter(username=BOB_SUB).exists()


def test_wrong_password_stays_on_the_provider_login_form(sso_server: ServerProcess) -> None:
    with httpx2.Client(follow_redirects=True, timeout=15) as browser:
        login_page = browser.get(f"{sso_server.url}/admin/")
        answer = submit_login(browser, login_page, "alice", "not-her-password")
        assert answer.status_code == 200
        assert "Invalid username or password." in answer.text
        assert browser.get(f"{sso_server.url}/admin/", follow_redirects=False).status_code == 302


def post_local_login(browser: httpx2.Client, url: str) -> httpx2.Response:
    """Post the admin password form the way a script would (its own CSRF cookie and matching token)."""
    csrf = "interopcsrftokenvalue0123456789a"  # any 32 alphanumerics: Django compares cookie and form
    browser.cookies.set("csrftoken", csrf)
    return browser.post(url, data={"username": "local-admin", "password": LOCAL_PASSWORD, "csrfmiddlewaretoken": csrf})


@pytest.fixture
def local_admin(sso_users: None, django_db_blocker: object) -> None:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        get_user_model().objects.create_superuser("local-admin", "local@tjwater.test", LOCAL_PASSWORD)


def test_with_debug_on_a_local_superuser_can_still_use_the_password_form(
    sso_server: ServerProcess, local_admin: None
) -> None:
    # The control for the next test: the same request does sign in while DEBUG is on.
    with httpx2.Client(timeout=15) as browser:
        posted = post_local_login(browser, f"{sso_server.url}/admin/login/?local=1")
        assert (posted.status_code, posted.headers["location"]) == (302, "/admin/")
        index = browser.get(f"{sso_server.url}/admin/")
        assert index.status_code == 200
        # Log out: a local account has no provider session, so no trip to the provider.
        token = re.search(r'id="logout-form".*?name="csrfmiddlewaretoken" value="([^"]+)"', index.text, re.S)
        assert token is not None
        out = browser.post(f"{sso_server.url}/admin/logout/", data={"csrfmiddlewaretoken": token.group(1)})
        assert (out.status_code, out.headers["location"]) == (302, "/oidc/signed-out/")
        assert browser.get(f"{sso_server.url}/admin/").status_code == 302


def test_with_debug_off_there_is_no_local_password_login(
    start_server: Callable[..., ServerProcess], idp: IdentityProvider, local_admin: None
) -> None:
    server = start_server(
        **idp_env(idp),
        DEBUG="0",
        SECRET_KEY="interop-test-secret-key-not-used-anywhere-else-0123456789",
        ALLOWED_HOSTS="127.0.0.1",
    )
    with httpx2.Client(timeout=15) as browser:
        for path in ("/admin/login/", "/admin/login/?local=1"):
            form = browser.get(f"{server.url}{path}")
            assert form.status_code == 302
            assert form.headers["location"].startswith("/oidc/authenticate/")
            posted = post_local_login(browser, f"{server.url}{path}")
            assert posted.status_code == 302
            assert posted.headers["location"].startswith("/oidc/authenticate/")
        assert "sessionid" not in browser.cookies
        admin_index = browser.get(f"{server.url}/admin/")
        assert admin_index.status_code == 302
        assert admin_index.headers["location"].startswith("/admin/login/")
