"""A deliberately slow query, registered as a tool only when ``TJWATER_MCP_TEST_TOOLS`` is on (test
settings). It exists to prove that cancelling a call cancels its SQL in PostgreSQL (R-PROTO-6)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from pydantic import BaseModel

from contexts.scope import QueryScope
from queries.schemas.common import ResultEnvelope


class SlowQueryData(BaseModel):
    slept_s: float


class SlowQueryResult(ResultEnvelope[SlowQueryData]):
    pass


def slow_query(*, scope: QueryScope, seconds: float) -> SlowQueryResult:
    """Sleep ``seconds`` inside PostgreSQL (``pg_sleep``) and report it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [seconds])
    return SlowQueryResult(
        source="diagnostic",
        source_ref=f"project:{scope.project_slug}/pg_sleep",
        queried_at=datetime.now(UTC),
        origin="diagnostic",
        data=SlowQueryData(slept_s=seconds),
    )
