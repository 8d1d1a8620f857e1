"""The analysis tools (issue 42 item 6): one ``run_*`` tool per analysis kind and ``cancel_analysis_run``,
registered into the project's tool registry as one family served only with ``TJWATER_MCP_ANALYSIS_TOOLS``
on (off by default, seed 000). They are action tools (``effect`` submit/cancel): each edge runs ``act`` off
the event loop in a write transaction; they need ``simulation.run`` and the ``mcp.analysis.run`` scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from analyses.kinds import KIND_NAMES, REST_PATHS, TOOL_NAMES, kinds
from analyses.schemas import RunAccepted, RunAcceptedResult, RunCancelled, RunCancelledResult
from analyses.submit import Submitter, cancel, submit
from contexts.models import Permission, Project
from contexts.scope import QueryScope
from queries.registry import Follow, ToolSpec, input_object
from tjwater.registry import TOOLS

SETTING = "TJWATER_MCP_ANALYSIS_TOOLS"
SOURCE = "analysis_runs"
RUN = Permission.SIMULATION_RUN.value
RUN_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^[A-Za-z0-9_.:-]+$",
    "description": "The run id a run_* tool returned.",
}


def submitter(scope: QueryScope) -> Submitter:
    """The grant fixed at acceptance: who, what they held, and the investigation it came through."""
    return Submitter(
        actor=f"{scope.subject} ({scope.issuer}) via {scope.client_id}",
        principal_id=scope.principal_id,
        permissions=scope.permissions,
        purpose=scope.purpose,
        context_id=scope.context_id,
        task_id=scope.task_id,
        task_run_id=scope.run_id,
        execution_request_id=scope.execution_request_id,
    )


def _envelope(scope: QueryScope, ref: str) -> dict[str, Any]:
    return {
        "source": SOURCE,
        "source_ref": f"project:{scope.project_slug}/{ref}",
        "queried_at": datetime.now(UTC),
        "origin": "analysis_run",
    }


def _submit_act(kind: str) -> Any:
    def act(scope: QueryScope, args: Mapping[str, Any]) -> RunAcceptedResult:
        project = Project.objects.get(pk=scope.project_id)
        params = {k: v for k, v in args.items() if k != "context_handle"}
        done = submit(project=project, kind=kind, params=params, who=submitter(scope))
        return RunAcceptedResult(
            data=RunAccepted.model_validate(done.answer()), **_envelope(scope, f"analysis-runs/{done.run.run_id}")
        )

    return act


def cancel_act(scope: QueryScope, args: Mapping[str, Any]) -> RunCancelledResult:
    project = Project.objects.get(pk=scope.project_id)
    run = cancel(project=project, run_id=str(args["run_id"]), who=submitter(scope))
    data = RunCancelled(run_id=run.run_id, status=run.status, status_message=run.status_message)  # type: ignore[arg-type]
    return RunCancelledResult(data=data, **_envelope(scope, f"analysis-runs/{run.run_id}"))


def _accepted_summary(result: RunAcceptedResult) -> str:
    d = result.data
    assert isinstance(d, RunAccepted)  # the act answers an acceptance; only a task's result is a finished run
    again = "" if d.created else " (the same question was asked before: this is that run)"
    return (
        f"Run {d.run_id} ({d.kind}) is {d.status}{again}, estimated at {d.estimate.cpu_seconds:.2f} CPU s; "
        f"follow it with get_analysis_run every {d.poll_after_ms} ms."
    )


def _cancel_summary(result: RunCancelledResult) -> str:
    return f"Run {result.data.run_id}: {result.data.status}. {result.data.status_message}"


def _both_units(si: Any, us: Any) -> Any:
    """``si`` with each ``x-unit`` (at any depth: a list's items, an object's properties) turned into a
    description naming the SI and the US unit, ``us`` being the same schema in US units."""
    if isinstance(si, list):
        return [_both_units(a, b) for a, b in zip(si, us, strict=True)]
    if not isinstance(si, dict):
        return si
    out = {key: _both_units(value, us[key]) for key, value in si.items() if key != "x-unit"}
    if "x-unit" in si:
        said = str(si.get("description", "")).removesuffix(f" In {si['x-unit']}.")
        out["description"] = (
            f"{said} In the project's units: {si['x-unit']} in an SI project, "
            f"{us['x-unit']} in a US one (get_project says which)."
        ).strip()
    return out


def _tool_schema(kind: str) -> dict[str, Any]:
    """The kind's input schema as a tool's: the context handle added, the units named for both systems."""
    si, us = kinds()[kind].input_schema("SI"), kinds()[kind].input_schema("US")
    schema = input_object(_both_units(si, us)["properties"], list(si.get("required", [])))
    for key in ("oneOf", "anyOf", "allOf", "dependentRequired", "not"):
        if key in si:
            schema[key] = si[key]
    return schema


def analysis_tools() -> list[ToolSpec]:
    specs = []
    for kind in KIND_NAMES:
        spec = kinds()[kind]
        specs.append(
            ToolSpec(
                name=TOOL_NAMES[kind],
                title=f"Run a {spec.title.lower()}",
                description=(
                    f"Start a {spec.title.lower()} on the project's current model version, as a background "
                    "run (needs simulation.run and the mcp.analysis.run scope; analyses must be on for the "
                    "project). Returns at once with run_id, status, the cost estimate and poll_after_ms; "
                    "follow it with get_analysis_run and read its results with list_analysis_results "
                    "and query_analysis_series. Inputs are in the project's unit system; times are "
                    "ISO 8601 with an offset; durations in minutes."
                ),
                input_schema=_tool_schema(kind),
                output_model=RunAcceptedResult,
                permissions=(RUN,),
                source=SOURCE,
                semantics="analysis_run",
                invoke=None,
                act=_submit_act(kind),
                effect="submit",
                # The MCP Tasks face follows the run with the tools agents use (R-RUN-5).
                follow=Follow(read="get_analysis_run", cancel="cancel_analysis_run"),
                evidence_allowed=False,
                summarize=_accepted_summary,
                rest=REST_PATHS[kind],
                examples=(spec.example,),
            )
        )
    specs.append(
        ToolSpec(
            name="cancel_analysis_run",
            title="Cancel an analysis run",
            description="Cancel one of your queued or running analysis runs: a queued run never starts, a running "
            "one stops within seconds; it writes no results and no series. Needs simulation.run and the "
            "mcp.analysis.run scope.",
            input_schema=input_object({"run_id": RUN_ID}, ["run_id"]),
            output_model=RunCancelledResult,
            permissions=(RUN,),
            source=SOURCE,
            semantics="analysis_run",
            invoke=None,
            act=cancel_act,
            effect="cancel",
            evidence_allowed=False,
            summarize=_cancel_summary,
            rest="analysis/runs/<str:run_id>/cancel",
            examples=({"run_id": "burst-20261101-0800"},),
        )
    )
    return specs


def register() -> None:
    TOOLS.register(app="analyses", family="analysis_runs", tools=analysis_tools(), setting=SETTING)
