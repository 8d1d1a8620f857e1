"""The task tools as query plans (``queries.plan``): ``get_task_context`` and ``get_task_evidence``.

Both read only the task bound to the context (``scope.task_id`` / ``scope.run_id``, checked against
``scope.project_id`` in every statement): an id of another task, run or project is "not found", the
same answer as an id that does not exist (STYLE "scoped lookups"). A ``task_reader`` reads the evidence
of its parent run only (R-CTX-4); a ``task_execution`` context reads the evidence of every run of its
task (the current one and the runs it superseded).

Paging follows R-PAGE-4 and happens inside PostgreSQL: ``data_path`` selects a value with ``#>``; an
array is paged by index (``node -> i`` over ``generate_series``), an object by key in C collation
(``jsonb_each … ORDER BY key COLLATE "C"``), a string by Unicode character (``substr`` on text counts
characters). The page's JSON text is measured with ``octet_length`` in the same statement and only
leaves the database when it is within the 8 MiB ceiling.

DEMO samples (``evidence.demo``: a snapshot whose source is ``demo_sample``) are read differently (seed
001 "分页 大结果与数据语义"): the whole document's JSON text is measured in the database and leaves it only
within the 8 MiB ceiling, its RFC 8785 SHA-256 is verified against the stored digest, and only then is
``data_path`` selected and paged — with the same order rules, here in Python (code-point order of keys is
the C collation's byte order of their UTF-8). A sample that fails either check gives no page. Whole-
document reads (``mcp_app.resources``) verify every snapshot's digest before returning it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, get_args

import rfc8785
from django.db.models import OuterRef, Subquery

from contexts.access import evidence_reach
from contexts.errors import ApplicationError, InvalidParameter, LimitExceeded, NotFound
from contexts.models import ContextPurpose, QueryContext, Task, TaskReport, TaskRun
from contexts.scope import QueryScope
from evidence.models import EvidenceSnapshot
from evidence.schemas import (
    EvidencePage,
    JsonPage,
    RevisionSummary,
    RunSummary,
    TaskContextData,
    TaskContextResult,
    TaskEvidenceResult,
)
from evidence.services import evidence_uri
from queries.plan import Plan, Raw, count_of, service
from queries.schemas.common import Origin, PageInfo

logger = logging.getLogger(__name__)

#: The source of a snapshot the demo ships (``evidence.demo``): read whole and verified before paging.
DEMO_SAMPLE_SOURCE = "demo_sample"

#: The ceiling on what one page (or one whole document) may carry out of the database (R-PAGE-4).
PAGE_CEILING_BYTES = 8 * 1024 * 1024
DEFAULT_ITEMS = 20
MAX_ITEMS = 500
DEFAULT_CHARS = 2000
MAX_CHARS = 1_000_000
MAX_OFFSET = 100_000_000
MAX_PATH_DEPTH = 32
MAX_REVISIONS = 50
MAX_SECTIONS = 200
#: Page elements never carry a nested collection (seed 001 "嵌套集合返回路径描述"): an element that is an
#: array is described, an object keeps its scalar members and describes its arrays and objects; a string
#: is described above these sizes (an element / an object's member), so one element never fills a page.
NESTED_INLINE_BYTES = 2048
NESTED_MEMBER_BYTES = 256
ORIGINS: frozenset[str] = frozenset(get_args(Origin))

# One page of ``node`` (the value at data_path), cut and measured in SQL. ``{source}`` is one of the
# constant source statements below (never client text); it yields ``meta`` (jsonb) and ``node``.
# MATERIALIZED: ``node`` is selected (and the stored document detoasted) once, not once per element
# the page reads — inlined, an 8 MiB page took seconds. No page element carries a nested collection
# (seed 001: nested collections as path descriptions, issue 23 item 9): an array element is described, an
# object element keeps its scalars and describes its arrays and objects, a long string is described —
# ``{path, data_path, kind, length}``, which ``data_path`` pages into.
_DESCRIBE = """jsonb_build_object(
    'path', '$' || coalesce((SELECT string_agg(CASE WHEN u.s ~ '^[0-9]+$' THEN '[' || u.s || ']' ELSE '.' || u.s END,
                                               '' ORDER BY u.n) FROM unnest(@P@) WITH ORDINALITY AS u(s, n)), ''),
    'data_path', to_jsonb(@P@), 'kind', jsonb_typeof(@V@),
    'length', CASE jsonb_typeof(@V@) WHEN 'array' THEN jsonb_array_length(@V@)
                  WHEN 'object' THEN (SELECT count(*) FROM jsonb_object_keys(@V@))
                  ELSE char_length(@V@ #>> '{{}}') END)"""
_ELEMENT = (
    """CASE
    WHEN jsonb_typeof(x.v) = 'object' THEN (
        SELECT coalesce(jsonb_object_agg(m.key, CASE
            WHEN jsonb_typeof(m.value) IN ('array', 'object')
              OR (jsonb_typeof(m.value) = 'string' AND octet_length(m.value::text) > @SMALL@)
            THEN @MEMBER@ ELSE m.value END), '{{}}'::jsonb)
        FROM jsonb_each(x.v) AS m)
    WHEN jsonb_typeof(x.v) = 'array' OR (jsonb_typeof(x.v) = 'string' AND octet_length(x.v::text) > @BIG@)
        THEN @WHOLE@
    ELSE x.v
END""".replace("@MEMBER@", _DESCRIBE.replace("@V@", "m.value").replace("@P@", "(x.p || m.key)"))
    .replace("@WHOLE@", _DESCRIBE.replace("@V@", "x.v").replace("@P@", "x.p"))
    .replace("@BIG@", str(NESTED_INLINE_BYTES))
    .replace("@SMALL@", str(NESTED_MEMBER_BYTES))
)
_PAGER = """
WITH src AS MATERIALIZED ({source})
SELECT src.meta, jsonb_typeof(src.node) AS kind, pg.total, octet_length(pg.part_text) AS part_bytes,
       CASE WHEN octet_length(pg.part_text) <= %s THEN pg.part_text END AS part
FROM src
LEFT JOIN LATERAL (
    SELECT
        CASE jsonb_typeof(src.node)
            WHEN 'array' THEN jsonb_array_length(src.node)::bigint
            WHEN 'object' THEN (SELECT count(*) FROM jsonb_object_keys(src.node))
            WHEN 'string' THEN char_length(src.node #>> '{{}}')::bigint
        END AS total,
        (CASE jsonb_typeof(src.node)
            WHEN 'array' THEN (
                SELECT coalesce(jsonb_agg(@ELEMENT@ ORDER BY i), '[]'::jsonb)
                FROM generate_series(%s::int, least(%s::int + %s::int, jsonb_array_length(src.node)) - 1) AS i
                CROSS JOIN LATERAL (SELECT src.node -> i AS v, %s::text[] || i::text AS p) AS x
            )
            WHEN 'object' THEN (
                SELECT coalesce(
                    jsonb_agg(jsonb_build_object('key', e.key, 'value', @ELEMENT@) ORDER BY e.key COLLATE "C"),
                    '[]'::jsonb
                )
                FROM (
                    SELECT key, value FROM jsonb_each(src.node) ORDER BY key COLLATE "C" OFFSET %s LIMIT %s
                ) AS e
                CROSS JOIN LATERAL (SELECT e.value AS v, %s::text[] || e.key AS p) AS x
            )
            WHEN 'string' THEN to_jsonb(substr(src.node #>> '{{}}', %s::int + 1, %s::int))
            ELSE src.node
        END)::text AS part_text
    WHERE src.node IS NOT NULL
) AS pg ON true
""".replace("@ELEMENT@", _ELEMENT)

_EVIDENCE_SOURCE = f"""
SELECT jsonb_build_object(
           'id', s.id, 'tool', s.tool, 'source', s.source, 'run_id', s.run_id, 'created_at', s.created_at,
           'byte_size', s.byte_size, 'sha256', s.sha256, 'origin', s.data ->> 'origin'
       ) AS meta,
       s.data #> %s::text[] AS node
FROM {EvidenceSnapshot._meta.db_table} s
WHERE s.id = %s AND s.project_id = %s AND s.task_id = %s AND (%s::bigint IS NULL OR s.run_id = %s::bigint)
  AND s.required_permissions <@ %s::varchar(32)[]
"""

_REPORT_SOURCE = f"""
SELECT jsonb_build_object('sections', CASE WHEN jsonb_typeof(r.sections) = 'object' THEN (
           SELECT coalesce(jsonb_agg(k.key ORDER BY k.key COLLATE "C"), '[]'::jsonb)
           FROM (
               SELECT key FROM jsonb_object_keys(r.sections) AS key ORDER BY key COLLATE "C" LIMIT {MAX_SECTIONS}
           ) AS k
       ) ELSE '[]'::jsonb END) AS meta,
       CASE WHEN %s::text IS NULL THEN NULL ELSE (r.sections -> %s::text) #> %s::text[] END AS node
FROM {TaskReport._meta.db_table} r JOIN {Task._meta.db_table} t ON t.id = r.task_id
WHERE r.task_id = %s AND t.project_id = %s AND r.revision = %s
"""

EVIDENCE_PAGE_SQL = _PAGER.format(source=_EVIDENCE_SOURCE)
# A DEMO sample, whole: its JSON text's size, and the text only within the ceiling (same scoping as above).
SAMPLE_DOCUMENT_SQL = f"""
SELECT s.sha256, octet_length(s.data::text) AS doc_bytes,
       CASE WHEN octet_length(s.data::text) <= %s THEN s.data::text END AS body
FROM {EvidenceSnapshot._meta.db_table} s
WHERE s.id = %s AND s.project_id = %s AND s.task_id = %s AND (%s::bigint IS NULL OR s.run_id = %s::bigint)
  AND s.required_permissions <@ %s::varchar(32)[] AND s.source = %s
"""
REPORT_PAGE_SQL = _PAGER.format(source=_REPORT_SOURCE)
PAGE_COLUMNS = ("meta", "kind", "total", "part_bytes", "part")


def _bound_task(scope: QueryScope) -> tuple[int, int]:
    """The bound task and run; a context without them (ordinary chat) reads no task at all."""
    if scope.purpose not in (ContextPurpose.TASK_EXECUTION, ContextPurpose.TASK_READER):
        raise NotFound("This context is not bound to a task.")
    if scope.task_id is None or scope.run_id is None:
        raise NotFound("This context is not bound to a task.")
    return scope.task_id, scope.run_id


def _check_path(data_path: Sequence[str]) -> list[str]:
    path = list(data_path)
    if len(path) > MAX_PATH_DEPTH or not all(isinstance(p, str) for p in path):
        raise LimitExceeded(f"data_path has at most {MAX_PATH_DEPTH} string segments.")
    if any("\x00" in p for p in path):  # PostgreSQL text cannot hold NUL: no key can match it
        raise InvalidParameter("data_path segments cannot contain NUL characters.")
    return path


def _page_params(offset: int, limit: int | None, path: Sequence[str] = ()) -> tuple[int, int, int, list[Any]]:
    if not 0 <= offset <= MAX_OFFSET:
        raise LimitExceeded(f"offset must be between 0 and {MAX_OFFSET}.")
    if limit is not None and not 1 <= limit <= MAX_CHARS:
        raise LimitExceeded(f"limit must be between 1 and {MAX_CHARS}.")
    items = min(limit, MAX_ITEMS) if limit is not None else DEFAULT_ITEMS
    chars = limit if limit is not None else DEFAULT_CHARS
    return items, chars, offset, [offset, offset, items, list(path), offset, items, list(path), offset, chars]


def _json_page(row: dict[str, Any], *, data_path: list[str], offset: int, limit: int | None) -> JsonPage:
    """Turn the pager's row into a ``JsonPage`` (the ceiling was applied in SQL: ``part`` is null when
    the page is over it, and nothing of it left the database)."""
    kind = row["kind"]
    if kind is None:
        raise NotFound("Nothing at that data_path.")
    if row["part"] is None:
        raise LimitExceeded(
            f"This page is {row['part_bytes']} bytes, over the {PAGE_CEILING_BYTES}-byte ceiling; use a smaller limit.",
            details={"page_bytes": row["part_bytes"], "ceiling_bytes": PAGE_CEILING_BYTES},
        )
    items_limit, chars_limit, _, _ = _page_params(offset, limit)
    part = json.loads(row["part"])
    total = row["total"]
    page = {"data_path": data_path, "kind": kind, "total": total, "offset": offset, "page_bytes": row["part_bytes"]}
    if kind in ("array", "object"):
        if limit is not None and limit > MAX_ITEMS:
            raise LimitExceeded(f"limit must be at most {MAX_ITEMS} for an {kind}.")
        return JsonPage(**page, limit=items_limit, has_more=offset + len(part) < total, items=part)
    if kind == "string":
        return JsonPage(**page, limit=chars_limit, has_more=offset + len(part) < total, text=part)
    return JsonPage(
        data_path=data_path,
        kind=kind,
        total=None,
        offset=0,
        limit=1,
        has_more=False,
        page_bytes=row["part_bytes"],
        value=part,
    )


def _sample_page(whole: dict[str, Any], *, data_path: list[str], offset: int, limit: int | None) -> dict[str, Any]:
    """A DEMO sample's page as the pager's row, from the whole document: refused over the 8 MiB ceiling
    (measured in the database) or when the document does not match its stored RFC 8785 SHA-256; then
    ``data_path`` and the page are selected like the SQL pager does."""
    if whole["body"] is None:
        raise LimitExceeded(
            f"This demo sample is {whole['doc_bytes']} bytes, over the {PAGE_CEILING_BYTES}-byte ceiling; "
            "a sample this large must be split by its source.",
            details={"document_bytes": whole["doc_bytes"], "ceiling_bytes": PAGE_CEILING_BYTES},
        )
    document = json.loads(whole["body"])
    if hashlib.sha256(rfc8785.dumps(document)).hexdigest() != whole["sha256"]:
        logger.error("demo sample digest mismatch")
        raise EvidenceIntegrityError()
    node: Any = document
    for segment in data_path:  # as ``#>``: an object key, or an array index written as text
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and segment.lstrip("-").isdigit() and -len(node) <= int(segment) < len(node):
            node = node[int(segment)]
        else:
            node = None
            break
    items, chars, _, _ = _page_params(offset, limit)
    if node is None:
        return {"kind": None, "part": None, "total": None, "part_bytes": None}
    part: Any
    if isinstance(node, list):
        kind, total = "array", len(node)
        part = [_element(v, [*data_path, str(i)]) for i, v in enumerate(node[offset : offset + items], offset)]
    elif isinstance(node, dict):
        keys = sorted(node)[offset : offset + items]  # code-point order = the C collation's byte order
        kind, total = "object", len(node)
        part = [{"key": k, "value": _element(node[k], [*data_path, k])} for k in keys]
    elif isinstance(node, str):
        kind, total, part = "string", len(node), node[offset : offset + chars]
    else:
        kind, total, part = _JSON_KINDS[type(node)], None, node
    text = json.dumps(part, ensure_ascii=False, separators=(", ", ": "))
    size = len(text.encode())
    return {"kind": kind, "total": total, "part_bytes": size, "part": text if size <= PAGE_CEILING_BYTES else None}


_JSON_KINDS = {bool: "boolean", int: "number", float: "number", type(None): "null"}


def _text_bytes(value: Any) -> int:
    """Bytes of ``value`` as jsonb prints it (what the SQL pager measures with ``octet_length``)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")).encode())


def describe(value: Any, path: Sequence[str]) -> dict[str, Any]:
    """A path description of a nested value (seed 001 "嵌套集合返回路径描述"): where it is (``path`` to read,
    ``data_path`` to page it with), its kind and length (elements, members or characters)."""
    text = "$" + "".join(f"[{s}]" if s.isdigit() else f".{s}" for s in path)
    kind = "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "string"
    return {"path": text, "data_path": list(path), "kind": kind, "length": len(value)}


def _element(value: Any, path: list[str]) -> Any:
    """One page element as the SQL pager returns it: an object keeps its scalars (and strings up to
    ``NESTED_MEMBER_BYTES``) and describes its arrays and objects; an array, or a string over
    ``NESTED_INLINE_BYTES``, is described; anything else is returned as it is."""
    if isinstance(value, dict):
        return {
            k: describe(v, [*path, k])
            if isinstance(v, list | dict) or (isinstance(v, str) and _text_bytes(v) > NESTED_MEMBER_BYTES)
            else v
            for k, v in value.items()
        }
    if isinstance(value, list) or (isinstance(value, str) and _text_bytes(value) > NESTED_INLINE_BYTES):
        return describe(value, path)
    return value


class EvidenceIntegrityError(ApplicationError):
    """A stored document no longer matches its digest: no page of it is returned (a server fault)."""

    code = "EVIDENCE_INTEGRITY"
    http_status = 500
    default_message = "The evidence document failed its integrity check; it cannot be read."


def _json(value: Any) -> Any:
    """A jsonb column of a raw statement (Django's psycopg setup hands jsonb over as text)."""
    return json.loads(value) if isinstance(value, str) else value


def _evidence_uuid(evidence_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(evidence_id))
    except ValueError:
        raise NotFound("No such evidence for this task.") from None


@service
def get_task_evidence(
    *, scope: QueryScope, evidence_id: str, data_path: Sequence[str] = (), limit: int | None = None, offset: int = 0
) -> Plan[TaskEvidenceResult]:
    """One page of a saved evidence snapshot of the bound task (one statement): the value at
    ``data_path`` paged per R-PAGE-4, within the 8 MiB ceiling, with the whole document's size and
    RFC 8785 SHA-256. Evidence of another task, run (for a reader) or project, or saved by a tool whose
    permissions the reader no longer holds (``contexts.access.evidence_reach``), is "not found"."""
    _bound_task(scope)
    reach = evidence_reach(scope)
    assert reach is not None  # a bound task context (checked above) always reaches its task's evidence
    task_id = reach.task_id
    path = _check_path(data_path)
    snapshot_id = _evidence_uuid(evidence_id)
    _, _, _, paging = _page_params(offset, limit, path)
    run = reach.run_id
    rows = yield Raw(
        EVIDENCE_PAGE_SQL,
        [path, snapshot_id, reach.project_id, task_id, run, run, reach.permissions, PAGE_CEILING_BYTES, *paging],
        PAGE_COLUMNS,
    )
    if not rows:
        raise NotFound("No such evidence for this task.")
    row = rows[0]
    meta = _json(row["meta"])
    if meta.get("source") == DEMO_SAMPLE_SOURCE:
        whole = yield Raw(
            SAMPLE_DOCUMENT_SQL,
            [PAGE_CEILING_BYTES, snapshot_id, reach.project_id, task_id, run, run, reach.permissions,
             DEMO_SAMPLE_SOURCE],
            ("sha256", "doc_bytes", "body"),
        )  # fmt: skip
        if not whole:
            raise NotFound("No such evidence for this task.")
        row = _sample_page(whole[0], data_path=path, offset=offset, limit=limit)
    page = _json_page(row, data_path=path, offset=offset, limit=limit)
    origin = meta.get("origin") if meta.get("origin") in ORIGINS else "diagnostic"
    data = EvidencePage(
        **page.model_dump(),
        evidence_id=str(meta["id"]),
        evidence_uri=evidence_uri(meta["id"]),
        tool=meta["tool"],
        snapshot_source=meta["source"],
        run_id=meta["run_id"],
        created_at=meta["created_at"],
        byte_size=meta["byte_size"],
        sha256=meta["sha256"],
    )
    return TaskEvidenceResult(
        source="evidence",
        source_ref=f"project:{scope.project_slug}/task/{task_id}/evidence/{meta['id']}",
        queried_at=datetime.now(UTC),
        origin=origin,  # type: ignore[arg-type]  # checked against ORIGINS above
        data=data,
        page=PageInfo(total=page.total, limit=page.limit, offset=page.offset, has_more=page.has_more),
        truncated=page.has_more,
    )


@service
def get_task_context(
    *,
    scope: QueryScope,
    section: str | None = None,
    data_path: Sequence[str] = (),
    limit: int | None = None,
    offset: int = 0,
    report_revision: int | None = None,
) -> Plan[TaskContextResult]:
    """The bound task: title, status, bound and current run, report revisions (newest first, at most
    50) — plus, with ``section``, one page of that section of one report revision at ``data_path``.

    The revision read is ``report_revision`` when given (pinned), otherwise the revision the binding
    pinned (``QueryContext.report_revision``: the one the binder asked for, else the newest when the
    context was bound) — never silently the latest, so a renewed context stays on its session's
    revision. The answer is always labelled a preview."""
    task_id, run_id = _bound_task(scope)
    path = _check_path(data_path)
    if section is not None and "\x00" in section:
        raise InvalidParameter("section cannot contain NUL characters.")
    _, _, _, paging = _page_params(offset, limit, path)
    tasks = yield Task.objects.filter(pk=task_id, project_id=scope.project_id).values("id", "title", "status")[:1]
    if not tasks:
        raise NotFound("This context's task no longer exists.")
    current = yield TaskRun.objects.filter(task_id=task_id, superseded_at__isnull=True).values(
        "id", "sequence", "status", "lease_expires_at"
    )[:1]
    reports = TaskReport.objects.filter(task_id=task_id, task__project_id=scope.project_id)
    revisions = yield reports.order_by("-revision").values("revision", "created_at")[:MAX_REVISIONS]
    revisions_total = yield count_of(reports)
    if report_revision is not None:
        revision: int | None = report_revision
        revision_source = "pinned"
    else:
        # The binding's pinned revision (issue 23 item 8); a context bound before revisions were pinned
        # reads the newest revision that existed when it was bound, as it always did.
        at_bind = reports.filter(created_at__lte=OuterRef("created_at")).order_by("-revision").values("revision")[:1]
        bound = (
            (
                yield QueryContext.objects.filter(pk=scope.context_id)
                .annotate(at_bind=Subquery(at_bind))
                .values("report_revision", "at_bind")[:1]
            )
            if scope.context_id is not None
            else []  # no binding row to read (as the lookup of a null primary key finds none)
        )
        pinned = bound[0]["report_revision"] if bound else None
        revision = pinned if pinned is not None else (bound[0]["at_bind"] if bound else None)
        revision_source = "bound_to_context" if revision is not None else "none"
    sections: list[str] = []
    page: JsonPage | None = None
    if revision is not None:
        rows = yield Raw(
            REPORT_PAGE_SQL,
            [section, section, path, task_id, scope.project_id, revision, PAGE_CEILING_BYTES, *paging],
            PAGE_COLUMNS,
        )
        if not rows:
            raise NotFound("No such report revision of this task.")
        sections = list(_json(rows[0]["meta"])["sections"])
        if section is not None:
            page = _json_page(rows[0], data_path=path, offset=offset, limit=limit)
    elif section is not None:
        raise NotFound("No report revision is bound to this context; pass report_revision to pin one.")
    task = tasks[0]
    run = current[0] if current else None
    label = (
        f"Preview: one page of section '{section}' of report revision {revision}; not the full report."
        if page is not None
        else "Summary of the task and its report revisions; not the full report."
    )
    data = TaskContextData(
        task_id=task["id"],
        title=task["title"],
        status=task["status"],
        bound_run_id=run_id,
        current_run=RunSummary(
            run_id=run["id"], sequence=run["sequence"], status=run["status"], lease_expires_at=run["lease_expires_at"]
        )
        if run
        else None,
        report_revisions=[RevisionSummary(**r) for r in revisions],
        report_revisions_total=revisions_total,
        report_revision=revision,
        revision_source=revision_source,  # type: ignore[arg-type]  # one of the three literals above
        sections=sections,
        section=section,
        page=page,
        note=label,
    )
    return TaskContextResult(
        source="task_context",
        source_ref=f"project:{scope.project_slug}/task/{task_id}"
        + (f"/report/{revision}" if revision is not None else ""),
        queried_at=datetime.now(UTC),
        origin="diagnostic",
        data=data,
        page=PageInfo(total=page.total, limit=page.limit, offset=page.offset, has_more=page.has_more) if page else None,
        truncated=True,
    )
