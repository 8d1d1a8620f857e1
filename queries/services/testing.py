"""A deliberately slow query, registered as a tool only when ``TJWATER_MCP_TEST_TOOLS`` is on (test
settings). It exists to prove that cancelling a call cancels its SQL in PostgreSQL (R-PROTO-6)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from contexts.scope import QueryScope
from queries.plan import Plan, Raw, service
from queries.schemas.common import ResultEnvelope
from queries.units import declared


class SlowQueryData(BaseModel):
    slept_s: float = Field(json_schema_extra=declared("s"))


class SlowQueryResult(ResultEnvelope[SlowQueryData]):
    pass


@service
def slow_query(*, scope: QueryScope, seconds: float) -> Plan[SlowQueryResult]:
    """Sleep ``seconds`` inside PostgreSQL (``pg_sleep``) and report it."""
    yield Raw("SELECT pg_sleep(%s)", [seconds])
    return SlowQueryResult(
        source="diagnostic",
        source_ref=f"project:{scope.project_slug}/pg_sleep",
        queried_at=datetime.now(UTC),
        origin="diagnostic",
        data=SlowQueryData(slept_s=seconds),
    )
