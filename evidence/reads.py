"""Reading saved evidence as whole documents and listings (R-EVID-4), for the MCP resources and any
other edge. Synchronous (Django's connection); what a scope may read is decided by
``contexts.access.evidence_reach``: the bound project and task, for a ``task_reader`` its parent run
(R-CTX-4), and only snapshots whose recorded permissions the reader holds now. An ``ordinary_chat``
scope reads none.

A whole document leaves the database only within the 8 MiB ceiling, decided in SQL on the size of the
text PostgreSQL sends (``octet_length(data::text)``, which can exceed the stored RFC 8785 size); a bigger
one is answered with an outline and the ``get_task_evidence`` arguments that page it. A document that
does leave is re-canonicalized (RFC 8785) and checked against its stored SHA-256 before it is returned,
so what a client reads is exactly what was hashed when it was saved.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rfc8785
from django.db import connection
from django.db.models import Q

from contexts.access import evidence_reach
from contexts.scope import QueryScope
from evidence.models import EVIDENCE_URI_PREFIX, EvidenceSnapshot
from evidence.task_tools import PAGE_CEILING_BYTES

logger = logging.getLogger(__name__)

LIST_PAGE = 50
OUTLINE_KEYS = 50


class EvidenceDigestMismatch(Exception):
    """A stored document no longer matches its digest: never returned (a server fault, logged)."""


class InvalidCursor(ValueError):
    pass


@dataclass(frozen=True)
class SnapshotInfo:
    evidence_id: str
    uri: str
    tool: str
    source: str
    run_id: int
    created_at: datetime
    byte_size: int
    sha256: str


@dataclass(frozen=True)
class SnapshotDocument:
    """A whole snapshot: ``text`` (its RFC 8785 form) when within the ceiling, otherwise ``outline``
    (top-level members and those of ``data``: kind and length) and ``page_with`` (the arguments of
    ``get_task_evidence`` for its first page)."""

    info: SnapshotInfo
    params: dict[str, Any]
    text: str | None
    outline: dict[str, Any] | None
    page_with: dict[str, Any] | None


def parse_evidence_uri(uri: str) -> uuid.UUID | None:
    if not uri.startswith(EVIDENCE_URI_PREFIX):
        return None
    try:
        return uuid.UUID(uri[len(EVIDENCE_URI_PREFIX) :])
    except ValueError:
        return None


def _scoped(scope: QueryScope) -> Any:
    """The snapshots ``scope`` may read (``contexts.access.evidence_reach``): the bound task (a reader:
    its parent run), and only those whose recorded permissions the reader holds now."""
    reach = evidence_reach(scope)
    if reach is None:
        return EvidenceSnapshot.objects.none()
    qs = EvidenceSnapshot.objects.filter(
        project_id=reach.project_id, task_id=reach.task_id, required_permissions__contained_by=reach.permissions
    )
    return qs if reach.run_id is None else qs.filter(run_id=reach.run_id)


def _info(row: dict[str, Any]) -> SnapshotInfo:
    return SnapshotInfo(
        evidence_id=str(row["id"]),
        uri=f"{EVIDENCE_URI_PREFIX}{row['id']}",
        tool=row["tool"],
        source=row["source"],
        run_id=row["run_id"],
        created_at=row["created_at"],
        byte_size=row["byte_size"],
        sha256=row["sha256"],
    )


INFO_FIELDS = ("id", "tool", "source", "run_id", "created_at", "byte_size", "sha256")


def encode_cursor(info: SnapshotInfo) -> str:
    raw = json.dumps([info.created_at.isoformat(), info.evidence_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, evidence_id = json.loads(raw)
        return datetime.fromisoformat(created), uuid.UUID(evidence_id)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidCursor() from None


def list_snapshots(
    *, scope: QueryScope, cursor: str | None, limit: int = LIST_PAGE
) -> tuple[list[SnapshotInfo], str | None]:
    """One page of the bound task's readable evidence, newest first (keyset paging on (created, id));
    returns the page and the cursor of the next one (``None`` at the end)."""
    qs = _scoped(scope)
    if cursor:
        created, last_id = decode_cursor(cursor)
        qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=last_id))
    rows = list(qs.order_by("-created_at", "-id").values(*INFO_FIELDS)[: limit + 1])
    infos = [_info(r) for r in rows[:limit]]
    return infos, (encode_cursor(infos[-1]) if len(rows) > limit else None)


_READ_SQL = f"""
SELECT s.id, s.tool, s.source, s.run_id, s.created_at, s.byte_size, s.sha256, s.params,
       CASE WHEN octet_length(t.text) <= %s THEN t.text END AS body,
       CASE WHEN octet_length(t.text) > %s THEN jsonb_build_object(
           'document', (SELECT jsonb_agg(o ORDER BY o ->> 'key' COLLATE "C") FROM (
               SELECT jsonb_build_object('key', e.key, 'kind', jsonb_typeof(e.value), 'length',
                   CASE jsonb_typeof(e.value) WHEN 'array' THEN jsonb_array_length(e.value)
                       WHEN 'object' THEN (SELECT count(*) FROM jsonb_object_keys(e.value))
                       WHEN 'string' THEN char_length(e.value #>> '{{}}') END) AS o
               FROM jsonb_each(CASE WHEN jsonb_typeof(s.data) = 'object' THEN s.data ELSE '{{}}'::jsonb END) AS e
               ORDER BY e.key COLLATE "C" LIMIT {OUTLINE_KEYS}) AS d),
           'data', (SELECT jsonb_agg(o ORDER BY o ->> 'key' COLLATE "C") FROM (
               SELECT jsonb_build_object('key', e.key, 'kind', jsonb_typeof(e.value), 'length',
                   CASE jsonb_typeof(e.value) WHEN 'array' THEN jsonb_array_length(e.value)
                       WHEN 'object' THEN (SELECT count(*) FROM jsonb_object_keys(e.value))
                       WHEN 'string' THEN char_length(e.value #>> '{{}}') END) AS o
               FROM jsonb_each(CASE WHEN jsonb_typeof(s.data -> 'data') = 'object' THEN s.data -> 'data'
                                    ELSE '{{}}'::jsonb END) AS e
               ORDER BY e.key COLLATE "C" LIMIT {OUTLINE_KEYS}) AS d)
       ) END AS outline
FROM {EvidenceSnapshot._meta.db_table} s CROSS JOIN LATERAL (SELECT s.data::text AS text) AS t
WHERE s.id = %s AND s.project_id = %s AND s.task_id = %s AND (%s::bigint IS NULL OR s.run_id = %s::bigint)
  AND s.required_permissions <@ %s::varchar(32)[]
"""


def read_snapshot(*, scope: QueryScope, evidence_id: uuid.UUID) -> SnapshotDocument | None:
    """The whole snapshot if the scope may read it (``None`` otherwise: missing and not-yours are the
    same answer). One statement; the document's text leaves the database only within the ceiling."""
    reach = evidence_reach(scope)
    if reach is None:
        return None
    run = reach.run_id
    with connection.cursor() as cursor:
        cursor.execute(
            _READ_SQL,
            [
                PAGE_CEILING_BYTES,
                PAGE_CEILING_BYTES,
                evidence_id,
                reach.project_id,
                reach.task_id,
                run,
                run,
                reach.permissions,
            ],
        )
        columns = [c.name for c in cursor.description]
        fetched = cursor.fetchone()
    if fetched is None:
        return None
    row = dict(zip(columns, fetched, strict=True))
    info = _info(row)
    params = row["params"] if isinstance(row["params"], dict) else json.loads(row["params"])
    if row["body"] is None:
        outline = row["outline"] if isinstance(row["outline"], dict) else json.loads(row["outline"])
        page_with = {"evidence_id": info.evidence_id, "data_path": [], "offset": 0, "limit": 20}
        return SnapshotDocument(info=info, params=params, text=None, outline=outline, page_with=page_with)
    canonical = rfc8785.dumps(json.loads(row["body"]))
    if hashlib.sha256(canonical).hexdigest() != info.sha256:
        logger.error("evidence digest mismatch id=%s", info.evidence_id)
        raise EvidenceDigestMismatch(info.evidence_id)
    return SnapshotDocument(info=info, params=params, text=canonical.decode(), outline=None, page_with=None)
