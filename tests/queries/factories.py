"""Factories of the query-service tests."""

from __future__ import annotations

from collections.abc import Iterable

from contexts.models import Project
from contexts.scope import QueryScope


def service_scope(project: Project, permissions: Iterable[str], subject: str = "alice") -> QueryScope:
    """The ``QueryScope`` a query service receives for a caller on ``project`` holding ``permissions``
    (service-level tests call services directly; the e2e tests get theirs from real context handles)."""
    return QueryScope(
        principal_id=1,
        issuer="i",
        subject=subject,
        client_id="c",
        project_id=project.pk,
        project_slug=project.slug,
        permissions=frozenset(permissions),
        purpose="ordinary_chat",
    )
