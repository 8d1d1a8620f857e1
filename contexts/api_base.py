"""The REST edge's base view, shared by the context API (``contexts.api``) and the data API
(``queries.api``): one JSON error mapping for the whole edge (STYLE "errors": one place per edge).

Every error is JSON ``{"code", "message", "retryable"[, "details"]}`` with a stable code. Django's request
logger would write the request path of a 4xx response — which may contain a handle — so these views mark
their responses as already logged and log a sanitized line of their own instead.

Failures of the service itself are JSON too, never Django's HTML page and never exception text:
PostgreSQL unreachable (connection refused, a pool checkout that times out — ``TJWATER_DB_POOL_TIMEOUT_S``,
a dropped connection) → 503 ``DATA_SOURCE_UNAVAILABLE`` (retryable, ``Retry-After``); anything else
unexpected → 500 ``INTERNAL_ERROR`` (not retryable), its traceback written to the server log only.

A hostile or careless body is the caller's mistake, never a 500 (issue 41): over the size limit → 413
``PAYLOAD_TOO_LARGE`` (``tjwater.bounds`` refuses it before any view; Django's ``RequestDataTooBig`` is
mapped the same should it get through), not JSON, nested too deep, a non-finite number or NUL text → 400
``INVALID_JSON`` naming why, a Content-Type other than JSON → 415 ``UNSUPPORTED_MEDIA_TYPE``, Django's
other ``SuspiciousOperation`` refusals → 400 ``INVALID_REQUEST``.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from drf_spectacular.utils import inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contexts.authentication import (
    AuthenticationUnavailable,
    InsufficientScope,
    InvalidTokenFailed,
    TokenUser,
    bearer_challenge,
)
from contexts.errors import ApplicationError, DataSourceUnavailable
from contexts.tokens import VerifiedToken
from tjwater.bounds import InvalidJsonBody, too_large_message

# The log lines keep the logger name they had before the base moved here (``contexts.api``).
logger = logging.getLogger("contexts.api")

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


class BaseApiView(APIView):
    """A view of the REST edge: errors mapped to the JSON body (``_error_response``), no request-path
    logging, and the verified bearer token. Subclasses choose the authentication."""

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
        # tjwater.bounds' parser says why (depth, number, text, position) and never echoes the body.
        message = str(exc.detail) if isinstance(exc, InvalidJsonBody) else "The request body is not valid JSON."
        return Response(_body("INVALID_JSON", message), status=exc.status_code)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        # DRF's own sentence repeats the client's Content-Type header: a fixed one instead.
        return Response(
            _body("UNSUPPORTED_MEDIA_TYPE", "The request body must be JSON (Content-Type: application/json)."),
            status=exc.status_code,
        )
    if isinstance(exc, RequestDataTooBig):  # Django's own body limit (DATA_UPLOAD_MAX_MEMORY_SIZE)
        limit = settings.TJWATER_REQUEST_MAX_BYTES
        return Response(_body("PAYLOAD_TOO_LARGE", too_large_message(limit)), status=413)
    if isinstance(exc, SuspiciousOperation):  # e.g. TooManyFieldsSent: a malformed request, the caller's
        return Response(
            _body("INVALID_REQUEST", "The request was refused as malformed (too many fields or a bad header)."),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, exceptions.APIException):
        code = str(exc.default_code).upper()
        return Response(_body(code, str(exc.detail)), status=exc.status_code)
    return None
