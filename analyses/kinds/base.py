"""What every analysis kind has in common: the result rows and the outcome of a run, the abstract kind,
the schema pieces every kind shares (``start``, ``duration_minutes``, ``elements``, ``request_key``), the
check of a request against its JSON Schema (Draft 2020-12, ``jsonschema``) with refusals that name the
field, and the conversion between the project's units and SI (``queries.units``: shown = SI·factor+offset,
so SI = (shown − offset)/factor).

The canonical parameters a kind's ``validate`` returns are hashed for idempotency (``queries.runs.inputs``,
RFC 8785): SI numbers, ``start`` as a UTC instant to the second, id lists sorted where order means
nothing, defaults filled in, ``request_key`` left out — the same question gives the same dict.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from pydantic import BaseModel, Field

from analyses.errors import InvalidArgument
from queries.units import declared
from queries.units import unit as unit  # the kinds read it from here

if TYPE_CHECKING:
    import pandas as pd
    from wntr.network import WaterNetworkModel
    from wntr.sim.results import SimulationResults

    from contexts.models import Project
    from queries.runs.cost import RunShape

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"
MAX_DURATION_MINUTES = 7 * 24 * 60
MAX_ELEMENTS = 500
#: Lists of a result (affected nodes, flushed pipes, arrivals) name at most this many; ``count`` says all.
LIST_LIMIT = 200
#: A progress callback: fraction done (0–1) and a sentence for the caller.
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class ResultRow:
    """One result of a run (an ``AnalysisResult`` row): its type, its payload in the project's units with
    a ``units`` map, and the elements it is about (``{"element_type": "junction", "element_id": "123"}``)."""

    result_type: str
    payload: dict[str, Any]
    element_refs: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """What a run computed: the headline numbers, the result rows, the scenario's WNTR results (SI, for
    the caller to store), the burst point's leak demand series, and the UTC instant the window starts."""

    summary: dict[str, Any]
    results: list[ResultRow]
    series: SimulationResults | None
    leak: tuple[str, pd.Series] | None
    start: datetime


class Payload(BaseModel):
    """A result's payload (its ``ResultRow.payload``, typed per kind and result type in the output schema of
    ``list_analysis_results``): every quantity in the project's units, named in ``units``."""

    units: dict[str, str] = Field(description="The unit of each quantity of the payload, by its field name.")


def counted(description: str) -> Any:
    """A count field (``x-quantity: count``)."""
    return Field(description=description, json_schema_extra=declared("count"))


def measured(name: str, description: str = "") -> Any:
    """A field of quantity ``name`` (``queries.units``), in the project's units."""
    return Field(description=description or None, json_schema_extra=declared(name))


def begin(wn: WaterNetworkModel, start: datetime, project: Project) -> dict[str, Any]:
    """Ready ``wn`` for a run from ``start``: patterns on the project's local clock, and the network's
    state then — the stored baseline's (tank levels, pumps and valves) at its last instant at or before
    ``start`` within an hour, else the model file's initial state. Returns what the run's summary says of
    it (``initial_state``)."""
    from queries.importer.baseline_window import align_patterns, start_from_baseline

    align_patterns(wn, start, project)
    at = start_from_baseline(wn, project, start)
    return {"initial_state": "the model file's" if at is None else f"the stored baseline's at {iso_utc(at)}"}


def to_si(value: float, quantity: str, unit_system: str) -> float:
    """``value`` of ``quantity`` in the project's units, in SI (the inverse of ``queries.units.shown``)."""
    s = unit(quantity, unit_system)
    return (float(value) - s.offset) / s.factor


def from_si(value: float, quantity: str, unit_system: str) -> float:
    """SI ``value`` of ``quantity`` in the project's units, to 6 significant digits (``Shown.__call__``)."""
    return unit(quantity, unit_system)(float(value))


def iso_utc(at: datetime) -> str:
    """``at`` as the canonical UTC instant: ``YYYY-MM-DDTHH:MM:SSZ``."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_utc(text: str) -> datetime:
    """A canonical ``start`` back to an aware UTC datetime."""
    return datetime.fromisoformat(text).astimezone(UTC)


def refuse(field_name: str, message: str, **details: object) -> InvalidArgument:
    """An ``InvalidArgument`` naming ``field_name`` in its message and its details."""
    return InvalidArgument(message, details={"field": field_name, **details})


def quantity_field(quantity: str, unit_system: str, description: str, **rules: Any) -> dict[str, Any]:
    """A number of ``quantity`` in the project's units: ``x-unit`` is its label, the description names it."""
    label = unit(quantity, unit_system).label
    return {"type": "number", "x-unit": label, "description": f"{description} In {label}.", **rules}


def fixed_unit_field(label: str, description: str, **rules: Any) -> dict[str, Any]:
    """A number whose unit is the same in every unit system (mg/L, mg/min)."""
    return {"type": "number", "x-unit": label, "description": f"{description} In {label}.", **rules}


def id_list(description: str, min_items: int, max_items: int) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 100}, "minItems": min_items,
            "maxItems": max_items, "uniqueItems": True, "description": description}  # fmt: skip


START: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "description": "When the window starts: ISO 8601 with its UTC offset (e.g. 2026-03-01T06:00:00+08:00).",
}
DURATION: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MINUTES,
                            "description": "The window's length in minutes (at most 7 days)."}  # fmt: skip
COMMON: dict[str, dict[str, Any]] = {
    "elements": id_list(f"Node and link ids whose series to keep (1 to {MAX_ELEMENTS}); all when omitted "
                        "for a short window.", 1, MAX_ELEMENTS),  # fmt: skip
    "request_key": {"type": "string", "maxLength": 100,
                    "description": "The caller's key for this request: the same key and question is one run."},
}  # fmt: skip


def object_schema(title: str, properties: Mapping[str, dict[str, Any]], required: Sequence[str],
                  **extra: Any) -> dict[str, Any]:  # fmt: skip
    """The input schema of a kind: its own properties, then ``elements`` and ``request_key`` (a copy of
    its own: callers may change it)."""
    return copy.deepcopy({"$schema": SCHEMA_URI, "title": title, "type": "object",
                          "properties": {**properties, **COMMON}, "required": list(required),
                          "additionalProperties": False, **extra})  # fmt: skip


#: A sentence per JSON Schema keyword, after the field's name (``{}``: the keyword's value).
_SENTENCES = {
    "type": "must be of type {}",
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "exclusiveMinimum": "must be more than {}",
    "exclusiveMaximum": "must be less than {}",
    "minItems": "needs at least {} items",
    "maxItems": "takes at most {} items",
    "uniqueItems": "must not repeat an id",
    "minLength": "must not be empty",
    "maxLength": "must be at most {} characters",
    "oneOf": "must be a number or a list of numbers",
    "enum": "must be one of {}",
}


def _field_of(error: ValidationError, schema: Mapping[str, Any]) -> tuple[str, str]:
    """The top-level field an error is about, and a sentence naming it."""
    instance, rule, value = error.instance, str(error.validator), error.validator_value
    if error.absolute_path:
        name = str(error.absolute_path[0])
        where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in list(error.absolute_path)[1:])
        sentence = _SENTENCES[rule].format(value) if rule in _SENTENCES else f"is not valid: {error.message[:200]}"
        return name, f"{where} {sentence}."
    listed: list[Any] = list(value) if isinstance(value, list) else []
    if rule == "required" and isinstance(instance, Mapping):
        missing = [str(r) for r in listed if r not in instance]
        return missing[0], f"{missing[0]} is required."
    if rule == "additionalProperties" and isinstance(instance, Mapping):
        extra = sorted(str(k) for k in instance if k not in schema.get("properties", {}))
        return extra[0], f"{', '.join(extra)}: not a parameter of this analysis."
    if rule == "oneOf":
        names = [str(n) for option in listed for n in option.get("required", [])]
        return names[0], f"give exactly one of {' or '.join(names)}."
    return "parameters", f"the parameters are not valid: {error.message[:200]}."


def check_schema(schema: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Refuse ``params`` that ``schema`` does not accept, naming the field (the most relevant error)."""
    error = best_match(Draft202012Validator(schema).iter_errors(params))
    if error is not None:
        name, message = _field_of(error, schema)
        raise refuse(name, message)


def start_of(params: Mapping[str, Any]) -> str:
    """The request's ``start`` as the canonical UTC instant; a time without an offset is refused."""
    text = str(params["start"])
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise refuse("start", f"start {text!r} is not an ISO 8601 date-time.") from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise refuse("start", f"start {text!r} has no UTC offset: give it with one (e.g. {text}+08:00 or {text}Z).")
    return iso_utc(at)


def unknown_ids(field_name: str, ids: Iterable[str], known: Iterable[str], what: tuple[str, str]) -> None:
    """Refuse the ids of ``field_name`` that are not in ``known``, naming them all (``what``: what they
    should be, one and many: ``("a pipe", "pipes")``)."""
    names = set(known)
    missing = sorted({i for i in ids if i not in names})
    if missing:
        listed = ", ".join(repr(i) for i in missing[:20]) + (" …" if len(missing) > 20 else "")
        verb = f"is not {what[0]}" if len(missing) == 1 else f"are not {what[1]}"
        raise refuse(field_name, f"{field_name} {listed} {verb} of the model.", unknown=missing[:100])


def window_step(duration_s: int, step_s: int) -> int:
    """The reporting step: ``step_s`` or less, dividing the window so that its end is a report time."""
    return math.gcd(step_s, duration_s)


def window_shape(wn: WaterNetworkModel, minutes: int, step_s: int, scenarios: int, *, extra: int = 0) -> RunShape:
    """The cost model's shape of a run of ``scenarios`` over a window of ``minutes`` reported every
    ``step_s`` or less (``window_step``); ``extra``: nodes and links the run adds (a burst point)."""
    from queries.runs.cost import RunShape

    duration_s = int(minutes) * 60
    return RunShape(nodes=len(wn.node_name_list) + extra, links=len(wn.link_name_list) + extra,
                    hours=duration_s / 3600, step_s=window_step(duration_s, step_s), scenarios=scenarios)  # fmt: skip


def node_ref(wn: WaterNetworkModel, node: str) -> dict[str, str]:
    """An element reference to a node (junction, reservoir or tank) of ``wn``."""
    return {"element_type": str(wn.get_node(node).node_type).lower(), "element_id": node}


def link_ref(wn: WaterNetworkModel, link: str) -> dict[str, str]:
    """An element reference to a link (pipe, pump or valve) of ``wn``."""
    return {"element_type": str(wn.get_link(link).link_type).lower(), "element_id": link}


class AnalysisKind(ABC):
    """One analysis kind: its names, its input schema, its validation into canonical SI parameters, its
    run's shape for the cost model, and its computation (``queries.runs``) presented in project units."""

    name: str
    tool: str
    rest_path: str
    title: str
    #: Example arguments of the tool (against the demo utility).
    example: ClassVar[dict[str, Any]]
    quality: bool = False
    scenarios: int = 1
    #: The payload model of each result type the kind writes (published by ``list_analysis_results``).
    results: ClassVar[dict[str, type[Payload]]]

    @abstractmethod
    def input_schema(self, unit_system: str) -> dict[str, Any]:
        """The JSON Schema (Draft 2020-12) of a request, numbers in ``unit_system``'s units."""

    @abstractmethod
    def canonical(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str) -> dict[str, Any]:
        """The kind's own canonical SI parameters of schema-valid ``params`` (ids checked against ``wn``)."""

    def validate(self, params: Mapping[str, Any], *, wn: WaterNetworkModel, unit_system: str,
                 project: Project | None = None) -> dict[str, Any]:  # fmt: skip
        """The canonical validated parameters of ``params`` (see the module docstring), or a refusal
        (``InvalidParameter`` naming the field); with ``project``, also what only the project knows."""
        check_schema(self.input_schema(unit_system), params)
        request = {k: v for k, v in params.items() if k != "request_key"}
        out = self.canonical(request, wn=wn, unit_system=unit_system)
        if project is not None:
            self.check_project(out, project)
        elements = list(request.get("elements", []))
        known = [*wn.node_name_list, *wn.link_name_list]
        unknown_ids("elements", elements, known, ("a node or link", "nodes or links"))
        out["elements"] = sorted(elements)
        return out

    def check_project(self, si: Mapping[str, Any], project: Project) -> None:  # noqa: B027 - a hook: most kinds need none
        """Refuse canonical ``si`` naming what the project does not have beside its model (a district of
        its GIS register); nothing by default."""

    @abstractmethod
    def shape(self, si: Mapping[str, Any], wn: WaterNetworkModel) -> RunShape:
        """What the run of ``si`` on ``wn`` costs to the cost model."""

    def window_minutes(self, si: Mapping[str, Any]) -> int:
        """The length of the window the run's series cover (0: it has none, and stores no series)."""
        return int(si.get("duration_minutes") or 0)

    @abstractmethod
    def compute(self, wn: WaterNetworkModel, si: Mapping[str, Any], *, project: Project, progress: Progress,
                unit_system: str, valves: Sequence[tuple[str, str, str]] | None = None) -> Outcome:  # fmt: skip
        """Run ``si`` on ``wn`` (changed: give a copy) and present it in ``unit_system``'s units."""
