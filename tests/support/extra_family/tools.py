"""The whole of a new tool: its result schema, its service (an ORM-written plan) and its declaration."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from contexts.scope import QueryScope
from queries.models import Junction, Pipe, Tank
from queries.plan import Plan, count_of, service
from queries.registry import ELEMENT_TYPE, WEBGIS_VIEW, ToolSpec, input_object
from queries.schemas.common import ResultEnvelope
from queries.units import declared

NAME = "test_count_elements"
MODELS = {"junction": Junction, "pipe": Pipe, "tank": Tank}


class ElementCount(BaseModel):
    element_type: str
    count: int = Field(json_schema_extra=declared("count"))


class ElementCountResult(ResultEnvelope[ElementCount]):
    pass


@service
def count_elements(*, scope: QueryScope, element_type: str) -> Plan[ElementCountResult]:
    """How many elements of a type the project's network has."""
    count = yield count_of(MODELS[element_type].objects.filter(project_id=scope.project_id))
    return ElementCountResult(
        source="model_network",
        source_ref=f"project:{scope.project_slug}/{element_type}/count",
        queried_at=datetime.now(UTC),
        origin="model_network",
        data=ElementCount(element_type=element_type, count=count),
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name=NAME,
        title="Count elements (test only)",
        description="Test-only: how many elements of a type the project's network has.",
        input_schema=input_object({"element_type": {**ELEMENT_TYPE, "enum": sorted(MODELS)}}, ["element_type"]),
        output_model=ElementCountResult,
        permissions=(WEBGIS_VIEW,),
        source="model_network",
        semantics="model_network",
        evidence_allowed=False,
        invoke=lambda scope, a: count_elements.plan(scope=scope, element_type=a["element_type"]),
        summarize=lambda r: f"{r.data.count} {r.data.element_type} elements.",
        rest="test-extra/<element_types:element_type>/count",
        examples=({"element_type": "junction"}, {"element_type": "tank"}),
    )
]
