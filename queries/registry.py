"""The tool/source registry (SPEC R-REG, STYLE "registry"): one declaration per tool.

A declaration is data — name, description, input and output JSON Schema 2020-12, required
permission(s), limits, data semantics, whether evidence may be saved, annotations, its REST route (or why
it has none) and example arguments — plus the service function it calls. Apps register their families
into ``tjwater.registry.TOOLS`` from ``AppConfig.ready()`` (``queries.apps``, ``evidence.apps``); the MCP
catalog, the dispatch path, the binding API, REST, ``manage.py mcp_catalog_check`` and the parity tests
all read that registry. A new tool in an existing family is its schema, its service, its declaration here
and its test — no other file (``tests/queries/test_registry.py`` proves it with an app of its own).

Input schemas are written by hand (they are the wire contract): objects with
``additionalProperties: false``, only local ``$defs``, and a required ``context_handle`` on every
business tool (R-CTX-6). Identity, project and network never appear in inputs. Output schemas are the
JSON Schema of the Pydantic result model the service returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from pydantic import BaseModel

from contexts.scope import QueryScope
from queries.plan import Plan
from queries.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET, Origin, PageRequest
from queries.units import presented
from tjwater.registry import TOOLS

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
ELEMENT_TYPES = ["junction", "pipe", "valve", "pump", "tank", "reservoir"]
# Permission codes (SPEC §5; ``contexts.models.Permission``).
WEBGIS_VIEW = "webgis.view"
SCADA_VIEW = "scada.view"
SIMULATION_VIEW = "simulation.view"
OPTIMIZATION_RUN = "optimization.run"

#: (scope, validated arguments) → the service's plan (``queries.plan``), run by whichever edge calls.
Invoke = Callable[[QueryScope, Mapping[str, Any]], Plan[BaseModel]]
#: (scope, validated arguments) → the result of an action (a submit or a cancel): a synchronous function
#: every edge runs off the event loop in a write transaction.
Act = Callable[[QueryScope, Mapping[str, Any]], BaseModel]
#: What a tool does: reads (a plan), or starts or stops work (``act``).
EFFECTS = ("read", "submit", "cancel")
Summarize = Callable[[Any], str]


@dataclass(frozen=True)
class ToolLimits:
    """Caps applied by the service (in SQL) and checked by the wire schema."""

    max_page: int | None = None  # None: not a collection
    max_targets: int | None = None
    max_window_s: int | None = None


@dataclass(frozen=True)
class Follow:
    """How another face of a submit tool's job follows it (the MCP Tasks face, ``mcp_app.tasks_extension``):
    ``read`` is the read tool that renders the job's run (its final result), ``cancel`` the action tool that
    stops it. Both are tools of this registry, called with the fields of the submit's answer (``data``)
    their input schemas require besides ``context_handle``."""

    read: str
    cancel: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool: everything the catalog, dispatch and the catalog check need to know about it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_model: type[BaseModel]
    permissions: tuple[str, ...]
    source: str
    semantics: Origin
    invoke: Invoke | None
    summarize: Summarize
    limits: ToolLimits = field(default_factory=ToolLimits)
    evidence_allowed: bool = True
    task_scope: str = "any"  # "any" or "bound_task" (task tools only read the bound task)
    #: Permissions a call's arguments add to ``permissions`` (e.g. a mode that also reads model data);
    #: ``None``: the arguments add none. Checked by ``contexts.access.require_permissions`` on every edge
    #: and recorded with the call's evidence.
    argument_permissions: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None
    #: Its REST route under ``/api/v1/projects/<project>/`` (Django path syntax; ``<element_types:…>`` takes
    #: the plural ``pipes``), or ``not_on_rest`` saying why it has none — one of the two, always.
    rest: str | None = None
    not_on_rest: str = ""
    #: Example arguments (without ``context_handle``) against the demo utility, the first one a success:
    #: the parity tests run every one through both plan drivers and the first one through REST and MCP.
    examples: tuple[Mapping[str, Any], ...] = ()
    #: One item of the result can exceed the inline cap (free-form properties, payloads, parameters): the
    #: tool takes ``part`` (``PART_SCHEMA``) to read into it, and the inline cut names what it left out
    #: (``mcp_app.inline``, issue 23 item 9). Only such tools carry the argument.
    item_parts: bool = False
    #: A time series that is not a page (``data.points`` in time order): cut inline by time, continued
    #: with this argument set to the first point left out.
    series_start: str | None = None
    #: Where the result's page is (the dict holding ``items``, ``offset``, ``has_more``), for the inline
    #: cut: ``data`` for every collection tool; ``get_task_context`` has its page at ``data.page``.
    page_holder: tuple[str, ...] = ("data",)
    #: ``read`` (``invoke``: a plan), or ``submit``/``cancel``: an action tool (``act``, and no ``invoke``),
    #: which needs the ``mcp.analysis.run`` scope too, saves no evidence and is not read-only.
    effect: str = "read"
    act: Act | None = None
    #: A submit tool whose job other faces can follow (``Follow``); None: it is answered only as a job.
    follow: Follow | None = None

    def plan(self, scope: QueryScope, arguments: Mapping[str, Any]) -> Plan[BaseModel]:
        """The read tool's plan for one call (an action tool has none: it ``act``s)."""
        if self.invoke is None:
            raise TypeError(f"tool {self.name} is an action tool: it has no plan")
        return self.invoke(scope, arguments)

    def permissions_for(self, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        """Every permission code this call needs: the tool's own plus what its arguments add."""
        if self.argument_permissions is None:
            return self.permissions
        return tuple(sorted({*self.permissions, *self.argument_permissions(arguments)}))

    def __post_init__(self) -> None:
        if (self.rest is None) == (not self.not_on_rest):
            raise ImproperlyConfigured(f"tool {self.name}: give either its REST route or why it has none")
        if not self.examples:
            raise ImproperlyConfigured(f"tool {self.name}: give at least one example of its arguments")
        if self.effect not in EFFECTS:
            raise ImproperlyConfigured(f"tool {self.name}: effect is one of {', '.join(EFFECTS)}")
        if (self.effect == "read") != (self.invoke is not None) or (self.effect == "read") == (self.act is not None):
            raise ImproperlyConfigured(f"tool {self.name}: a read tool has invoke, an action tool act (not both)")
        if self.follow is not None and self.effect != "submit":
            raise ImproperlyConfigured(f"tool {self.name}: only a submit tool's job is followed")
        if self.effect != "read" and self.evidence_allowed:
            raise ImproperlyConfigured(f"tool {self.name}: an action tool saves no evidence (its run is audited)")
        # The one place results are put into the project's unit system on the way out (R-ONB-3): every
        # edge (MCP, REST, evidence) runs ``invoke``, so all of them get and keep the same numbers.
        if self.invoke is not None:
            object.__setattr__(self, "invoke", presented(self.invoke))
        if self.item_parts:
            schema = self.input_schema
            object.__setattr__(
                self, "input_schema", {**schema, "properties": {**schema["properties"], "part": PART_SCHEMA}}
            )

    @property
    def output_schema(self) -> dict[str, Any]:
        """The result envelope *or* the business-error body: an ``isError`` result carries
        ``{code, message, retryable}`` as ``structuredContent`` too, and clients that validate every
        ``structuredContent`` against ``outputSchema`` (the TypeScript SDK does) must accept it."""
        schema = self.output_model.model_json_schema(mode="serialization")
        defs = schema.pop("$defs", {})
        name = self.output_model.__name__
        return {
            "$schema": JSON_SCHEMA_DIALECT,
            "type": "object",
            "anyOf": [{"$ref": f"#/$defs/{name}"}, {"$ref": "#/$defs/ToolError"}],
            "$defs": {**defs, name: schema, "ToolError": TOOL_ERROR_SCHEMA},
        }

    @property
    def annotations(self) -> dict[str, Any]:
        """R-TOOL-2: tools that may save evidence are not read-only (they append evidence) but never
        destructive. Annotations are hints for clients; they never decide authorization."""
        if self.effect == "submit":  # starts a run: not read-only; the same inputs return the same run
            return {"title": self.title, "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
                    "openWorldHint": False}  # fmt: skip
        if self.effect == "cancel":  # stops a run: what it would have written is never written
            return {"title": self.title, "readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
                    "openWorldHint": False}  # fmt: skip
        if self.evidence_allowed:
            return {"title": self.title, "readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}
        return {"title": self.title, "readOnlyHint": True, "openWorldHint": False}


TOOL_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A business failure (isError=true): a stable code, an actionable message, retryable.",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
        "details": {"type": "object"},
    },
    "required": ["code", "message", "retryable"],
    "additionalProperties": False,
}

PART_MAX_DEPTH = 32
#: The ``part`` argument of the tools whose one item can exceed the inline cap (``ToolSpec.item_parts``):
#: sent back as ``continue_with`` or an ``omitted`` path description of the result names it.
PART_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Read one part of a result too large to return inline, as continue_with or an omitted "
    "path description names it: the value at data_path of this call's result (object keys and array indexes "
    "as strings, starting with 'data'), from offset: array elements, object members (by key) or string "
    "characters. The result then carries part (where it is, total, has_more) and is truncated.",
    "properties": {
        "data_path": {
            "type": "array",
            "items": {"type": "string", "maxLength": 200},
            "minItems": 1,
            "maxItems": PART_MAX_DEPTH,
        },
        "offset": {"type": "integer", "minimum": 0, "maximum": 100_000_000, "default": 0},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100_000},
    },
    "required": ["data_path"],
    "additionalProperties": False,
}

CONTEXT_HANDLE = {
    "type": "string",
    "minLength": 16,
    "maxLength": 256,
    "description": "The context handle returned when the context was created (binds project and purpose).",
}


def input_object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A business tool's input schema: closed object, ``context_handle`` required (R-CTX-6)."""
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "type": "object",
        "properties": {"context_handle": CONTEXT_HANDLE, **properties},
        "required": ["context_handle", *required],
        "additionalProperties": False,
    }


def page_properties(max_limit: int = MAX_LIMIT) -> dict[str, Any]:
    return {
        "limit": {"type": "integer", "minimum": 1, "maximum": max_limit, "default": DEFAULT_LIMIT},
        "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
    }


def page_from(args: Mapping[str, Any], max_limit: int = MAX_LIMIT) -> PageRequest:
    return PageRequest(limit=args.get("limit", DEFAULT_LIMIT), offset=args.get("offset", 0), max_limit=max_limit)


ELEMENT_TYPE = {"type": "string", "enum": ELEMENT_TYPES, "description": "Network element type."}
ELEMENT_ID = {"type": "string", "minLength": 1, "maxLength": 64, "description": "The element's network id."}


def all_tools() -> list[ToolSpec]:
    """Every served tool, sorted by name (the stable catalog order, R-PROTO-5): what the apps registered
    into ``tjwater.registry.TOOLS`` from their ``AppConfig.ready()``."""
    return TOOLS.tools()  # type: ignore[return-value]


def tools_by_name() -> dict[str, ToolSpec]:
    return {tool.name: tool for tool in all_tools()}


def tool_spec(name: str) -> ToolSpec:
    """One served tool's declaration (``KeyError`` for a name the registry does not serve)."""
    return tools_by_name()[name]
