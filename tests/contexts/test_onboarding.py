"""Onboarding a utility (issue 13): audited services and the manage.py commands that call them, and the
README walk "my own network, my own engineers" end to end (ky10 imported at scale 0.3048, one engineer
granted ``webgis.view scada.view``, a first tool call through a real server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import wntr
from django.core.management import CommandError, call_command
from django.db import transaction

from contexts import dev_issuer
from contexts.errors import InvalidParameter, NotFound, PermissionDenied
from contexts.grants import tool_catalog
from contexts.models import AccessEvent, ContextEvent, Membership, Principal, Project, QueryContext
from contexts.onboarding import membership_grant, membership_revoke, project_create
from contexts.selectors import resolve_context
from contexts.services import Actor, context_create
from queries.models import Pipe
from tests.contexts import factories
from tests.support.net1 import call_tool_raw
from tests.support.servers import ServerProcess

ACTOR = Actor(label="operator:test#1")
KY10 = Path(wntr.__file__).parent / "library" / "networks" / "ky10.inp"


def _events(project: Project) -> list[tuple[str, dict[str, Any]]]:
    return [(e.action, e.details) for e in AccessEvent.objects.filter(project_id=project.pk).order_by("id")]


@pytest.mark.django_db
def test_project_create_is_audited_and_refuses_a_taken_slug() -> None:
    project = project_create(slug="utility-x", name="Utility X", actor=ACTOR)
    assert _events(project) == [
        ("project_created", {"slug": "utility-x", "name": "Utility X", "timezone": "UTC", "unit_system": "SI"})
    ]
    assert (project.timezone, project.unit_system) == ("UTC", "SI")
    assert AccessEvent.objects.get(project_id=project.pk).actor == "operator:test#1"
    with pytest.raises(InvalidParameter, match="exists already"):
        project_create(slug="utility-x", name="again", actor=ACTOR)
    assert Project.objects.filter(slug="utility-x").count() == 1


@pytest.mark.django_db
def test_grant_change_revoke_regrant_each_audited() -> None:
    project = factories.project("onb-a")
    issuer = factories.issuer()
    granted = membership_grant(
        project_slug="onb-a", issuer=issuer, subject="eng-1", permissions=["scada.view", "webgis.view"], actor=ACTOR
    )
    assert granted.permissions == ["scada.view", "webgis.view"]
    assert Principal.objects.filter(issuer=issuer, subject="eng-1").count() == 1
    membership_grant(project_slug="onb-a", issuer=issuer, subject="eng-1", permissions=["webgis.view"], actor=ACTOR)
    membership_revoke(project_slug="onb-a", issuer=issuer, subject="eng-1", reason="left the team", actor=ACTOR)
    assert Membership.objects.get(pk=granted.pk).revoked_at is not None
    membership_grant(project_slug="onb-a", issuer=issuer, subject="eng-1", permissions=["scada.view"], actor=ACTOR)
    again = Membership.objects.get(pk=granted.pk)
    assert (again.revoked_at, again.permissions) == (None, ["scada.view"])
    assert _events(project) == [
        ("principal_registered", {}),
        ("membership_granted", {"after": ["scada.view", "webgis.view"]}),
        ("membership_changed", {"before": ["scada.view", "webgis.view"], "after": ["webgis.view"]}),
        ("membership_revoked", {"before": ["webgis.view"], "reason": "left the team"}),
        ("membership_granted", {"before": [], "after": ["scada.view"]}),
    ]


@pytest.mark.django_db
def test_bad_grants_change_nothing() -> None:
    project = factories.project("onb-b")
    issuer = factories.issuer()
    with pytest.raises(InvalidParameter, match="Unknown permission codes: report.publish"):
        membership_grant(project_slug="onb-b", issuer=issuer, subject="e", permissions=["report.publish"], actor=ACTOR)
    with pytest.raises(InvalidParameter, match="at least one"):
        membership_grant(project_slug="onb-b", issuer=issuer, subject="e", permissions=[], actor=ACTOR)
    with pytest.raises(NotFound):
        membership_grant(project_slug="nope", issuer=issuer, subject="e", permissions=["webgis.view"], actor=ACTOR)
    with pytest.raises(NotFound):
        membership_revoke(project_slug="onb-b", issuer=issuer, subject="e", reason="x", actor=ACTOR)
    with pytest.raises(InvalidParameter, match="reason"):
        membership_revoke(project_slug="onb-b", issuer=issuer, subject="e", reason=" ", actor=ACTOR)
    assert not Principal.objects.filter(subject="e").exists()
    assert _events(project) == []


@pytest.mark.django_db
def test_audit_row_shares_the_transaction_of_the_change() -> None:
    """A change rolled back by its caller leaves no audit row behind, and no audit row without its change."""
    factories.project("onb-c")
    with pytest.raises(RuntimeError), transaction.atomic():
        membership_grant(
            project_slug="onb-c", issuer=factories.issuer(), subject="eng", permissions=["webgis.view"], actor=ACTOR
        )
        raise RuntimeError("caller fails after the grant")
    assert not Membership.objects.filter(project__slug="onb-c").exists()
    assert not AccessEvent.objects.filter(project_id=Project.objects.get(slug="onb-c").pk).exists()


@pytest.mark.django_db
def test_revoking_stops_existing_contexts_on_their_next_call() -> None:
    project = factories.project("onb-d")
    membership_grant(
        project_slug="onb-d", issuer=factories.issuer(), subject="eng-d", permissions=["webgis.view"], actor=ACTOR
    )
    token = factories.token(Principal.objects.get(subject="eng-d"))
    catalog, task_scoped = tool_catalog()
    created = context_create(
        token=token,
        project_slug=project.slug,
        session_id="s-onb-d",
        purpose="ordinary_chat",
        catalog=catalog,
        task_scoped=task_scoped,
    )
    assert resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=()).project_id
    membership_revoke(project_slug="onb-d", issuer=factories.issuer(), subject="eng-d", reason="rotation", actor=ACTOR)
    with pytest.raises(PermissionDenied):
        resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=())


@pytest.mark.django_db
def test_commands_call_the_services(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("project_create", "onb-cmd", "--name", "Cmd utility")
    call_command(
        "membership_grant", "--project", "onb-cmd", "--sub", "eng-c", "--permissions", "webgis.view scada.view"
    )
    call_command("membership_revoke", "--project", "onb-cmd", "--sub", "eng-c", "--reason", "test over")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "project created: onb-cmd (UTC, SI units)",
        "membership granted: eng-c @ onb-cmd = scada.view webgis.view",
        "membership revoked: eng-c @ onb-cmd",
    ]
    project = Project.objects.get(slug="onb-cmd")
    assert [a for a, _ in _events(project)] == [
        "project_created",
        "principal_registered",
        "membership_granted",
        "membership_revoked",
    ]
    assert AccessEvent.objects.filter(project_id=project.pk).first().actor.startswith("command:")
    with pytest.raises(CommandError, match="exists already"):
        call_command("project_create", "onb-cmd")
    with pytest.raises(CommandError, match="Unknown permission codes"):
        call_command("membership_grant", "--project", "onb-cmd", "--sub", "x", "--permissions", "root")


@pytest.mark.django_db
def test_project_time_zone_and_unit_system(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("project_create", "onb-tz", "--timezone", "Asia/Shanghai", "--units", "US")
    assert capsys.readouterr().out == "project created: onb-tz (Asia/Shanghai, US units)\n"
    project = Project.objects.get(slug="onb-tz")
    assert (project.timezone, project.unit_system) == ("Asia/Shanghai", "US")
    with pytest.raises(CommandError, match="Unknown time zone 'Mars/Olympus': give an IANA name"):
        call_command("project_create", "onb-tz2", "--timezone", "Mars/Olympus")
    with pytest.raises(CommandError, match="Unknown unit system 'imperial': one of SI, US"):
        call_command("project_create", "onb-tz2", "--units", "imperial")
    assert not Project.objects.filter(slug="onb-tz2").exists()


@pytest.mark.e2e
def test_my_own_network_my_own_engineers(
    start_server: Callable[..., ServerProcess], django_db_blocker: Any, settings: Any
) -> None:
    """The README walk as a newcomer runs it: a fresh project, ky10 imported at scale 0.3048, one engineer
    granted two codes, a context, and a first tool call through a real server. Rows are committed (no
    ``django_db`` transaction): the server is another process."""
    slug, sub = "walk-ky10", "walk-engineer"
    with django_db_blocker.unblock():
        Project.objects.filter(slug=slug).delete()
        call_command("project_create", slug, "--name", "KY10 utility")
        call_command("import_network", str(KY10), "--project", slug, "--center", "117.2,39.1", "--scale", "0.3048",
                     "--baseline-hours", "0")  # fmt: skip
        call_command("membership_grant", "--project", slug, "--sub", sub, "--permissions", "webgis.view scada.view")
        project = Project.objects.get(slug=slug)
        token = factories.token(Principal.objects.get(subject=sub))
        catalog, task_scoped = tool_catalog()
        created = context_create(
            token=token,
            project_slug=slug,
            session_id="walk-1",
            purpose="ordinary_chat",
            catalog=catalog,
            task_scoped=task_scoped,
        )
        first_pipe = Pipe.objects.filter(project=project).order_by("element_id").values_list("element_id", flat=True)[0]
    try:
        server = start_server()
        bearer = dev_issuer.mint_token(subject=sub, client_id=factories.HOST_CLIENT, scopes=["mcp.query"], ttl_s=300)
        reply = call_tool_raw(
            server,
            "get_element_properties",
            {"element_type": "pipe", "element_id": first_pipe},
            bearer=bearer,
            context_handle=created.handle,
        )
        data = reply["result"]["structuredContent"]
        assert reply["result"].get("isError") is not True, data
        assert data["data"]["element_id"] == first_pipe
        assert data["source_ref"] == f"project:{slug}/pipe/{first_pipe}"
        assert created.tools and "get_element_properties" in created.tools
    finally:
        with django_db_blocker.unblock():
            QueryContext.objects.filter(project__slug=slug).delete()
            Project.objects.filter(slug=slug).delete()
            Principal.objects.filter(subject=sub).delete()


@pytest.mark.django_db
def test_project_delete_revokes_contexts_and_guards_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    """A project with a network, a live context and an evidence snapshot: refused without
    --including-evidence (nothing changes), then deleted with it — its context revoked first (audited),
    every row of it gone, the audit rows kept."""
    from evidence.models import EvidenceSnapshot
    from queries.importer.epanet import import_network, wntr_network_path
    from queries.models import Junction

    project = factories.project("onb-del")
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), baseline_hours=1)
    who = factories.principal("eng-del")
    factories.membership(who, project, ["webgis.view"])
    catalog, task_scoped = tool_catalog()
    created = context_create(token=factories.token(who), project_slug="onb-del", session_id="s-del",
                             purpose="ordinary_chat", catalog=catalog, task_scoped=task_scoped)  # fmt: skip
    leased = factories.leased_run(project)
    EvidenceSnapshot.objects.create(project=project, task=leased.run.task, run=leased.run, tool="t", source="s",
                                    data={}, byte_size=2, sha256="0" * 64)  # fmt: skip
    with pytest.raises(CommandError, match="'onb-del' holds 1 evidence snapshots: delete it with --including-evidence"):
        call_command("project_delete", "onb-del")
    assert QueryContext.objects.get(pk=created.context_id).revoked_at is None
    assert Junction.objects.filter(project=project).count() == 9

    call_command("project_delete", "onb-del", "--including-evidence", "--reason", "utility left")
    assert capsys.readouterr().out == "project deleted: onb-del (1 contexts revoked, 1 evidence snapshots)\n"
    assert not Project.objects.filter(slug="onb-del").exists()
    assert not Junction.objects.filter(project_id=project.pk).exists()
    assert not EvidenceSnapshot.objects.filter(project_id=project.pk).exists()
    assert ContextEvent.objects.filter(context_id=created.context_id, action="revoked").count() == 1
    deleted = AccessEvent.objects.get(project_id=project.pk, action="project_deleted")
    assert deleted.details == {"slug": "onb-del", "reason": "utility left", "contexts_revoked": 1,
                               "evidence snapshots": 1}  # fmt: skip
    with pytest.raises(CommandError, match="No project 'onb-del'"):
        call_command("project_delete", "onb-del")


@pytest.mark.django_db
def test_unit_system_change_is_audited_and_seen_by_the_next_resolution() -> None:
    project = factories.project("onb-units")
    who = factories.principal("eng-units")
    factories.membership(who, project, ["webgis.view"])
    token = factories.token(who)
    catalog, task_scoped = tool_catalog()
    created = context_create(token=token, project_slug="onb-units", session_id="s-u", purpose="ordinary_chat",
                             catalog=catalog, task_scoped=task_scoped)  # fmt: skip
    assert (
        resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=()).unit_system == "SI"
    )
    call_command("project_set_units", "onb-units", "--units", "US")
    assert (
        resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=()).unit_system == "US"
    )
    assert [a for a, _ in _events(project)][-1:] == ["project_units_changed"]
    assert _events(project)[-1][1] == {"before": "SI", "after": "US"}
    with pytest.raises(CommandError, match="Unknown unit system 'metric'"):
        call_command("project_set_units", "onb-units", "--units", "metric")
