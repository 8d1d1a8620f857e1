"""Log hygiene: context handles never reach a log (SPEC R-CTX-5, §10).

The one place a handle belongs outside a request body is the path of
``DELETE /api/v1/mcp-query-contexts/{context_handle}``; a client may also put one in a query string by
mistake (``/mcp?context_handle=…``, issue 17 item 10 — the server never reads it there). Every component
that logs request paths would print it: uvicorn's access log (the path and query are in
``record.args``), ``django.request`` ("Not Found: …", "Internal Server Error: …"), ``django.server``
(``manage.py runserver``), a traceback. ``RedactHandlePaths`` rewrites ``mcp-query-contexts/<anything>``
to ``mcp-query-contexts/[redacted]`` and the value of any ``context_handle`` query parameter (also
percent-encoded, any case) to ``[redacted]`` in a record's message, arguments, traceback and stack text.

It is installed by ``LOGGING_CONFIG = "tjwater.logging.configure"`` (Django runs it at
``django.setup()``) in two ways, so it holds however the server is started:

- on the *loggers* that log paths themselves (``django.request``, ``django.server``,
  ``uvicorn.access``, ``uvicorn.error``, ``django``, ``uvicorn``): a logger filter rewrites the record
  before any handler sees it, and ``logging.config.dictConfig`` keeps logger filters when it is run
  again later (only handlers are replaced) — so a server that configures logging after Django (uvicorn
  with ``--log-config``, gunicorn) is still covered;
- on *every handler* that exists when Django sets up (uvicorn configures its handlers before it imports
  the application; ``--access-log`` or not), and on the project's own console handler through
  ``LOGGING["filters"]``, so records of any other logger that carry a path are rewritten too.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import time
from collections.abc import Mapping
from typing import Any

HANDLE_PATH = re.compile(r"(mcp-query-contexts)(?:/|%2f)+[^\s\"'<>]*", re.IGNORECASE)
REDACTED = r"\1/[redacted]"
# ``context_handle=<value>`` after ``?``/``&``/``;``; the name may be percent-encoded (``context%5Fhandle``)
# and the ``=`` too (``%3D``): the value runs to the next parameter, fragment, quote or space.
HANDLE_PARAM = re.compile(r"((?:^|[?&;])context(?:_|%5f)handle(?:=|%3d))[^&;#\s\"'<>]*", re.IGNORECASE)
REDACTED_PARAM = r"\1[redacted]"

# Loggers that write request paths on their own records.
PATH_LOGGERS = ("django", "django.request", "django.server", "uvicorn", "uvicorn.error", "uvicorn.access")


def redact(text: str) -> str:
    """``text`` with every context-API path's handle part and every ``context_handle`` query value replaced."""
    lowered = text.lower()
    if "query-contexts" in lowered:
        text = HANDLE_PATH.sub(REDACTED, text)
    if "handle" in lowered:
        text = HANDLE_PARAM.sub(REDACTED_PARAM, text)
    return text


def _redact_arg(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, int | float | bytes):
        return value  # numbers keep their type: formats like %d need it
    text = str(value)
    redacted = redact(text)
    return value if redacted == text else redacted


class RedactHandlePaths(logging.Filter):
    """Rewrite context-API paths in a record; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_tjwater_redacted", False):
            return True
        record.msg = _redact_arg(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redact_arg(value) for key, value in record.args.items()}
        if record.exc_info and not record.exc_text:
            # Formatter.format uses exc_text when it is set: format the traceback once, redacted.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        record._tjwater_redacted = True
        return True


def _has_redaction(filterer: logging.Filterer) -> bool:
    return any(isinstance(f, RedactHandlePaths) for f in filterer.filters)


def install() -> None:
    """Attach the filter to the path loggers and to every handler that exists now."""
    redaction = RedactHandlePaths()
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [logging.getLogger(name) for name in PATH_LOGGERS]
    loggers += [item for item in logging.Logger.manager.loggerDict.values() if isinstance(item, logging.Logger)]
    for logger in loggers:
        if logger.name in PATH_LOGGERS and not _has_redaction(logger):
            logger.addFilter(redaction)
        for handler in logger.handlers:
            if not _has_redaction(handler):
                handler.addFilter(redaction)


#: ``key=value`` pairs of our log lines (``mcp call principal=… tool=… outcome=…``): the audit fields.
FIELD = re.compile(r"(?:^|\s)([a-z_]+)=([^\s]+)")


class JsonFormatter(logging.Formatter):
    """``TJWATER_LOG_FORMAT=json``: one JSON object per line — ``time`` (UTC, ISO 8601), ``level``,
    ``logger``, ``message``, the line's ``key=value`` audit fields as ``fields``, ``exception`` when
    there is a traceback, and ``trace_id``/``span_id`` of the current span while tracing is on (so a
    log line joins its trace). It formats the record the redaction filter has already rewritten — the
    filter runs before any formatter — so a handle never reaches it."""

    def format(self, record: logging.LogRecord) -> str:
        from tjwater import telemetry

        message = record.getMessage()
        body: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        fields = dict(FIELD.findall(message))
        if fields:
            body["fields"] = fields
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self.formatException(record.exc_info))
        if record.exc_text:
            body["exception"] = record.exc_text
        ids = telemetry.current_ids()
        if ids is not None:
            body["trace_id"], body["span_id"] = ids
        return json.dumps(body, ensure_ascii=False, default=str)


def configure(config: dict[str, Any]) -> None:
    """Django's ``LOGGING_CONFIG``: apply ``LOGGING``, then install the redaction everywhere.

    Records do not collect what no format here prints (the logging HOWTO, "Optimization"): the caller's
    file and line (a stack walk per record), thread, process and multiprocessing names (their cost on the
    per-call log line of ``/mcp``: ``mcp_app/README.md`` "Measuring")."""
    logging.config.dictConfig(config)
    logging._srcfile = None  # documented switch: no findCaller()
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    install()
