"""Bounds on what a request brings to the Django side (issue 41 item 2): body size and JSON depth.

``/mcp`` has its own (``mcp_app.transport``: 413 over ``TJWATER_MCP_MAX_BODY_BYTES``, 400 on a body it cannot
parse) and never reaches this module. Everything else — the REST API, the admin, health and metrics — is
held to ``TJWATER_REQUEST_MAX_BYTES`` in two places, because Django's ASGI handler reads the whole body
(to a spooled file) before any middleware runs:

- ``BoundedBody`` wraps the Django ASGI application: a declared ``Content-Length`` over the limit is not
  read at all, and an undeclared (chunked) body is read only up to the limit. Either way Django is handed
  an empty body and the request is marked (``scope[TOO_LARGE]``);
- ``RequestBodyLimitMiddleware`` (first after the metrics middleware, so the refusal is counted) answers a
  marked request, or one whose declared length is over the limit (the test client, WSGI), with 413
  ``PAYLOAD_TOO_LARGE`` in the REST error shape — before any view, parser or form reads the body.

JSON is parsed by ``loads``: the nesting depth is checked first by an iterative scan of the text (no
recursion, linear in the length), so ``json.loads`` never recurses deeper than ``TJWATER_JSON_MAX_DEPTH``;
non-finite numbers (``1e999999``, ``NaN``) and integers Python refuses to convert are invalid JSON; text a
PostgreSQL column cannot hold (NUL, lone surrogates) is refused by its JSON pointer. ``BoundedJSONParser``
is DRF's only parser (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``); ``queries.api`` parses JSON query
parameters with ``loads`` too.

This module imports no app (like ``tjwater.metrics``): every layer may use it.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import IO, Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

logger = logging.getLogger(__name__)

#: The ASGI scope key ``BoundedBody`` sets on a request whose body it did not read whole.
TOO_LARGE = "tjwater.body_too_large"

# A JSON string (escapes included) — linear, no backtracking: each character is taken by one branch only.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
# An escape that decodes to text PostgreSQL cannot store: NUL, or a UTF-16 surrogate half.
_BAD_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
#: Python's own default (``sys.get_int_max_str_digits``); said here so the refusal can name it.
MAX_INT_DIGITS = 4300


# --- body size ----------------------------------------------------------------------------------


def _limit() -> int:
    return int(settings.TJWATER_REQUEST_MAX_BYTES)


def too_large_message(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes."


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server (h11/httptools) refuses such a request before it reaches us
    return None


class BoundedBody:
    """ASGI wrapper of the Django application: reads at most ``TJWATER_REQUEST_MAX_BYTES`` of a body."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, _BoundedReceive(scope, receive, _limit()), send)


class _BoundedReceive:
    """One request's ``receive`` as Django sees it: the body's messages until the limit; past it (or at
    once, for a declared length over it) one empty final message, the request marked ``TOO_LARGE``."""

    def __init__(self, scope: dict[str, Any], receive: Callable[..., Any], limit: int) -> None:
        self.scope, self.receive, self.limit = scope, receive, limit
        self.read = 0
        self.handed_end = False  # Django was given the (empty) end of a body it will not get
        declared = _declared_length(scope.get("headers", []))
        self.cut = declared is not None and declared > limit
        if self.cut:
            scope[TOO_LARGE] = True

    async def __call__(self) -> dict[str, Any]:
        if self.cut:
            if not self.handed_end:
                self.handed_end = True
                return {"type": "http.request", "body": b"", "more_body": False}
            # Django's disconnect listener: drop whatever else of the body arrives (never stored), until
            # the server reports the end of the exchange.
            while True:
                message = await self.receive()
                if message["type"] != "http.request":
                    return dict(message)
        message = dict(await self.receive())
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > self.limit:
                self.cut = self.handed_end = True
                self.scope[TOO_LARGE] = True
                return {"type": "http.request", "body": b"", "more_body": False}
        return message


def payload_too_large(limit: int, *, unread: bool = False) -> JsonResponse:
    """413 ``PAYLOAD_TOO_LARGE`` in the REST error shape (``contexts.api_base``). ``unread``: the rest of
    the body was never read, so the connection cannot carry another request (said only on ASGI: WSGI
    servers refuse hop-by-hop headers from the application, PEP 3333)."""
    response = JsonResponse(
        {"code": "PAYLOAD_TOO_LARGE", "message": too_large_message(limit), "retryable": False}, status=413
    )
    response["Cache-Control"] = "no-store"
    if unread:
        response["Connection"] = "close"
    return response


class RequestBodyLimitMiddleware:
    """Django middleware: 413 for a body over ``TJWATER_REQUEST_MAX_BYTES`` before anything parses it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = _limit()
        scope = getattr(request, "scope", None)
        marked = isinstance(scope, dict) and bool(scope.get(TOO_LARGE))
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if not marked and declared <= limit:
            return self.get_response(request)
        # The path may hold a context handle: it is never logged (Django's own request logging is skipped).
        logger.info("request refused method=%s status=413 code=PAYLOAD_TOO_LARGE", request.method)
        response = payload_too_large(limit, unread=marked)
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's private flag, as in api_base
        return response


# --- JSON -------------------------------------------------------------------------------------------


class InvalidJson(ValueError):
    """Text that is not acceptable JSON. The message is a clause ("it is nested deeper than …") that the
    caller puts after its subject ("The request body is not valid JSON: …"); it never echoes the input."""


def json_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether arrays/objects in ``text`` nest deeper than ``max_depth``: brackets outside strings are
    counted, iteratively. (Unbalanced text is left for the parser to refuse.)"""
    if text.count("[") + text.count("{") <= max_depth:
        return False  # cannot nest deeper than it has brackets (the common case, one pass in C)
    depth = 0
    for match in _BRACKETS.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson("a number is too large")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise InvalidJson(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _no_constant(text: str) -> float:
    raise InvalidJson(f"{text} is not a JSON number")


def bad_text_pointer(value: Any) -> str | None:
    """The JSON pointer of the first string (key or value) PostgreSQL cannot store — NUL or a lone
    surrogate — else None; iterative, so any depth is safe. A bad key is reported by its parent."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        pointer, item = stack.pop()
        if isinstance(item, str):
            if _bad_text(item):
                return pointer or "/"
        elif isinstance(item, dict):
            for key, child in item.items():
                if _bad_text(key):
                    return pointer or "/"
                stack.append((f"{pointer}/{key}", child))
        elif isinstance(item, list):
            stack.extend((f"{pointer}/{i}", child) for i, child in enumerate(item))
    return None


def _bad_text(text: str) -> bool:
    if "\x00" in text:
        return True
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads(text: str | bytes, *, max_depth: int | None = None) -> Any:
    """``json.loads`` within the bounds: raises ``InvalidJson`` (a ``ValueError``) with a sentence for
    invalid UTF-8, nesting deeper than ``max_depth`` (default ``TJWATER_JSON_MAX_DEPTH``), malformed
    JSON, a non-finite number, an integer too long to convert, or text PostgreSQL cannot store."""
    limit = int(settings.TJWATER_JSON_MAX_DEPTH) if max_depth is None else max_depth
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidJson("it is not UTF-8") from None
    if json_depth_exceeds(text, limit):
        raise InvalidJson(f"it is nested deeper than the limit of {limit}")
    try:
        value = json.loads(text, parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant)
    except InvalidJson:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"malformed at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:  # the scan bounds the depth; this holds should the interpreter's limit be lower
        raise InvalidJson("it is nested too deeply") from None
    except ValueError:  # whatever else the decoder refuses
        raise InvalidJson("it holds a value this server does not accept") from None
    if not (_BAD_ESCAPE.search(text) or _bad_text(text)):
        return value  # no string in it can hold NUL or a surrogate: no need to walk the value
    pointer = bad_text_pointer(value)
    if pointer is not None:
        raise InvalidJson(f"it holds text that is not valid (NUL or a lone surrogate) at {pointer[:200]}")
    return value


class BodyTooLarge(APIException):
    """A body over the limit that reached the parser (the middleware refuses them first)."""

    status_code = 413
    default_code = "payload_too_large"


class InvalidJsonBody(ParseError):
    """A request body ``BoundedJSONParser`` refused; ``detail`` is the sentence of ``InvalidJson``."""

    default_code = "INVALID_JSON"


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser within the bounds: reads at most ``TJWATER_REQUEST_MAX_BYTES`` (the middleware
    refused longer bodies already; this holds should a body arrive another way) and parses with ``loads``."""

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Any = None) -> Any:
        if stream is None:  # DRF passes no stream for an empty body
            raise InvalidJsonBody("The request body is empty; a JSON object is expected.")
        limit = _limit()
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise BodyTooLarge(too_large_message(limit))
        try:
            return loads(raw)
        except InvalidJson as exc:
            raise InvalidJsonBody(f"The request body is not valid JSON: {exc}.") from None
