"""The demo utility of the queries tests (``queries.demo.seed``): alice holds every permission on
``tianjin-demo``; bob holds ``webgis.view`` only on ``tianjin-demo`` and every permission on ``demo-b``;
carol has no membership. And the checks of a tool's reply (its outputSchema, its business error)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry

from queries.registry import tools_by_name

CLIENT = "tjwater-agent-mcp"
DEMO = "tianjin-demo"
DEMO_B = "demo-b"
# (principal, project) pairs that get an ordinary_chat context for the session.
BINDINGS = [("alice", DEMO), ("bob", DEMO), ("bob", DEMO_B)]


def validate_output(tool: str, structured: dict[str, Any]) -> None:
    """Raise unless ``structured`` validates against the tool's ``outputSchema`` (R-PROTO-4)."""
    schema = tools_by_name()[tool].output_schema
    Draft202012Validator(schema, registry=Registry()).validate(structured)


def structured(reply: dict[str, Any]) -> dict[str, Any]:
    """The ``structuredContent`` of a successful (not ``isError``) reply."""
    assert "result" in reply, reply
    assert reply["result"].get("isError") is not True, reply["result"]["structuredContent"]
    return reply["result"]["structuredContent"]


def business_error(reply: dict[str, Any]) -> str:
    """The stable code of an ``isError`` reply."""
    assert "result" in reply and reply["result"].get("isError") is True, reply
    return reply["result"]["structuredContent"]["code"]
