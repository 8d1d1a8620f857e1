"""REST API of context handles (SPEC R-CTX-1, R-CTX-5): one APIView per operation, thin.

- ``POST /api/v1/mcp-query-contexts`` → 201 ``{context_handle, expires_at, purpose, project, tools,
  report_revision}`` (bearer with ``mcp.context.bind``). The handle appears in this response and nowhere
  else. A task binding pins ``report_revision`` (the one asked for, else the task's newest).
- ``DELETE /api/v1/mcp-query-contexts/{context_handle}`` → 204 for the binding's owner; anyone else the
  same 404 as an unknown handle.

Every error is JSON ``{"code", "message", "retryable"[, "details"]}`` with a stable code, mapped in one
place for the whole REST edge (``contexts.api_base.BaseApiView``); the path of a DELETE, which contains
the handle, is never logged.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from contexts import entry, grants, services
from contexts.api_base import ERROR_BODY, BaseApiView
from contexts.authentication import (
    BearerTokenAuthentication,
    HasBindScope,
)
from contexts.bind_rate import take_bind_token
from contexts.models import ContextPurpose


class ContextApiView(BaseApiView):
    """A context API view: the MCP audience's bearer token (scope ``mcp.context.bind`` where required)."""

    authentication_classes = [BearerTokenAuthentication]


class ContextCreateApi(ContextApiView):
    """``POST /api/v1/mcp-query-contexts``: bind a context for the token's principal and client."""

    permission_classes = [HasBindScope]

    class InputSerializer(serializers.Serializer[Any]):
        project = serializers.CharField(max_length=64, required=False, allow_null=True, allow_blank=True)
        session_id = serializers.CharField(max_length=255)
        purpose = serializers.ChoiceField(choices=ContextPurpose.choices)
        task_id = serializers.IntegerField(required=False, min_value=1)
        run_id = serializers.IntegerField(required=False, min_value=1)
        execution_request_id = serializers.CharField(max_length=128, required=False)
        parent_session_id = serializers.CharField(max_length=255, required=False)
        # Task purposes only: the report revision get_task_context reads by default (issue 23 item 8).
        report_revision = serializers.IntegerField(required=False, min_value=1, max_value=2_147_483_647)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            unknown = sorted(set(self.initial_data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({field: ["Unknown field."] for field in unknown})
            return attrs

    class OutputSerializer(serializers.Serializer[Any]):
        context_handle = serializers.CharField(source="handle")
        expires_at = serializers.DateTimeField()
        purpose = serializers.CharField()
        project = serializers.CharField()
        tools = serializers.ListField(child=serializers.CharField())
        report_revision = serializers.IntegerField(allow_null=True)

    @extend_schema(
        operation_id="context_create",
        tags=["contexts"],
        request=InputSerializer,
        responses={
            201: OutputSerializer,
            **{code: OpenApiResponse(ERROR_BODY) for code in (400, 401, 403, 404, 409, 429, 503)},
        },
    )
    # The entry gate and the binding commit together: an operator turning the MCP entry off waits for the
    # bindings already past the gate, then revokes them with every other live context (issue 23 item 16).
    @method_decorator(transaction.atomic)
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        token = self.verified_token(request)
        take_bind_token(issuer=token.issuer, subject=token.subject)
        entry.check_binding_allowed()
        catalog, task_scoped = grants.tool_catalog()
        created = services.context_create(
            token=token,
            project_slug=data.get("project"),
            session_id=data["session_id"],
            purpose=data["purpose"],
            catalog=catalog,
            task_scoped=task_scoped,
            task_id=data.get("task_id"),
            run_id=data.get("run_id"),
            execution_request_id=data.get("execution_request_id"),
            parent_session_id=data.get("parent_session_id"),
            report_revision=data.get("report_revision"),
        )
        response = Response(self.OutputSerializer(created).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the body carries the only copy of the handle
        return response


class ContextDeleteApi(ContextApiView):
    """``DELETE /api/v1/mcp-query-contexts/{context_handle}``: the owner revokes its context. Any
    verified token of the owner (same issuer, subject and client) may do it — revoking must not need
    more than the caller already had; everyone else gets 404."""

    @extend_schema(
        operation_id="context_delete",
        tags=["contexts"],
        responses={204: None, **{code: OpenApiResponse(ERROR_BODY) for code in (401, 404, 503)}},
    )
    def delete(self, request: Request, handle: str) -> Response:
        services.context_revoke_owned(handle=handle, token=self.verified_token(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
