"""The REST read API: every query service under ``/api/v1/projects/{project}/…`` (SPEC acceptance 8).

Same data, same permissions as ``/mcp``: each route is one registry tool (``ToolSpec.rest``, paths modelled on
seed 001's legacy table), its arguments are checked against that tool's own input schema (the wire
contract, minus ``context_handle``), the caller's scope comes from the live membership
(``contexts.rest.member_scope``), ``contexts.access`` decides whether the tool may be used — the gate the
MCP dispatch path uses — and the service plan runs with ``run_sync`` inside a read-only transaction
under the query budget. The body is the service's envelope exactly as MCP's ``structuredContent``
(without MCP's 12000-byte inline cut, which exists for a model's context window). REST never calls MCP.

Errors are the application error bodies ``{code, message, retryable[, details]}`` with the HTTP status
of their class; a tool the caller may not use is 403 ``PERMISSION_DENIED`` (MCP renders the same
decision as "Unknown tool", R-PROTO-3). Task-scoped tools (task context and evidence) need a context
binding and are not on REST.

OpenAPI 3.1 comes from drf-spectacular (``/api/schema/``, browsable at ``/api/docs/``): each route's
parameters are derived from the tool's input schema and its responses from the Pydantic result model.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, cast

from django.conf import settings
from django.db import connection, transaction
from django.urls import path, register_converter
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter
from jsonschema import Draft202012Validator
from referencing import Registry
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from contexts import access
from contexts.api_base import BaseApiView
from contexts.authentication import HasApiReadScope
from contexts.errors import ApplicationError, InvalidParameter
from contexts.rest import ApiBearerAuthentication, member_scope
from contexts.slots import rest_slot
from contexts.tokens import VerifiedToken
from queries.api_actions import action_specs, action_urlpatterns
from queries.arguments import bad_text_path
from queries.plan import run_sync
from queries.registry import JSON_SCHEMA_DIALECT, TOOL_ERROR_SCHEMA, ToolSpec, tools_by_name
from tjwater import bounds

logger = logging.getLogger("tjwater.api")

ELEMENT_TYPES = ("junction", "pipe", "valve", "pump", "tank", "reservoir")


class ElementTypes:
    """``pipes`` in a path → ``pipe`` (the legacy paths name element types in the plural)."""

    regex = "(?:junction|pipe|valve|pump|tank|reservoir)s"

    def to_python(self, value: str) -> str:
        return value[:-1]

    def to_url(self, value: str) -> str:
        return f"{value}s"


register_converter(ElementTypes, "element_types")


@dataclass(frozen=True)
class Route:
    tool: str
    path: str  # under /api/v1/projects/<project>/


def routes() -> tuple[Route, ...]:
    """One route per registry tool that has one (``ToolSpec.rest``), in the catalog's order."""
    return tuple(
        Route(spec.name, spec.rest)
        for spec in tools_by_name().values()
        if spec.rest is not None and spec.effect == "read"
    )


def rest_input_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's input schema without ``context_handle`` (REST scopes by the URL's project)."""
    schema = copy.deepcopy(spec.input_schema)
    schema["properties"].pop("context_handle", None)
    schema["required"] = [name for name in schema.get("required", []) if name != "context_handle"]
    return schema


@cache
def _specs() -> dict[str, ToolSpec]:
    """The registry's tools served on REST: the exposed-tool allowlist applies here as on ``/mcp``."""
    exposed = frozenset(settings.TJWATER_MCP_EXPOSED_TOOLS)
    return {name: spec for name, spec in tools_by_name().items() if not exposed or name in exposed}


@cache
def _validator(tool: str) -> Draft202012Validator:
    return Draft202012Validator(rest_input_schema(_specs()[tool]), registry=Registry())


SCALARS = ("string", "number", "integer")
# An integer parameter outside PostgreSQL's bigint is refused here, not by the database.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SCALAR_NAMES = {"integer": "an integer (64-bit)", "number": "a finite number", "boolean": "true or false"}


def _items_type(prop: Mapping[str, Any]) -> str | None:
    """The scalar type of an array's items (one for all, or the same for every ``prefixItems`` entry)."""
    items = prop.get("items")
    if isinstance(items, dict):
        return items.get("type")
    kinds = {item.get("type") for item in prop.get("prefixItems", []) if isinstance(item, dict)}
    return kinds.pop() if len(kinds) == 1 else None


def _convert(name: str, raw: list[str], prop: Mapping[str, Any]) -> Any:
    """One query parameter (all its values) → the JSON value the schema expects. Scalars take one value;
    arrays of scalars take repeated or comma-separated values; anything structured is JSON, within the
    bounds of ``tjwater.bounds.loads`` (``TJWATER_JSON_MAX_DEPTH``; issue 41)."""
    kind = prop.get("type")
    if kind == "array" and _items_type(prop) in SCALARS:
        values = [v for item in raw for v in item.split(",")] if len(raw) == 1 else raw
        return [_convert(name, [v], {"type": _items_type(prop)}) for v in values]
    if len(raw) != 1:
        raise InvalidParameter(f"{name} takes one value.")
    value = raw[0]
    if kind in ("array", "object"):
        # Bounded (tjwater.bounds): depth checked before parsing, no recursion error, no non-finite number.
        try:
            return bounds.loads(value)
        except bounds.InvalidJson as exc:
            raise InvalidParameter(f"{name[:64]} is not valid JSON: {exc}.") from None
    try:
        if kind == "integer":
            number = int(value)  # a ValueError past Python's digit limit
            if not INT64_MIN <= number <= INT64_MAX:
                raise ValueError(value)
            return number
        if kind == "number":
            real = float(value)
            if not math.isfinite(real):  # "1e999999", "inf", "nan"
                raise ValueError(value)
            return real
        if kind == "boolean":
            if value not in ("true", "false"):
                raise ValueError(value)
            return value == "true"
    except ValueError:
        raise InvalidParameter(f"{name[:64]} must be {SCALAR_NAMES.get(str(kind), kind)}.") from None
    return value


def parse_arguments(spec: ToolSpec, query: Mapping[str, list[str]], path_args: Mapping[str, str]) -> dict[str, Any]:
    """Query string + path → the tool's arguments, validated against its input schema (refusals name the
    parameter and the rule, never echo the value)."""
    properties = rest_input_schema(spec)["properties"]
    args: dict[str, Any] = {}
    for name, raw in query.items():
        if name not in properties:
            raise InvalidParameter(f"Unknown parameter: {name[:64]}.")
        args[name] = _convert(name, raw, properties[name])
    for name, value in path_args.items():
        args[name] = _convert(name, [value], properties.get(name, {"type": "string"}))
    bad = bad_text_path(args)
    if bad is not None:
        raise InvalidParameter(f"Invalid parameters: {bad or '(parameters)'}: not valid text.")
    errors = sorted(_validator(spec.name).iter_errors(args), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path) or "(parameters)"
        raise InvalidParameter(f"Invalid parameters: {where}: fails '{error.validator}'.")
    return args


def run_read_only(spec: ToolSpec, scope: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Run the tool's plan in a read-only transaction under the query budget — the whole call's, not
    each statement's (``run_sync(…, budget_s=…)``, issue 23 item 12)."""
    budget_s = settings.TJWATER_MCP_QUERY_BUDGET_S
    budget_ms = int(budget_s * 1000)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {budget_ms}")
        result = run_sync(spec.plan(scope, args), budget_s=budget_s)
    return result.model_dump(mode="json")


class ToolSchema(AutoSchema):
    """OpenAPI of one tool route, from the registry: parameters from the input schema, the 200 body from
    the Pydantic result model, errors as the application error body."""

    @property
    def _tool_view(self) -> ToolView:
        return cast(ToolView, self.view)  # this schema is only ever ToolView's

    def _spec(self) -> ToolSpec:
        return _specs()[self._tool_view.tool]

    def get_operation_id(self) -> str:
        return self._tool_view.tool

    # drf-spectacular's AutoSchema.get_description() takes no arguments; the DRF stubs type DRF's base method.
    def get_description(self) -> str:  # type: ignore[override]
        return self._spec().description

    def get_tags(self) -> list[str]:
        return ["query"]

    def get_override_parameters(self) -> list[OpenApiParameter | Serializer[Any] | type[Serializer[Any]]]:
        schema = rest_input_schema(self._spec())
        path_names = set(self._tool_view.path_names)
        params: list[OpenApiParameter | Serializer[Any] | type[Serializer[Any]]] = [
            OpenApiParameter("project", str, OpenApiParameter.PATH, description="The project's slug.")
        ]
        for name, prop in schema["properties"].items():
            location: Literal["path", "query"] = "path" if name in path_names else "query"
            prop = dict(prop)
            if name in self._tool_view.plural_names:
                prop = {"type": "string", "enum": [f"{t}s" for t in ELEMENT_TYPES]}
            explode = prop.get("type") == "array" and _items_type(prop) in SCALARS
            params.append(
                OpenApiParameter(
                    name,
                    prop if prop.get("type") not in ("object",) else {"type": "string"},
                    location,
                    required=location == OpenApiParameter.PATH or name in schema.get("required", []),
                    description=prop.get("description", ""),
                    explode=explode if prop.get("type") == "array" else None,
                )
            )
        return params

    # drf-spectacular documents a dict of status code → serializer (or raw schema); its type names one only.
    def get_response_serializers(self) -> dict[str, Any]:  # type: ignore[override]
        body = output_schema_ref(self._spec())
        error = {"$ref": "#/components/schemas/ToolError"}
        return {
            "200": body,
            "400": error,
            "401": error,
            "403": error,
            "404": error,
            "409": error,
            "429": error,
            "503": error,
            "504": error,
        }

    def _get_response_for_code(self, serializer: Any, status_code: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(serializer, dict):  # a raw JSON schema from the registry
            description = "The result envelope." if status_code == "200" else "An application error."
            return {"description": description, "content": {"application/json": {"schema": serializer}}}
        response: dict[str, Any] = super()._get_response_for_code(  # type: ignore[no-untyped-call]  # unannotated
            serializer, status_code, *args, **kwargs
        )
        return response

    def get_request_serializer(self) -> None:
        return None


def output_schema_ref(spec: ToolSpec) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{spec.output_model.__name__}"}


def openapi_components(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: the result models' JSON Schemas as components (pydantic writes
    its refs as ``#/components/schemas/…``), and the error body. Two different models under one name would
    silently change a schema: refused."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["ToolError"] = TOOL_ERROR_SCHEMA
    served = [_specs().get(route.tool) for route in routes()] + list(action_specs().values())
    for spec in served:
        if spec is None:
            continue
        generated = spec.output_model.model_json_schema(
            mode="serialization", ref_template="#/components/schemas/{model}"
        )
        for name, schema in {**generated.pop("$defs", {}), spec.output_model.__name__: generated}.items():
            if name in schemas and schemas[name] != schema:
                raise ValueError(f"two result models are both called {name}")
            schemas[name] = schema
    result["jsonSchemaDialect"] = JSON_SCHEMA_DIALECT
    return result


class ToolView(BaseApiView):
    """One registry tool over REST (GET). Thin: authenticate → scope → gate → arguments → service."""

    authentication_classes = [ApiBearerAuthentication]
    permission_classes = [HasApiReadScope]
    schema = ToolSchema()
    tool: str = ""
    path_names: tuple[str, ...] = ()
    plural_names: tuple[str, ...] = ()  # path parameters written in the plural (``pipes``)

    def get(self, request: Request, project: str, **path_args: str) -> Response:
        spec = _specs().get(self.tool)
        if spec is None:  # not exposed in this deployment
            raise NotFoundTool()
        token = cast(VerifiedToken, request.auth)  # set by ApiBearerAuthentication, required by HasApiReadScope
        scope = member_scope(token=token, project_slug=project)
        access.require_call(scope, tool=spec.name, permissions=spec.permissions, bound=False)
        args = parse_arguments(spec, dict(request.query_params.lists()), path_args)
        access.require_permissions(scope, spec.permissions_for(args))
        with rest_slot(scope.principal_id, scope.project_id):  # R-PAGE-7 holds on every edge
            body = run_read_only(spec, scope, args)
        logger.info("api call principal=%s project=%s tool=%s", scope.principal_id, scope.project_slug, spec.name)
        response = Response(body)
        response["Cache-Control"] = "private, no-store"
        return response


class NotFoundTool(ApplicationError):
    code = "NOT_FOUND"
    http_status = 404
    default_message = "No such resource."


def _view(route: Route) -> Any:
    params = [part[1:-1].split(":") for part in route.path.split("/") if part.startswith("<")]
    attrs = {
        "tool": route.tool,
        "path_names": tuple(name for _, name in params),
        "plural_names": tuple(name for converter, name in params if converter == "element_types"),
    }
    view_class = cast(type[ToolView], type(f"{route.tool}_view", (ToolView,), attrs))
    return view_class.as_view()


def example_request(spec: ToolSpec, arguments: Mapping[str, Any]) -> tuple[str, dict[str, list[str]]]:
    """The REST request of a call with ``arguments``: the path under the project (path parameters filled
    in, element types in the plural) and the query parameters as ``parse_arguments`` reads them back —
    arrays of scalars as repeated values, anything structured as JSON."""
    assert spec.rest is not None, f"{spec.name} is not on REST"
    properties = rest_input_schema(spec)["properties"]
    query = {k: v for k, v in arguments.items() if k != "context_handle"}
    parts = []
    for part in spec.rest.split("/"):
        if part.startswith("<"):
            converter, name = part[1:-1].split(":")
            value = str(query.pop(name))
            parts.append(f"{value}s" if converter == "element_types" else value)
        else:
            parts.append(part)
    params: dict[str, list[str]] = {}
    for name, value in query.items():
        prop = properties[name]
        if prop.get("type") == "array" and _items_type(prop) in SCALARS:
            params[name] = [_scalar(v) for v in value]
        elif isinstance(value, dict | list):
            params[name] = [json.dumps(value)]
        else:
            params[name] = [_scalar(value)]
    return "/".join(parts), params


def _scalar(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


urlpatterns = [path(route.path, _view(route), name=f"api-{route.tool}") for route in routes()]
urlpatterns += action_urlpatterns()


def reset_caches() -> None:
    """Forget the REST tool specs and their validators (tests change ``TJWATER_MCP_EXPOSED_TOOLS``)."""
    _specs.cache_clear()
    _validator.cache_clear()
