"""Typed result payloads (issue 42 item 2, "results are typed"): the payload model of each ``result_type``
of each analysis kind, published in ``list_analysis_results``'s output schema so that an agent can rely
on its keys.

``queries`` does not import the app that defines the models (``analyses``): it registers the dotted path
of a provider here from its ``AppConfig.ready()`` (``register_result_payloads``), imported on first use.
The page's schema then says, for each kind (the page's ``kind``) and each of its result types, what the
item's ``payload`` is (JSON Schema 2020-12 ``if``/``then``, the payload's schema inlined). A result type
no kind registers (a demo's sensor placement, an older run) keeps the untyped object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

#: kind → result type → the payload model.
Payloads = Mapping[str, Mapping[str, type[BaseModel]]]

_PROVIDERS: list[str] = []


def register_result_payloads(dotted_path: str) -> None:
    """A function returning ``Payloads`` (a dotted path: registering imports nothing)."""
    if dotted_path not in _PROVIDERS:
        _PROVIDERS.append(dotted_path)


def typed_payloads() -> dict[str, dict[str, type[BaseModel]]]:
    """Every registered payload model, by kind and result type."""
    from django.utils.module_loading import import_string

    found: dict[str, dict[str, type[BaseModel]]] = {}
    for path in _PROVIDERS:
        provider: Callable[[], Payloads] = import_string(path)
        for kind, by_type in provider().items():
            found.setdefault(kind, {}).update(by_type)
    return found


def inline(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema (serialization) with its ``$defs`` inlined (payload models are small trees,
    never recursive), so it can sit inside another schema."""
    schema = model.model_json_schema(mode="serialization")
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


def _when(field: str, value: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {field: {"const": value}}, "required": [field]}, "then": then}


def page_schema(schema: dict[str, Any], _cls: type[BaseModel] | None = None) -> None:
    """``json_schema_extra`` of the results page: per kind, per result type, the item's payload model."""
    rules = []
    for kind, by_type in sorted(typed_payloads().items()):
        per_type = [
            _when("result_type", result_type, {"properties": {"payload": inline(model)}})
            for result_type, model in sorted(by_type.items())
        ]
        rules.append(_when("kind", kind, {"properties": {"items": {"items": {"allOf": per_type}}}}))
    if rules:
        schema["allOf"] = rules
