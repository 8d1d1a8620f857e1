"""A local superuser signs in to the admin only in development (issue 2); production needs OIDC."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest
from django.contrib.auth import get_user_model

from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

PRODUCTION_WITHOUT_OIDC = {
    "DEBUG": "0",
    "SECRET_KEY": "x" * 50,
    "ALLOWED_HOSTS": "127.0.0.1",
    "TJWATER_DEV_ISSUER": "0",
    "TJWATER_MCP_ENABLED": "0",
}
USERNAME = "local-admin-login-test"
PASSWORD = "a-long-local-password-1"  # noqa: S105 - a throwaway test account


@pytest.fixture(scope="module")
def superuser(django_db_setup: None, django_db_blocker: object) -> object:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        get_user_model().objects.create_superuser(USERNAME, "", PASSWORD)
    yield
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        get_user_model().objects.filter(username=USERNAME).delete()


def sign_in(base_url: str) -> httpx2.Response:
    with httpx2.Client(base_url=base_url, timeout=10) as client:
        form = client.get("/admin/login/")
        if form.status_code != 200:
            return form
        token = client.cookies["csrftoken"]
        return client.post(
            "/admin/login/?next=/admin/",
            data={"username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"},
            headers={"Referer": f"{base_url}/admin/login/"},
        )


@pytest.mark.usefixtures("superuser")
def test_local_superuser_signs_in_with_debug_on(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(TJWATER_MCP_ENABLED="0")
    response = sign_in(server.url)
    assert response.status_code == 302
    assert response.headers["location"] == "/admin/"


@pytest.mark.usefixtures("superuser")
def test_no_password_sign_in_without_oidc_when_debug_is_off(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(**PRODUCTION_WITHOUT_OIDC)
    response = sign_in(server.url)
    assert response.status_code == 403
    assert 'data-reason="not_configured"' in response.text
    posted = httpx2.post(f"{server.url}/admin/login/", data={"username": USERNAME, "password": PASSWORD}, timeout=10)
    assert posted.status_code in (403, 405)
    assert "sessionid" not in posted.cookies
