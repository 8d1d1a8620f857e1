"""Build a resilience world in whatever database ``DATABASE_URL`` names (run as
``python -m tests.resilience.seed`` with the spec as JSON on stdin; prints the created ids as JSON).

The fault and tenant tests run servers against a *private* PostgreSQL cluster (tests/resilience/conftest.py),
so the rows cannot be committed through pytest-django's connection: this script is run with the private
``DATABASE_URL`` instead. Spec::

    {"projects": [{"slug": "resil-alice", "junction_elevation": 1111.25}],
     "members": [{"issuer": "...", "subject": "resil-alice", "project": "resil-alice",
                  "permissions": null}],            # null: every permission
     "stale": [{"issuer": "...", "subject": "stale", "project": "resil-alice", "count": 300}]}

Each project gets the EPANET Net1 network through the real importer; ``junction_elevation`` then
overwrites every junction's elevation with a tenant-identifying value. A ``stale`` entry creates
``count`` ordinary_chat contexts for a member and then revokes the membership, so ``contexts.revoke_stale``
has that many contexts to revoke.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def build(spec: dict[str, Any]) -> dict[str, Any]:
    import wntr
    from django.utils import timezone

    from contexts.grants import tool_catalog
    from contexts.models import Membership, Permission, Principal, Project
    from contexts.services import context_create
    from contexts.tokens import VerifiedToken
    from queries.importer.epanet import import_network
    from queries.models.network import Junction

    net1 = Path(wntr.__file__).parent / "library" / "networks" / "Net1.inp"
    out: dict[str, Any] = {"projects": {}, "principals": {}, "stale": {}}
    for entry in spec.get("projects", []):
        project, _ = Project.objects.get_or_create(slug=entry["slug"], defaults={"name": entry["slug"].title()})
        if not Junction.objects.filter(project=project).exists():
            import_network(project=project, inp_path=net1, baseline_hours=0)
        if entry.get("junction_elevation") is not None:
            Junction.objects.filter(project=project).update(elevation=entry["junction_elevation"])
        out["projects"][project.slug] = project.pk
    for entry in spec.get("members", []) + spec.get("stale", []):
        principal, _ = Principal.objects.get_or_create(issuer=entry["issuer"], subject=entry["subject"])
        permissions = entry.get("permissions") or [p.value for p in Permission]
        Membership.objects.get_or_create(
            principal=principal,
            project=Project.objects.get(slug=entry["project"]),
            defaults={"permissions": permissions},
        )
        out["principals"][entry["subject"]] = principal.pk
    catalog, task_scoped = tool_catalog()
    for entry in spec.get("stale", []):
        token = VerifiedToken(
            issuer=entry["issuer"],
            subject=entry["subject"],
            client_id="tjwater-agent-mcp",
            scopes=frozenset({"mcp.context.bind"}),
            audience=("tjwater-mcp",),
            expires_at=0,
        )
        ids = [
            context_create(
                token=token,
                project_slug=entry["project"],
                session_id=f"stale-{n}",
                purpose="ordinary_chat",
                catalog=catalog,
                task_scoped=task_scoped,
            ).context_id
            for n in range(int(entry["count"]))
        ]
        Membership.objects.filter(principal__subject=entry["subject"], project__slug=entry["project"]).update(
            revoked_at=timezone.now()
        )
        out["stale"][entry["subject"]] = ids
    return out


def main() -> None:
    import django

    django.setup()
    print(json.dumps(build(json.load(sys.stdin))))


if __name__ == "__main__":
    main()
