"""Test-only tools (``TJWATER_MCP_TEST_TOOLS``, test settings only): never in a product catalog."""

from __future__ import annotations

from queries.registry import WEBGIS_VIEW, ToolSpec, input_object
from queries.services import testing

TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="test_slow_query",
        title="Slow query (test only)",
        description="Test-only: sleeps inside PostgreSQL to exercise cancellation and concurrency limits.",
        input_schema=input_object({"seconds": {"type": "number", "minimum": 0, "maximum": 60}}, ["seconds"]),
        output_model=testing.SlowQueryResult,
        permissions=(WEBGIS_VIEW,),
        source="diagnostic",
        semantics="diagnostic",
        evidence_allowed=False,
        invoke=lambda scope, a: testing.slow_query.plan(scope=scope, seconds=float(a["seconds"])),
        summarize=lambda r: f"Slept {r.data.slept_s} s.",
        not_on_rest="test-only tool",
        examples=({"seconds": 0.01},),
    )
]
