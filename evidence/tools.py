"""Declarations of the task tools (a registry family, registered by ``evidence.apps`` into ``tjwater.registry.TOOLS``).

Both are ``task_scope="bound_task"``: ``contexts.services.allowed_tools_for`` never gives them to an
``ordinary_chat`` binding, and gives them to a ``task_reader`` although they require no data permission
(they read only the bound task itself, R-CTX-4). They read what the investigation already has, so they
save no evidence of their own (``evidence_allowed=False``: read-only, and no request key needed).
"""

from __future__ import annotations

from evidence import task_tools
from evidence.schemas import TaskContextResult, TaskEvidenceResult
from queries.registry import ToolSpec, input_object

DATA_PATH = {
    "type": "array",
    "items": {"type": "string", "maxLength": 200},
    "maxItems": task_tools.MAX_PATH_DEPTH,
    "default": [],
    "description": "Path of the value to page, one segment per level: object keys, or array indexes as decimal "
    'strings (["data", "items", "3"]). Empty: the whole document.',
}
PAGING = {
    "limit": {
        "type": "integer",
        "minimum": 1,
        "maximum": task_tools.MAX_CHARS,
        "description": f"Array elements or object members per page (default {task_tools.DEFAULT_ITEMS}, at most "
        f"{task_tools.MAX_ITEMS}); characters for a string (default {task_tools.DEFAULT_CHARS}).",
    },
    "offset": {"type": "integer", "minimum": 0, "maximum": task_tools.MAX_OFFSET, "default": 0},
}


def _evidence_summary(result: TaskEvidenceResult) -> str:
    page = result.data
    where = "/".join(page.data_path) or "(document)"
    if page.kind in ("array", "object"):
        return (
            f"Evidence {page.evidence_id} at {where}: {len(page.items or [])} of {page.total} "
            f"{'elements' if page.kind == 'array' else 'members'} from {page.offset}"
            + ("; more available." if page.has_more else ".")
        )
    if page.kind == "string":
        return (
            f"Evidence {page.evidence_id} at {where}: characters {page.offset}-{page.offset + len(page.text or '')} "
            f"of {page.total}" + ("; more available." if page.has_more else ".")
        )
    return f"Evidence {page.evidence_id} at {where}: a {page.kind}."


def _context_summary(result: TaskContextResult) -> str:
    data = result.data
    revision = (
        f"report revision {data.report_revision} ({data.revision_source})" if data.report_revision else "no report"
    )
    return f"Task {data.task_id} '{data.title}' ({data.status}), {revision}. {data.note}"


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_task_context",
        title="Task context",
        description="The investigation task bound to this context: title, status, current run and report "
        "revisions, plus one page of a report section at data_path. Reads the report revision bound to the "
        "context unless report_revision pins another. Always a preview, never the full report.",
        input_schema=input_object(
            {
                "section": {"type": "string", "minLength": 1, "maxLength": 100, "description": "A report section."},
                "data_path": DATA_PATH,
                **PAGING,
                "report_revision": {"type": "integer", "minimum": 1, "description": "Pin this report revision."},
            },
            [],
        ),
        output_model=TaskContextResult,
        permissions=(),
        source="task_context",
        semantics="diagnostic",
        evidence_allowed=False,
        task_scope="bound_task",
        invoke=lambda scope, a: task_tools.get_task_context.plan(
            scope=scope,
            section=a.get("section"),
            data_path=a.get("data_path", []),
            limit=a.get("limit"),
            offset=a.get("offset", 0),
            report_revision=a.get("report_revision"),
        ),
        page_holder=("data", "page"),  # one page of a report section: cut inline like any page
        summarize=_context_summary,
        not_on_rest="task-scoped: reads the task bound to an MCP context",
        examples=({},),
    ),
    ToolSpec(
        name="get_task_evidence",
        title="Task evidence",
        description="One page of a saved evidence snapshot of the bound task (the evidence_id a task call "
        "returned): the value at data_path, arrays by index, objects by key, strings by character, with the "
        "whole document's size and RFC 8785 SHA-256. A reader sees only its parent run's evidence.",
        input_schema=input_object(
            {
                "evidence_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "An evidence id."},
                "data_path": DATA_PATH,
                **PAGING,
            },
            ["evidence_id"],
        ),
        output_model=TaskEvidenceResult,
        permissions=(),
        source="evidence",
        semantics="diagnostic",
        evidence_allowed=False,
        task_scope="bound_task",
        invoke=lambda scope, a: task_tools.get_task_evidence.plan(
            scope=scope,
            evidence_id=a["evidence_id"],
            data_path=a.get("data_path", []),
            limit=a.get("limit"),
            offset=a.get("offset", 0),
        ),
        summarize=_evidence_summary,
        not_on_rest="task-scoped: reads evidence of the task bound to an MCP context",
        examples=({"evidence_id": "ev-unknown"},),
    ),
]
