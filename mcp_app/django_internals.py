"""Django's private queryset internals the MCP driver reads — read here and nowhere else (issue 18 §3).

The statement cache (``mcp_app.statement_cache``, ``mcp_app.shape_keys``) compiles a plan's
``.values()``/``.values_list()`` querysets to SQL itself and caches them per statement shape; for that it
must know which row flavour a queryset returns and with which names, which Django exposes through no
public API. Verified against Django ``VERIFIED_DJANGO`` (any 5.2.x); ``mcp_app.checks`` refuses to start
with another feature release (``mcp_app.E009``) and lists ``FENCED``, the names to re-read on an upgrade.
``tests/mcp_app/test_django_internals.py`` fails if another module reads one of the private attributes.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.db.models.query import (  # type: ignore[attr-defined]  # in Django 5.2, not in django-stubs
    FlatValuesListIterable,
    NamedValuesListIterable,
    ValuesIterable,
    ValuesListIterable,
    create_namedtuple_class,
)

VERIFIED_DJANGO: tuple[int, int] = (5, 2)

#: What the executor relies on → why. ``mcp_app.E009`` names these keys.
FENCED: dict[str, str] = {
    "QuerySet._iterable_class": (
        "which row flavour a queryset yields (ValuesIterable, ValuesListIterable, FlatValuesListIterable, "
        "NamedValuesListIterable): the executor shapes rows the same way, and it is part of the shape key"
    ),
    "QuerySet._fields": (
        "the names given to .values()/.values_list(): part of the shape key, and the field names of the "
        "named=True row tuples"
    ),
    "QuerySet._prefetch_related_lookups": (
        "a prefetch is a second query the executor does not run: such a queryset is never cached by shape"
    ),
    "django.db.models.query.{Values,ValuesList,FlatValuesList,NamedValuesList}Iterable, create_namedtuple_class": (
        "undocumented module names: the iterable classes compared with _iterable_class, and the factory of "
        "the named row tuples, so rows equal run_sync's"
    ),
    "sql.Query attributes read by the executor's shape key and count (annotations, extra, combinator, "
    "group_by, select_for_update, distinct_fields, extra_order_by, extra_tables, subquery, values_select, "
    "selected, select, default_cols, default_ordering, standard_ordering, order_by, distinct, "
    "select_related, deferred_loading, alias_map, alias_refcount, low_mark/high_mark, where; "
    "Query.get_count's shape)": (
        "undocumented Query state: the statement-shape key and the count query are built from it "
        "(tests/mcp_app/test_executor.py compares the executor's rows with run_sync's for every tool)"
    ),
}

__all__ = [
    "FENCED",
    "VERIFIED_DJANGO",
    "FlatValuesListIterable",
    "NamedValuesListIterable",
    "ValuesIterable",
    "ValuesListIterable",
    "create_namedtuple_class",
    "iterable_class",
    "prefetch_lookups",
    "values_fields",
]


def iterable_class(queryset: QuerySet[Any]) -> type:
    """The class that turns the queryset's rows into results (``.values()`` → ``ValuesIterable``, …)."""
    return queryset._iterable_class


def values_fields(queryset: QuerySet[Any]) -> tuple[str, ...] | None:
    """The field names given to ``.values()``/``.values_list()``, None for neither (or for all fields)."""
    fields: tuple[str, ...] | None = queryset._fields  # type: ignore[attr-defined]  # not in django-stubs
    return fields


def prefetch_lookups(queryset: QuerySet[Any]) -> tuple[Any, ...]:
    """The queryset's ``prefetch_related()`` lookups (empty for none)."""
    lookups: tuple[Any, ...] = queryset._prefetch_related_lookups  # type: ignore[attr-defined]  # not in django-stubs
    return lookups
