"""The fence around Django's private queryset internals (issue 18 §3): only ``mcp_app/django_internals.py``
reads them, and what it reads answers what the executor needs to know of a real queryset."""

from __future__ import annotations

import ast

from django.db.models.query import FlatValuesListIterable, NamedValuesListIterable, ValuesIterable

from contexts.models import Project
from mcp_app import django_internals
from tests.support.sources import project_sources, read_source

FENCE = "mcp_app/django_internals.py"
PRIVATE_QUERYSET_ATTRIBUTES = frozenset({"_iterable_class", "_fields", "_prefetch_related_lookups"})


def private_queryset_reads(source: str) -> list[str]:
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_QUERYSET_ATTRIBUTES
    ]


def test_the_scan_finds_private_queryset_reads() -> None:
    found = private_queryset_reads("qs._iterable_class is ValuesIterable\nqs.query._fields")
    assert sorted(found) == ["qs._iterable_class", "qs.query._fields"]
    assert private_queryset_reads("qs.query.values_select\nqs.model._meta") == []


def test_no_module_but_django_internals_reads_private_queryset_attributes() -> None:
    offenders = {
        path: reads
        for path in project_sources()
        if path != FENCE and (reads := private_queryset_reads(read_source(path)))
    }
    assert offenders == {}
    fenced = {name.split(".")[-1] for name in django_internals.FENCED}
    assert PRIVATE_QUERYSET_ATTRIBUTES <= fenced  # each one says why
    assert set(private_queryset_reads(read_source(FENCE))) == {
        f"queryset.{name}" for name in PRIVATE_QUERYSET_ATTRIBUTES
    }


def test_the_accessors_read_what_the_executor_needs() -> None:
    values = Project.objects.values("slug", "name")
    assert django_internals.iterable_class(values) is ValuesIterable
    assert django_internals.values_fields(values) == ("slug", "name")
    assert django_internals.prefetch_lookups(values) == ()
    flat = Project.objects.values_list("slug", flat=True)
    assert django_internals.iterable_class(flat) is FlatValuesListIterable
    named = Project.objects.prefetch_related("memberships").values_list("slug", named=True)
    assert django_internals.iterable_class(named) is NamedValuesListIterable
    assert django_internals.prefetch_lookups(named) == ("memberships",)
    assert django_internals.values_fields(Project.objects.all()) is None
