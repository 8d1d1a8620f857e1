"""``manage.py mcp_entry off|on`` (issue 23 item 16): rollback at run time, against a real uvicorn process
and the command run as its own process (as an operator runs it), on the committed test database.

Turning the entry off revokes *every* live context in the database, so ``restored_entry`` puts the test
database back afterwards (the switch on, the drill's revocations undone)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import psycopg
import pytest
from django.conf import settings

from contexts.models import ContextEvent, Membership, Principal, QueryContext, TaskReport
from contexts.selectors import hash_handle
from contexts.services import MAX_REVOKE_BATCH
from evidence.models import EvidenceSnapshot, QueryReceipt
from mcp_app.entry import REFRESH_S
from mcp_app.models import EntrySwitch
from tests.support.net1 import PROJECT_SLUG, SUBJECT_PREFIX, E2EProject, token
from tests.support.servers import ROOT, ServerProcess, subprocess_database_url

pytestmark = [pytest.mark.e2e]
REASON = f"rollback drill {secrets.token_hex(3)}"


def mcp_entry(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": subprocess_database_url()}
    return subprocess.run(
        [sys.executable, "manage.py", "mcp_entry", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def discover(server: ServerProcess) -> httpx2.Response:
    from tests.support.mcp_http import rpc_body, rpc_headers

    return httpx2.post(
        f"{server.url}/mcp",
        json=rpc_body("server/discover"),
        headers=rpc_headers("server/discover", token()),
        timeout=10,
    )


def wait_until(server: ServerProcess, status: int) -> float:
    """Seconds until /mcp answers ``status`` (fails after two refresh intervals and a margin)."""
    started = time.monotonic()
    while discover(server).status_code != status:
        assert time.monotonic() - started < 2 * REFRESH_S + 3, f"/mcp did not answer {status} in time"
        time.sleep(0.1)
    return time.monotonic() - started


def bind(server: ServerProcess) -> httpx2.Response:
    return httpx2.post(
        f"{server.url}/api/v1/mcp-query-contexts",
        headers={"Authorization": f"Bearer {token(scopes='mcp.query mcp.context.bind')}"},
        json={"project": PROJECT_SLUG, "session_id": f"entry-{secrets.token_hex(4)}", "purpose": "ordinary_chat"},
        timeout=15,
    )


@pytest.fixture
def restored_entry(mcp_server: ServerProcess, django_db_blocker: Any) -> Iterator[ServerProcess]:
    """The test database as it was, whatever happened: the switch's rows removed (servers caught up) and
    the contexts this test's drill revoked restored with their audit rows removed — session-scoped
    contexts of other packages (tests/queries ``demo_handles``) must not depend on the order tests run in."""
    yield mcp_server
    drill = f"MCP entry turned off: {REASON}"
    with django_db_blocker.unblock():
        EntrySwitch.objects.all().delete()
        QueryContext.objects.filter(revoke_reason=drill).update(revoked_at=None, revoked_by="", revoke_reason="")
        ContextEvent.objects.filter(reason=drill).delete()
    wait_until(mcp_server, 200)


@pytest.fixture
def many_contexts(e2e_project: E2EProject, django_db_blocker: Any) -> Iterator[int]:
    """More live contexts than one revocation batch allows (committed: the command's process sees them)."""
    from datetime import timedelta

    from django.utils import timezone

    with django_db_blocker.unblock():
        principal = Principal.objects.get(issuer=settings.TJWATER_DEV_ISSUER_ID, subject=SUBJECT_PREFIX + "bob")
        membership = Membership.objects.get(principal=principal, project_id=e2e_project.project_id)
        expires = timezone.now() + timedelta(hours=1)
        rows = QueryContext.objects.bulk_create(
            QueryContext(
                handle_hash=hash_handle(secrets.token_urlsafe(32)),
                principal=principal,
                client_id="tjwater-agent-mcp",
                project_id=e2e_project.project_id,
                membership=membership,
                session_id=f"entry-bulk-{i}",
                purpose="ordinary_chat",
                allowed_tools=["get_network_options"],
                expires_at=expires,
            )
            for i in range(MAX_REVOKE_BATCH + 5)
        )
    yield len(rows)
    with django_db_blocker.unblock():
        QueryContext.objects.filter(pk__in=[row.pk for row in rows]).delete()


def test_mcp_entry_off_revokes_everything_refuses_bindings_and_on_restores(
    restored_entry: ServerProcess,
    many_contexts: int,
    django_db_blocker: Any,
    call_tool_raw: Callable[..., dict[str, Any]],
    handle: Callable[..., str],
) -> None:
    server = restored_entry
    assert call_tool_raw(server, "get_network_options", {"kind": "hydraulic"})["result"]["isError"] is False
    with django_db_blocker.unblock():
        kept = (EvidenceSnapshot.objects.count(), QueryReceipt.objects.count(), TaskReport.objects.count())
        live_before = QueryContext.objects.filter(revoked_at__isnull=True).count()
    assert live_before >= many_contexts + 1

    off = mcp_entry("off", "--reason", REASON)
    assert off.returncode == 0, off.stderr[-2000:]
    assert off.stdout.strip() == f"MCP entry off; contexts revoked: {live_before}"
    # Every server process turns /mcp off within the refresh interval, with the operator's refusal.
    print(f"/mcp off after {wait_until(server, 503):.2f} s")
    response = discover(server)
    assert response.json() == {
        "code": "MCP_DISABLED",
        "message": "The MCP endpoint is turned off on this server; retrying will not help.",
        "retryable": False,
    }
    # New bindings are refused, in the same body shape.
    refused = bind(server)
    assert (refused.status_code, refused.json()["code"], refused.json()["retryable"]) == (503, "MCP_DISABLED", False)
    with django_db_blocker.unblock():
        assert QueryContext.objects.filter(revoked_at__isnull=True).count() == 0
        # Audited: one row per revoked context, and the switch row itself (who, why, how many).
        assert ContextEvent.objects.filter(action="revoked", reason=f"MCP entry turned off: {REASON}").count() == (
            live_before
        )
        # The switch row is found by its own key (the drill's reason), never as "the newest row".
        switch = EntrySwitch.objects.get(enabled=False, reason=REASON)
        assert (switch.enabled, switch.reason, switch.revoked_contexts) == (False, REASON, live_before)
        assert switch.actor.startswith("command:")
        # Evidence, receipts and reports are kept.
        assert (EvidenceSnapshot.objects.count(), QueryReceipt.objects.count(), TaskReport.objects.count()) == kept
    assert mcp_entry("status").stdout.strip() == "off"

    on = mcp_entry("on", "--reason", f"{REASON} over")
    assert (on.returncode, on.stdout.strip()) == (0, "MCP entry on")
    wait_until(server, 200)
    # Revoked contexts stay revoked; a host binds a new one and works again.
    old = call_tool_raw(server, "get_network_options", {"kind": "hydraulic"}, context_handle=handle("alice"))
    assert old["result"]["structuredContent"]["code"] == "CONTEXT_REVOKED"
    created = bind(server)
    assert created.status_code == 201, created.text
    fresh = created.json()["context_handle"]
    result = call_tool_raw(server, "get_network_options", {"kind": "hydraulic"}, context_handle=fresh)
    assert result["result"]["isError"] is False
    with django_db_blocker.unblock():
        assert list(EntrySwitch.objects.order_by("pk").values_list("enabled", "reason")) == [
            (False, REASON),
            (True, f"{REASON} over"),
        ]


def test_mcp_entry_needs_a_reason(restored_entry: ServerProcess) -> None:
    result = mcp_entry("off")
    assert result.returncode != 0
    assert "A reason is required" in result.stderr
    assert mcp_entry("status").stdout.strip() == "on"


def _switch_reads() -> int:
    """Reads of the switch's table by every backend of the test database (pg_stat_user_tables)."""
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or "postgres",
        dbname=str(db["NAME"]),
        autocommit=True,
    ) as conn:
        row = conn.execute(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE relname = 'mcp_app_entryswitch'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_the_per_call_check_reads_no_row(
    restored_entry: ServerProcess, call_tool_raw: Callable[..., dict[str, Any]]
) -> None:
    """Measured: a call does not read the switch — each server process reads it once per REFRESH_S in
    the background. 60 calls must cost far fewer reads than 60, whatever servers of the session poll
    meanwhile (backends publish their counters within about a second, hence the pauses)."""
    server = restored_entry
    created = bind(server)  # a context of its own: an earlier test of this module revoked every context
    assert created.status_code == 201, created.text
    context = created.json()["context_handle"]
    time.sleep(1.5)
    before = _switch_reads()
    started = time.monotonic()
    for _ in range(60):
        result = call_tool_raw(server, "get_network_options", {"kind": "hydraulic"}, context_handle=context)
        assert result["result"]["isError"] is False
    elapsed = time.monotonic() - started
    time.sleep(1.5)
    reads = _switch_reads() - before
    # The same stretch of time without calls: what the session's server processes read in the background.
    idle_before = _switch_reads()
    time.sleep(elapsed + 1.5)
    idle = _switch_reads() - idle_before
    print(f"60 calls in {elapsed:.2f} s: {reads} reads of the switch; {idle} in as long without calls")
    assert reads < idle + 20  # a read per call would add 60
