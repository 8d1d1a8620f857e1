"""REST API of context handles (SPEC R-CTX-1, R-CTX-5): one APIView per operation, thin.

- ``POST /api/v1/mcp-query-contexts`` → 201 ``{context_handle, expires_at, purpose, project, tools,
  report_revision}`` (bearer with ``mcp.context.bind``). The handle appears in this response and nowhere
  else. A task binding pins ``report_revision`` (the one asked for, else the task's newest).
- ``DELETE /api/v1/mcp-query-contexts/{context_handle}`` → 204 for the binding's owner; anyone else the
  same 404 as an unknown handle.

Every error is JSON ``{"code", "message", "retryable"[, "details"]}`` with a stable code, mapped here in
one place. Django's request logger would write the request path of a 4xx response — which for DELETE
contains the handle — so these views mark their responses as already logged and log a sanitized line
of their own instead.

Failures of the service itself are JSON too, never Django's HTML page and never exception text:
PostgreSQL unreachable (connection refused, a pool checkout that times out — ``TJWATER_DB_POOL_TIMEOUT_S``,
a dropped connection) → 503 ``DATA_SOURCE_UNAVAILABLE`` (retryable, ``Retry-After``); anything else
unexpected → 500 ``INTERNAL_ERROR`` (not retryable), its traceback written to the server log only.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.db import InterfaceError, OperationalError, transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contexts import entry, services
from contexts.authentication import (
    AuthenticationUnavailable,
    BearerTokenAuthentication,
    HasBindScope,
    InsufficientScope,
    InvalidTokenFailed,
    TokenUser,
    bearer_challenge,
)
from contexts.bind_rate import take_bind_token
from contexts.errors import ApplicationError, DataSourceUnavailable
from contexts.models import ContextPurpose
from contexts.tokens import VerifiedToken

logger = logging.getLogger(__name__)

AUTH_RETRY_AFTER_S = 5
RETRY_AFTER_S = 5  # on every retryable application error (DATA_SOURCE_UNAVAILABLE, RATE_LIMITED, …)
# What an unreachable database raises: Django's wrappers, and psycopg's own classes should one escape
# unwrapped (psycopg_pool.PoolTimeout, a checkout that timed out, is a psycopg.OperationalError).
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


# The error body of every failure, for the OpenAPI document.
ERROR_BODY = inline_serializer(
    "ApiError",
    {
        "code": serializers.CharField(),
        "message": serializers.CharField(),
        "retryable": serializers.BooleanField(),
        "details": serializers.DictField(required=False),
    },
)


class ContextApiView(APIView):
    """Shared error mapping of the context API (STYLE "errors": one place per edge)."""

    authentication_classes = [BearerTokenAuthentication]

    def handle_exception(self, exc: Exception) -> Response:
        response = _error_response(exc)
        if response is None:
            # Unexpected: the traceback to the server log (the path is never part of the message),
            # a fixed JSON body to the client.
            logger.error(
                "context api internal error method=%s exception=%s",
                self.request.method if self.request is not None else "?",
                type(exc).__name__,
                exc_info=exc,
            )
            response = Response(
                _body("INTERNAL_ERROR", "The server failed to complete the request."),
                status=status.HTTP_500_INTERNAL_SERVER_ERROR,
            )
        logger.info(
            "context api refused method=%s status=%s code=%s",
            self.request.method if self.request is not None else "?",
            response.status_code,
            response.data.get("code") if isinstance(response.data, dict) else None,
        )
        return response

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        # django.utils.log.log_response skips responses flagged like this; the path may hold a handle.
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's private flag, see above
        return response

    def verified_token(self, request: Request) -> VerifiedToken:
        user = request.user
        if not isinstance(user, TokenUser):
            raise exceptions.NotAuthenticated()
        return user.token


def _body(code: str, message: str, *, retryable: bool = False, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if details:
        body["details"] = details
    return body


def _error_response(exc: Exception) -> Response | None:
    """Map an exception to the API's JSON error; ``None`` for anything unexpected (the caller answers
    500 ``INTERNAL_ERROR`` and logs the traceback)."""
    if isinstance(exc, DATABASE_UNAVAILABLE):
        logger.warning("context api: database unavailable (%s)", type(exc).__name__)
        exc = DataSourceUnavailable()
    if isinstance(exc, ApplicationError):
        response = Response(exc.as_dict(), status=exc.http_status)
        if exc.retryable:
            response["Retry-After"] = str(exc.retry_after_s or RETRY_AFTER_S)
        return response
    if isinstance(exc, InvalidTokenFailed):
        response = Response(_body("INVALID_TOKEN", str(exc.detail)), status=status.HTTP_401_UNAUTHORIZED)
        response["WWW-Authenticate"] = bearer_challenge("invalid_token")
        return response
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response = Response(_body("AUTHENTICATION_REQUIRED", str(exc.detail)), status=status.HTTP_401_UNAUTHORIZED)
        response["WWW-Authenticate"] = bearer_challenge()
        return response
    if isinstance(exc, InsufficientScope):
        response = Response(
            _body("INSUFFICIENT_SCOPE", str(exc.detail), details={"required_scope": exc.scope}),
            status=status.HTTP_403_FORBIDDEN,
        )
        response["WWW-Authenticate"] = bearer_challenge("insufficient_scope", scope=exc.scope)
        return response
    if isinstance(exc, AuthenticationUnavailable):
        response = Response(
            _body("AUTH_UNAVAILABLE", str(exc.detail), retryable=True), status=status.HTTP_503_SERVICE_UNAVAILABLE
        )
        response["Retry-After"] = str(AUTH_RETRY_AFTER_S)
        return response
    if isinstance(exc, exceptions.ValidationError):
        return Response(
            _body("INVALID_PARAMETER", "The request body is not valid.", details=exc.detail),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, exceptions.ParseError):
        return Response(_body("INVALID_JSON", "The request body is not valid JSON."), status=exc.status_code)
    if isinstance(exc, exceptions.APIException):
        code = str(exc.default_code).upper()
        return Response(_body(code, str(exc.detail)), status=exc.status_code)
    return None


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
        catalog, task_scoped = services.tool_catalog()
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
