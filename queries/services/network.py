"""The network family: element properties, element pages, network options and schemas.

All four read the hydraulic network model of the caller's project (``scope.project_id``); a missing
element and an element of another project give the same ``NotFound`` (STYLE "scoped lookups").
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from contexts.errors import InvalidParameter, NotFound
from contexts.scope import QueryScope
from queries.coordinates import coordinates, rounded
from queries.fitting import fitting, least_json_bytes, model_skeleton
from queries.models import ELEMENT_MODELS, NETWORK_SCHEMAS, NODE_TYPES, NetworkOptions, NetworkSchema
from queries.models.options import FIELD_QUANTITIES
from queries.paging import collection, page_of
from queries.plan import Plan, service, statement_factory
from queries.schemas.common import PageInfo, PageRequest
from queries.schemas.network import (
    ElementListResult,
    ElementPage,
    ElementProperties,
    ElementPropertiesResult,
    NetworkOptionsData,
    NetworkOptionsResult,
    NetworkSchemaData,
    NetworkSchemaResult,
    SchemaProperty,
)

SOURCE = "model_network"
#: The properties of a node computed from its geometry (``_db_coordinates``).
COORDINATES = frozenset({"longitude", "latitude"})


def _schema_fields(element_type: str) -> list[str]:
    return [p["name"] for p in NETWORK_SCHEMAS[element_type]["properties"]]


@functools.cache
def _units(kind: str) -> dict[str, str]:
    """Each property's quantity (``queries.units``; turned into the project's units on the way out), or
    its schema unit when it is not a convertible quantity. Worked out once per kind (``NETWORK_SCHEMAS``
    and ``FIELD_QUANTITIES`` are constants); the result models copy it when they validate it."""
    quantities = FIELD_QUANTITIES.get(kind, {})
    return {
        p["name"]: quantities.get(p["name"], p["unit"])
        for p in NETWORK_SCHEMAS[kind]["properties"]
        if p["unit"] or p["name"] in quantities
    }


def _db_fields(element_type: str) -> list[str]:
    """Columns to read: the schema's stored fields (a node's longitude/latitude come from
    ``_db_coordinates``)."""
    return [f for f in _schema_fields(element_type) if f not in COORDINATES]


def _db_coordinates(element_type: str) -> dict[str, Any]:
    """For nodes, longitude and latitude computed in SQL (``ST_X``/``ST_Y`` of ``geom``) — no GEOS
    object per row (``queries.coordinates``); nothing for links."""
    return coordinates("geom") if element_type in NODE_TYPES else {}


def _db_values(element_type: str) -> tuple[list[str], dict[str, Any]]:
    """What ``.values(*fields, **expressions)`` reads for an element's properties."""
    return _db_fields(element_type), _db_coordinates(element_type)


@functools.cache
def _property_names(element_type: str) -> tuple[tuple[str, bool], ...]:
    """The schema's properties of an element type, in schema order, each with whether it is a coordinate
    (``NETWORK_SCHEMAS`` is a constant: worked out once per type, not once per row)."""
    return tuple((name, name in COORDINATES) for name in _schema_fields(element_type) if name != "element_id")


def _properties(element_type: str, row: dict[str, Any]) -> dict[str, str | float | int | bool | None]:
    return {
        name: rounded(row.get(name)) if coordinate else row[name] for name, coordinate in _property_names(element_type)
    }


@functools.cache
def _ordered_values(element_type: str) -> Any:
    """Every element of a type in element-id order, as ``.values()`` of its properties — built once per
    type and filtered per call (building ``.values()`` with the coordinate expressions was ≈ 10 % of a
    maximal page's CPU; ``mcp_app/README.md`` "Measuring")."""
    fields, expressions = _db_values(element_type)
    return ELEMENT_MODELS[element_type].objects.order_by("element_id").values(*fields, **expressions)


@functools.cache
def _least_item_bytes(element_type: str) -> int:
    """The fewest bytes one item of an element page writes (its keys; ``queries.fitting``)."""
    properties = {name: 0 for name, _ in _property_names(element_type)}
    return least_json_bytes(model_skeleton(ElementProperties, properties=properties))


def _check_type(element_type: str) -> None:
    if element_type not in ELEMENT_MODELS:
        raise InvalidParameter(f"element_type must be one of {', '.join(ELEMENT_MODELS)}.")


@statement_factory(static=1)
def element_row(element_type: str, project_id: int, element_id: str) -> Any:
    """One element of a project by its id (at most one row)."""
    fields, expressions = _db_values(element_type)
    return (
        ELEMENT_MODELS[element_type]
        .objects.filter(project_id=project_id, element_id=element_id)
        .values(*fields, **expressions)[:1]
    )


@service
def get_element_properties(*, scope: QueryScope, element_type: str, element_id: str) -> Plan[ElementPropertiesResult]:
    """The properties of one network element of the caller's project (one query)."""
    _check_type(element_type)
    rows = yield element_row(element_type, scope.project_id, element_id)
    row = rows[0] if rows else None
    if row is None:
        raise NotFound(f"No {element_type} with that id in this project.")
    return ElementPropertiesResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/{element_type}/{element_id}",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=ElementProperties(
            element_type=element_type,  # type: ignore[arg-type]  # checked against ELEMENT_MODELS above
            element_id=element_id,
            properties=_properties(element_type, row),
        ),
        units=_units(element_type),
    )


@collection(static=1)
def _elements(element_type: str, project_id: int) -> Any:
    """The project's elements of a type in element-id order, with their properties (``queries.paging``:
    counted and paged as statement factories, no queryset built per call)."""
    return _ordered_values(element_type).filter(project_id=project_id)


@service
def list_elements(*, scope: QueryScope, element_type: str, page: PageRequest) -> Plan[ElementListResult]:
    """One page of the project's elements of a type, ordered by element id, with the total (two queries:
    the capped count and the page, both in SQL — never the whole network; ``queries.paging``: above
    ``TJWATER_EXACT_TOTAL_MAX`` elements the total is null and ``has_more`` comes from one extra row)."""
    _check_type(element_type)
    total, rows, has_more = yield from page_of(
        _elements, (element_type,), (scope.project_id,), page, _least_item_bytes(element_type)
    )
    items = fitting(  # under the MCP edge's inline budget only the items that can be returned are built
        rows,
        lambda row: ElementProperties(
            element_type=element_type,  # type: ignore[arg-type]  # checked above
            element_id=row["element_id"],
            properties=_properties(element_type, row),
        ),
    )
    data = ElementPage(items=items, total=total, limit=page.limit, offset=page.offset, has_more=has_more)
    return ElementListResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/{element_type}",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=data,
        units=_units(element_type),
        page=PageInfo(total=data.total, limit=data.limit, offset=data.offset, has_more=data.has_more),
    )


@statement_factory
def _options(project_id: int, kind: str, pump_id: str) -> Any:
    """One kind of options (``pump_id`` "" but for a pump's energy): a statement factory, compiled once."""
    return NetworkOptions.objects.filter(project_id=project_id, kind=kind, pump_id=pump_id).values("values")[:1]


@statement_factory
def _schema(project_id: int, kind: str) -> Any:
    """One kind's schema: a statement factory, compiled once."""
    return NetworkSchema.objects.filter(project_id=project_id, kind=kind).values("description", "properties")[:1]


@service
def get_network_options(*, scope: QueryScope, kind: str, pump_id: str | None = None) -> Plan[NetworkOptionsResult]:
    """One kind of the project's network options; pump energy options need the pump's id."""
    if kind == "pump_energy" and not pump_id:
        raise InvalidParameter("pump_energy options need pump_id (the pump's element id).")
    if kind != "pump_energy" and pump_id:
        raise InvalidParameter("pump_id applies only to kind=pump_energy.")
    rows = yield _options(scope.project_id, kind, pump_id or "")
    if not rows:
        raise NotFound("No such network options in this project.")
    row = rows[0]
    ref = f"project:{scope.project_slug}/options/{kind}" + (f"/{pump_id}" if pump_id else "")
    return NetworkOptionsResult(
        source=SOURCE,
        source_ref=ref,
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=NetworkOptionsData(kind=kind, pump_id=pump_id or None, values=row["values"]),  # type: ignore[arg-type]
        units=_units(kind),
    )


@service
def get_network_schema(*, scope: QueryScope, kind: str) -> Plan[NetworkSchemaResult]:
    """What the properties of one kind (element type, device or option set) mean: type, unit, enum."""
    rows = yield _schema(scope.project_id, kind)
    if not rows:
        raise NotFound("No schema of that kind in this project.")
    row = rows[0]
    return NetworkSchemaResult(
        source=SOURCE,
        source_ref=f"project:{scope.project_slug}/schema/{kind}",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=NetworkSchemaData(
            kind=kind,  # type: ignore[arg-type]  # validated by the wire schema's enum
            description=row["description"],
            properties=[SchemaProperty.model_validate(p) for p in row["properties"]],
        ),
    )
