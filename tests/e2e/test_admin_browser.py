"""The operators' web pages in a real browser (issue 19): headless Chromium (Debian's) driven through
playwright-core, a real uvicorn server, the Keycloak-shaped OpenID provider from devtools/.

Each test keeps a screenshot of where it ended in var/browser/<test>.png. Every admin page is also checked
for console errors, where Chromium reports what the Content-Security-Policy blocked.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator

import pytest

from contexts.models import ContextEvent, Permission, Project, QueryContext
from contexts.selectors import hash_handle
from tests.e2e.browser import Browser, Page
from tests.support.idp import USERS, IdentityProvider, Members, create_context, idp_env
from tests.support.mcp_http import mcp_request
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e

ALICE_SUB, _ = USERS["alice"]
LOGIN_FORM = r"/login-actions/authenticate/"
# The admin's header bar once its stylesheet applies (Django admin base.css: display flex, --header-bg).
STYLED_HEADER = {"display": "flex", "background": "rgb(65, 118, 144)"}
RECHECK_S = 3
FORMULA = '=HYPERLINK("http://evil.example/","click")'
RTL_NAME = "\u202eevil\u202c"


def header_style(page: Page) -> dict[str, str]:
    return dict(
        page.evaluate(
            "(() => { const s = getComputedStyle(document.getElementById('header'));"
            " return {display: s.display, background: s.backgroundColor}; })()"
        )
    )


def sign_in(page: Page, username: str) -> str:
    """On the provider's login form: sign in as ``username``; returns where the browser lands."""
    page.wait_for_url(LOGIN_FORM)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", USERS[username][1])
    return page.click("button[name=login]")


def open_admin_and_sign_in(page: Page, server: ServerProcess, username: str) -> str:
    page.goto(f"{server.url}/admin/")
    return sign_in(page, username)


def assert_no_console_errors(page: Page) -> None:
    """Nothing the CSP blocked, no script error, and every stylesheet, script and image loaded (the
    browser's own favicon.ico probe aside: the service has none)."""
    errors = page.console_errors()
    assert errors == [], errors
    failed = [line for line in page.failed_resources() if not line.endswith("/favicon.ico")]
    assert failed == [], failed


@pytest.fixture(scope="module")
def recheck_server(start_server: Callable[..., ServerProcess], idp: IdentityProvider) -> ServerProcess:
    """A server whose admin sessions are re-checked at the provider every few seconds."""
    return start_server(**idp_env(idp, OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=str(RECHECK_S)))


@pytest.fixture
def project_slugs(django_db_blocker: object) -> Iterator[list[str]]:
    """Projects a test creates through the admin, deleted afterwards."""
    slugs: list[str] = []
    yield slugs
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Project.objects.filter(slug__in=slugs).delete()


@pytest.mark.usefixtures("sso_users")
def test_operator_signs_in_to_a_styled_branded_admin(
    admin_server: ServerProcess, browser: Browser, members_factory: Callable[..., Members], idp: IdentityProvider
) -> None:
    members = members_factory(idp.issuer, {ALICE_SUB: [Permission.WEBGIS_VIEW.value]})
    page = browser.new_page()
    landed = open_admin_and_sign_in(page, admin_server, "alice")
    assert landed == f"{admin_server.url}/admin/"
    assert header_style(page) == STYLED_HEADER
    assert page.text("#site-name") == "tjwater-mcp operations"
    tools = page.evaluate("document.getElementById('user-tools').textContent")
    assert "Log out" in tools and "View site" not in tools, tools
    # The theme toggle's icons at their styled size, not the page-wide SVGs of an unstyled admin.
    assert page.evaluate("document.querySelector('.theme-toggle svg').getBoundingClientRect().width") <= 24
    assert_no_console_errors(page)
    page.screenshot("operator_signs_in_to_a_styled_branded_admin")

    # Memberships tell principals apart by subject; times carry their zone.
    page.goto(f"{admin_server.url}/admin/contexts/membership/?q={members.project_slug}")
    assert ALICE_SUB in page.text("#result_list")
    page.goto(f"{admin_server.url}/admin/contexts/project/?q={members.project_slug}")
    assert page.text("#result_list td.field-created_at").endswith(" UTC")
    # The operator's other pages render under the CSP too (lists, onboarding forms, audit trails).
    for path in (
        "contexts/principal/",
        "contexts/project/create/",
        "contexts/membership/grant/",
        "contexts/contextevent/",
        "contexts/accessevent/",
        "evidence/queryreceipt/",
    ):
        page.goto(f"{admin_server.url}/admin/{path}")
        assert header_style(page) == STYLED_HEADER, path
    assert_no_console_errors(page)


@pytest.mark.usefixtures("sso_users")
def test_non_operator_is_refused_and_can_sign_out_to_switch_account(
    admin_server: ServerProcess, browser: Browser
) -> None:
    page = browser.new_page()
    open_admin_and_sign_in(page, admin_server, "bob")
    assert page.url.startswith(f"{admin_server.url}/oidc/callback/")
    assert page.evaluate("document.getElementById('refusal').dataset.reason") == "not_operator"
    assert header_style(page) == STYLED_HEADER
    assert_no_console_errors(page)
    page.screenshot("non_operator_is_refused")

    # Sign out: the provider asks to confirm (no id_token for a refused user), then comes back here.
    page.click("#sign-out-form input[type=submit]")
    page.click("#kc-logout")
    assert page.wait_for_url(r"/oidc/signed-out/$") == f"{admin_server.url}/oidc/signed-out/"
    page.click("#sign-in-again")
    # The provider forgot bob: it asks for a password, so someone else can sign in.
    assert sign_in(page, "alice") == f"{admin_server.url}/admin/"
    assert page.text("#site-name") == "tjwater-mcp operations"
    page.screenshot("non_operator_is_refused_and_can_sign_out_to_switch_account")


@pytest.mark.usefixtures("sso_users")
def test_operator_revokes_a_context_and_its_next_mcp_call_is_refused(
    admin_server: ServerProcess,
    browser: Browser,
    idp: IdentityProvider,
    members_factory: Callable[..., Members],
    django_db_blocker: object,
) -> None:
    members = members_factory(idp.issuer, {ALICE_SUB: [p.value for p in Permission]})
    token = idp.exchange(idp.user_token("alice"))
    handle = create_context(admin_server.url, token, members.project_slug)
    call = {"name": "list_elements", "arguments": {"element_type": "pipe", "context_handle": handle}}
    assert mcp_request(f"{admin_server.url}/mcp", token, "tools/call", call).result.get("isError") is not True
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        context = QueryContext.objects.get(handle_hash=hash_handle(handle))
    prefix = context.handle_prefix[:6]

    page = browser.new_page()
    open_admin_and_sign_in(page, admin_server, "alice")
    # Found by the start of its hash prefix.
    page.goto(f"{admin_server.url}/admin/contexts/querycontext/?q={prefix}")
    assert page.evaluate("document.querySelectorAll('#result_list tbody tr').length") == 1
    assert page.text("#result_list td.field-state") == "active"
    page.check(f"input.action-select[value='{context.pk}']")
    page.select_option("select[name=action]", "revoke_contexts")
    page.click("button[name=index]")
    page.fill("input[name=reason]", "browser test: laptop stolen")
    page.click("input[type=submit][value=Revoke]")
    assert "Revoked 1 context(s)." in page.text(".messagelist")
    page.goto(f"{admin_server.url}/admin/contexts/querycontext/?q={prefix}")
    assert page.text("#result_list td.field-state") == "revoked"
    assert page.text("#result_list td.field-revoked_at").endswith(" UTC")
    assert_no_console_errors(page)
    page.screenshot("operator_revokes_a_context")

    refused = mcp_request(f"{admin_server.url}/mcp", token, "tools/call", call).result
    assert refused["isError"] is True
    assert refused["structuredContent"]["code"].startswith("CONTEXT_")

    # The audit trail names the person: name and principal, not a user id.
    page.goto(f"{admin_server.url}/admin/contexts/contextevent/?q={prefix}&action__exact=revoked")
    assert page.text("#result_list td.field-actor_person") == f"Alice Operator ({ALICE_SUB}) · operator"
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        assert ContextEvent.objects.filter(context_id=context.pk, action="revoked").count() == 1
    page.screenshot("operator_revokes_a_context_audit_trail")


@pytest.mark.usefixtures("sso_users")
def test_an_open_form_stays_valid_across_a_recheck(
    recheck_server: ServerProcess, browser: Browser, project_slugs: list[str], django_db_blocker: object
) -> None:
    form_tab = browser.new_page()
    open_admin_and_sign_in(form_tab, recheck_server, "alice")
    form_tab.goto(f"{recheck_server.url}/admin/contexts/project/create/")
    slug = f"browser-{secrets.token_hex(3)}"
    project_slugs.append(slug)
    form_tab.fill("input[name=slug]", slug)
    form_tab.fill("input[name=name]", "Opened before the re-check")

    time.sleep(RECHECK_S + 1)
    other_tab = browser.new_page()
    other_tab.goto(f"{recheck_server.url}/admin/contexts/project/")
    hops = other_tab.navigations()
    # The re-check happened (a silent authorization at the provider) and took one round trip.
    assert any("prompt=none" in url for url in hops), hops
    assert other_tab.url == f"{recheck_server.url}/admin/contexts/project/"
    assert len(hops) <= 4, hops  # the page, the provider, the callback, the page
    assert header_style(other_tab) == STYLED_HEADER

    form_tab.click("input[type=submit]")
    assert f"Project {slug} created." in form_tab.text(".messagelist"), form_tab.text("body")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        assert Project.objects.filter(slug=slug).exists()
    form_tab.screenshot("an_open_form_stays_valid_across_a_recheck")


@pytest.mark.usefixtures("sso_users")
def test_an_ended_provider_session_asks_to_sign_in_again_not_for_the_role(
    recheck_server: ServerProcess, browser: Browser, idp: IdentityProvider
) -> None:
    page = browser.new_page()
    open_admin_and_sign_in(page, recheck_server, "alice")
    # The provider's session ends (its cookie is gone, as after a sign-out elsewhere or its expiry).
    provider_cookies = {"_session", "_session.sig", "_session.legacy", "_session.legacy.sig"}
    for name in provider_cookies & browser.cookie_names():
        browser.clear_cookies(name)
    time.sleep(RECHECK_S + 1)
    page.goto(f"{recheck_server.url}/admin/contexts/project/")
    assert re.search(LOGIN_FORM, page.url), page.url  # the provider's login form, not the refusal page
    page.screenshot("an_ended_provider_session_asks_to_sign_in_again")
    assert sign_in(page, "alice") == f"{recheck_server.url}/admin/contexts/project/"


@pytest.mark.usefixtures("sso_users")
def test_sign_out_ends_the_provider_session(admin_server: ServerProcess, browser: Browser) -> None:
    page = browser.new_page()
    open_admin_and_sign_in(page, admin_server, "alice")
    page.click("#logout-form button[type=submit]")
    assert page.wait_for_url(r"/oidc/signed-out/$") == f"{admin_server.url}/oidc/signed-out/"
    assert "sessionid" not in browser.cookie_names()
    assert header_style(page) == STYLED_HEADER
    page.screenshot("sign_out_ends_the_provider_session")
    page.click("#sign-in-again")
    # The provider asks for the password again (before: straight back into the admin).
    page.wait_for_url(LOGIN_FORM)
    page.wait_for("input[name=password]")


def test_api_docs_render_their_operations_with_debug_off(
    start_server: Callable[..., ServerProcess], browser: Browser
) -> None:
    server = start_server(
        DEBUG="0",
        SECRET_KEY="browser-test-secret-key-not-used-anywhere-else-0123456789",
        ALLOWED_HOSTS="127.0.0.1",
        TJWATER_DEV_ISSUER="0",
        TJWATER_MCP_ENABLED="0",
    )
    page = browser.new_page()
    answer = page.goto(f"{server.url}/api/docs/")
    assert "script-src 'self'" in answer["headers"]["content-security-policy"]
    assert "camera=()" in answer["headers"]["permissions-policy"]
    page.wait_for(".opblock")
    operations = page.evaluate("document.querySelectorAll('.opblock').length")
    assert operations >= 20, operations
    # Static files come hashed (cacheable forever) from WhiteNoise, with DEBUG off.
    stylesheet = page.evaluate("document.querySelector('link[rel=stylesheet]').href")
    assert re.search(r"/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui\.[0-9a-f]{12}\.css$", stylesheet)
    assert_no_console_errors(page)
    page.screenshot("api_docs_render_their_operations")

    # The admin's own pages are styled with DEBUG off too (here: sign-in needs the provider).
    page.goto(f"{server.url}/admin/login/")
    assert header_style(page) == STYLED_HEADER
    assert_no_console_errors(page)


@pytest.fixture
def utility_with_jobs(django_db_blocker: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Issue 21: a project with Net1, a pressure device, a day of readings, 12 h of baseline and a failed
    import job — committed (the server process reads them), deleted afterwards."""
    from datetime import UTC, datetime, timedelta

    from queries.importer.baseline_window import simulate_baseline_window
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.importer.scada_devices import import_scada_devices
    from queries.importer.scada_readings import import_scada
    from queries.models import ScadaDevice
    from queries.services.jobs import job_failed, job_started

    tmp = tmp_path_factory.mktemp("jobs")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Project.objects.filter(slug="browser-jobs").delete()
        project = Project.objects.create(slug="browser-jobs", name="Jobs in a browser")
        import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
        (tmp / "d.csv").write_text(
            "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
            "PT-11,Pressure 11,pressure,psi,junction,11,,,900\n"
            # Issue 41: a formula and a right-to-left override are names like any other, shown as text.
            'PT-12,"=HYPERLINK(""http://evil.example/"",""click"")",pressure,psi,junction,12,,,900\n'
            f"PT-13,{RTL_NAME},pressure,psi,junction,13,,,900\n"
        )
        import_scada_devices(project=project, path=tmp / "d.csv")
        day = datetime(2026, 4, 1, tzinfo=UTC)
        rows = "".join(f"{(day + timedelta(minutes=15 * i)).isoformat()},{60 + i % 4}\n" for i in range(96) if i != 40)
        (tmp / "r.csv").write_text("time,PT-11\n" + rows)
        import_scada(project=project, path=tmp / "r.csv")
        simulate_baseline_window(project=project, start=day, hours=12, step_s=900)
        failed = job_started(project=project, kind="scada_import", subject="historian-bad.csv", started_by="alice")
        why = "historian-bad.csv refused, nothing written: 3 rejected sample(s), more than --max-rejects 0."
        job_failed(failed, why, rejects=3, reject_lines=["line 4: time: soon is not an ISO 8601 time"])
        device = ScadaDevice.objects.get(project=project, device_id="PT-11")
    yield {"project": project.pk, "device": device.pk, "job": failed.pk}
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Project.objects.filter(pk=project.pk).delete()


@pytest.mark.usefixtures("sso_users")
def test_operator_sees_the_jobs_and_a_device_chart(
    admin_server: ServerProcess,
    browser: Browser,
    members_factory: Callable[..., Members],
    idp: IdentityProvider,
    utility_with_jobs: dict[str, int],
) -> None:
    members_factory(idp.issuer, {ALICE_SUB: [Permission.WEBGIS_VIEW.value]})
    page = browser.new_page()
    open_admin_and_sign_in(page, admin_server, "alice")
    page.goto(f"{admin_server.url}/admin/queries/job/?project__id__exact={utility_with_jobs['project']}")
    listing = page.text("#result_list")
    assert "historian-bad.csv refused, nothing written" in listing and "SCADA readings import" in listing
    page.screenshot("operator_sees_the_jobs_list")
    page.goto(f"{admin_server.url}/admin/queries/job/{utility_with_jobs['job']}/change/")
    assert "line 4: time: soon is not an ISO 8601 time" in page.text("#content")
    page.goto(f"{admin_server.url}/admin/queries/scadadevice/?project__id__exact={utility_with_jobs['project']}")
    devices = page.text("#result_list")
    assert FORMULA in devices and RTL_NAME in devices  # the names as written: text, never a formula or a link
    assert page.evaluate("document.querySelectorAll('a[href*=\"evil.example\"]').length") == 0
    page.goto(f"{admin_server.url}/admin/queries/scadadevice/{utility_with_jobs['device']}/change/")
    page.wait_for("svg.tjw-device-chart")
    drawn = page.evaluate(
        "(() => { const s = document.querySelector('svg.tjw-device-chart');"
        " return {measured: s.querySelectorAll('polyline.tjw-measured').length,"
        " model: s.querySelectorAll('polyline.tjw-model-baseline').length,"
        " width: s.getBoundingClientRect().width}; })()"
    )
    assert drawn == {"measured": 2, "model": 1, "width": 760}  # the missing slot breaks the measured line
    assert_no_console_errors(page)  # nothing blocked by the CSP: no script, no inline style
    page.screenshot("operator_sees_a_device_chart")
