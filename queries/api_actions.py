"""The REST face of the action tools (``ToolSpec.effect`` submit or cancel): ``POST`` under
``/api/v1/projects/{project}/…`` at each action tool's ``rest`` path (seed 001's: ``burst-analyses``, …,
``analysis/runs/{run_id}/cancel``).

Found through the tool registry like every REST route, whatever ``TJWATER_MCP_ANALYSIS_TOOLS`` says (that
setting decides the MCP catalog; REST has its own gates): an API token with ``api.analysis.run``, the live
membership's permissions (``contexts.access``, as for MCP), the tool's input schema for the JSON body (minus
``context_handle``), the ``Idempotency-Key`` header as the run's ``request_key``. A submit answers
``202 Accepted`` with ``Location: …/analysis/runs/{run_id}`` and the body of the MCP job answer's
``structuredContent``; a cancel answers 200 with the run's state.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from django.db import transaction
from django.urls import URLPattern, path
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter
from jsonschema import Draft202012Validator
from referencing import Registry
from rest_framework.request import Request
from rest_framework.response import Response

from contexts import access
from contexts.api_base import BaseApiView
from contexts.authentication import HasAnalysisRunScope
from contexts.errors import InvalidParameter
from contexts.rest import ApiBearerAuthentication, member_scope
from contexts.tokens import VerifiedToken
from queries.arguments import bad_text_path
from queries.registry import ToolSpec
from tjwater.registry import TOOLS

logger = logging.getLogger("tjwater.api")
IDEMPOTENCY_HEADER = "Idempotency-Key"


def action_specs() -> dict[str, ToolSpec]:
    return {spec.name: cast(ToolSpec, spec) for spec in TOOLS.declared_actions()}


def body_schema(spec: ToolSpec) -> dict[str, Any]:
    schema = dict(spec.input_schema)
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "context_handle"}
    schema["required"] = [name for name in schema.get("required", []) if name != "context_handle"]
    return schema


def parse_body(spec: ToolSpec, body: Any, path_args: dict[str, str]) -> dict[str, Any]:
    """The JSON body (and the path's values) → the tool's arguments, validated against its schema; a
    refusal names where and the rule, never echoes the value."""
    if body is None or body == {} and not spec.input_schema.get("required"):
        body = {}
    if not isinstance(body, dict):
        raise InvalidParameter("The request body is a JSON object of the analysis's inputs.")
    args = {**body, **path_args}
    bad = bad_text_path(args)
    if bad is not None:
        raise InvalidParameter(f"Invalid body: {bad or '(body)'}: not valid text.")
    validator = Draft202012Validator(body_schema(spec), registry=Registry())
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path) or "(body)"
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            extra = sorted(k for k in error.instance if k not in body_schema(spec)["properties"])
            raise InvalidParameter(f"Invalid body: {', '.join(extra)[:200]}: not an input of this tool.",
                                   details={"field": extra[0] if extra else where})  # fmt: skip
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [str(r) for r in error.validator_value if r not in error.instance]
            raise InvalidParameter(f"Invalid body: {missing[0]} is required.", details={"field": missing[0]})
        raise InvalidParameter(f"Invalid body: {where}: fails '{error.validator}'.", details={"field": where})
    return args


class ActionSchema(AutoSchema):
    """OpenAPI of an action route: the JSON body is the tool's input schema; 202 (or 200) its result."""

    @property
    def _action(self) -> ActionView:
        return cast(ActionView, self.view)

    def _spec(self) -> ToolSpec:
        return action_specs()[self._action.tool]

    def get_operation_id(self) -> str:
        return self._action.tool

    def get_description(self) -> str:  # type: ignore[override]
        return self._spec().description

    def get_tags(self) -> list[str]:
        return ["analysis"]

    def get_override_parameters(self) -> list[Any]:
        params: list[Any] = [OpenApiParameter("project", str, OpenApiParameter.PATH, description="The project's slug.")]
        params += [OpenApiParameter(name, str, OpenApiParameter.PATH) for name in self._action.path_names]
        if self._spec().effect == "submit":
            params.append(
                OpenApiParameter(
                    IDEMPOTENCY_HEADER,
                    str,
                    OpenApiParameter.HEADER,
                    required=False,
                    description="Makes the submission exact: the same key returns the same run.",
                )
            )
        return params

    def get_request_serializer(self) -> Any:
        """A submit's JSON body, by media type (drf-spectacular reads a dict as media type → schema)."""
        if self._spec().effect != "submit":
            return None
        schema = {k: v for k, v in body_schema(self._spec()).items() if k != "$schema"}  # the document's dialect
        return {"application/json": schema}

    def _get_request_for_media_type(self, serializer: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(serializer, dict):
            return serializer, True
        return super()._get_request_for_media_type(serializer, *args, **kwargs)  # type: ignore[no-untyped-call]

    def get_response_serializers(self) -> dict[str, Any]:  # type: ignore[override]
        body = {"$ref": f"#/components/schemas/{self._spec().output_model.__name__}"}
        error = {"$ref": "#/components/schemas/ToolError"}
        ok = "202" if self._spec().effect == "submit" else "200"
        return {ok: body, **{code: error for code in ("400", "401", "403", "404", "409", "422", "429")}}

    def _get_response_for_code(self, serializer: Any, status_code: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(serializer, dict):
            description = "The run." if status_code in ("200", "202") else "An application error."
            return {"description": description, "content": {"application/json": {"schema": serializer}}}
        response: dict[str, Any] = super()._get_response_for_code(  # type: ignore[no-untyped-call]
            serializer, status_code, *args, **kwargs
        )
        return response


class ActionView(BaseApiView):
    """One action tool over REST (POST): authenticate → scope → gate → body → the tool's ``act``."""

    authentication_classes = [ApiBearerAuthentication]
    permission_classes = [HasAnalysisRunScope]
    schema = ActionSchema()
    tool: str = ""
    path_names: tuple[str, ...] = ()

    def post(self, request: Request, project: str, **path_args: str) -> Response:
        spec = action_specs()[self.tool]
        token = cast(VerifiedToken, request.auth)
        scope = member_scope(token=token, project_slug=project)
        access.require_call(scope, tool=spec.name, permissions=spec.permissions, bound=False)
        args = parse_body(spec, request.data, path_args)
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        if key:
            if len(key) > 100 or not key.isprintable():
                raise InvalidParameter(
                    f"{IDEMPOTENCY_HEADER}: 1 to 100 printable characters.", details={"field": IDEMPOTENCY_HEADER}
                )
            args.setdefault("request_key", key)
        assert spec.act is not None
        with transaction.atomic():
            result = spec.act(scope, args)
        body = result.model_dump(mode="json")
        logger.info("api action principal=%s project=%s tool=%s", scope.principal_id, scope.project_slug, spec.name)
        if spec.effect == "submit":
            run_id = body["data"]["run_id"]
            response = Response(body, status=202)
            response["Location"] = f"/api/v1/projects/{project}/analysis/runs/{run_id}"
        else:
            response = Response(body)
        response["Cache-Control"] = "private, no-store"
        return response


def action_urlpatterns() -> list[URLPattern]:
    patterns = []
    for spec in action_specs().values():
        assert spec.rest is not None, f"{spec.name}: an action tool has a REST path"
        names = tuple(part[1:-1].split(":")[-1] for part in spec.rest.split("/") if part.startswith("<"))
        view = cast(
            type[ActionView], type(f"{spec.name}_view", (ActionView,), {"tool": spec.name, "path_names": names})
        )
        patterns.append(path(spec.rest, view.as_view(), name=f"api-{spec.name}"))
    return patterns
