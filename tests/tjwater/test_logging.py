"""The handle-redacting log filter (tjwater/logging.py) on the records real components produce."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from django.test import RequestFactory

from tests.support.servers import ROOT
from tjwater.logging import RedactHandlePaths, redact
from tjwater.urls import not_found, server_error

HANDLE = "Zk3vQ_9x-secret-handle-AAAAAAAAAAAAAAAAAAAAAA"


def record(msg: object, args: object = None, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, msg, args, None)  # type: ignore[arg-type]
    rec.__dict__.update(extra)
    return rec


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/mcp-query-contexts/{HANDLE}",
        f"/api/v1/mcp-query-contexts/{HANDLE}/",
        f"/api/v1/mcp-query-contexts//{HANDLE}?next={HANDLE}",
        f"/API/V1/MCP-QUERY-CONTEXTS/{HANDLE}",
        f"/api/v1/mcp-query-contexts%2F{HANDLE}",
    ],
)
def test_every_form_of_a_handle_path_is_redacted(path: str) -> None:
    assert HANDLE not in redact(f'127.0.0.1:5 - "DELETE {path} HTTP/1.1" 404')
    assert "mcp-query-contexts/[redacted]" in redact(path).lower()


def test_other_paths_and_the_create_path_are_left_alone() -> None:
    for text in (
        "/api/v1/mcp-query-contexts",
        '"POST /api/v1/mcp-query-contexts HTTP/1.1" 201',
        "/mcp",
        "x",
        "/mcp?handle=1&my_context_handle=2",
        "context_handles are hashed",
    ):
        assert redact(text) == text


@pytest.mark.parametrize(
    ("query", "redacted"),
    [
        (f"/mcp?context_handle={HANDLE}", "/mcp?context_handle=[redacted]"),
        (f"/mcp?a=1&context_handle={HANDLE}&b=2", "/mcp?a=1&context_handle=[redacted]&b=2"),
        (f"/mcp?CONTEXT_HANDLE={HANDLE}#x", "/mcp?CONTEXT_HANDLE=[redacted]#x"),
        (f"/mcp?context%5Fhandle%3D{HANDLE};b=2", "/mcp?context%5Fhandle%3D[redacted];b=2"),
        (f"/api/v1/mcp-query-contexts/{HANDLE}?context_handle={HANDLE}", None),
    ],
)
def test_a_handle_in_a_query_string_is_redacted(query: str, redacted: str | None) -> None:
    line = redact(f'127.0.0.1:5 - "POST {query} HTTP/1.1" 401')
    assert HANDLE not in line
    if redacted is not None:
        assert f'"POST {redacted} HTTP/1.1"' in line


def test_uvicorn_access_records_keep_their_shape() -> None:
    # uvicorn's AccessFormatter unpacks exactly these five arguments; the status must stay an int.
    rec = record(
        '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "DELETE", f"/api/v1/mcp-query-contexts/{HANDLE}", "1.1", 204)
    )
    assert RedactHandlePaths().filter(rec) is True
    assert rec.args == ("127.0.0.1:5", "DELETE", "/api/v1/mcp-query-contexts/[redacted]", "1.1", 204)
    assert rec.getMessage() == '127.0.0.1:5 - "DELETE /api/v1/mcp-query-contexts/[redacted] HTTP/1.1" 204'


def test_messages_mapping_arguments_objects_and_tracebacks_are_redacted() -> None:
    class Request:
        def __str__(self) -> str:
            return f"<ASGIRequest: DELETE '/api/v1/mcp-query-contexts/{HANDLE}'>"

    try:
        raise LookupError(f"no route for api/v1/mcp-query-contexts/{HANDLE}/")
    except LookupError:
        exc_info = sys.exc_info()
    rec = record("Not Found: %(path)s %(request)s", None, exc_info=exc_info)
    rec.args = {"path": f"/api/v1/mcp-query-contexts/{HANDLE}/", "request": Request()}
    RedactHandlePaths().filter(rec)
    text = logging.Formatter().format(rec)
    assert HANDLE not in text
    assert "LookupError" in text and "Not Found: /api/v1/mcp-query-contexts/[redacted]" in text

    direct = record(f"Internal Server Error: /api/v1/mcp-query-contexts/{HANDLE}", None)
    RedactHandlePaths().filter(direct)
    assert direct.getMessage() == "Internal Server Error: /api/v1/mcp-query-contexts/[redacted]"


UVICORN_RECONFIGURES = f"""
import io, logging, logging.config
import django
django.setup()  # the project's LOGGING, with the redaction
from uvicorn.config import LOGGING_CONFIG
logging.config.dictConfig(LOGGING_CONFIG)  # a server configuring logging again afterwards
stream = io.StringIO()
handler = logging.StreamHandler(stream)
logging.getLogger("uvicorn.access").addHandler(handler)
logging.getLogger("django.request").addHandler(handler)
logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "c", "DELETE",
    "/api/v1/mcp-query-contexts/{HANDLE}", "1.1", 404)
logging.getLogger("django.request").warning("Not Found: %s", "/api/v1/mcp-query-contexts/{HANDLE}/")
print(stream.getvalue())
"""


def test_the_redaction_survives_a_later_logging_configuration() -> None:
    result = subprocess.run(
        [sys.executable, "-c", UVICORN_RECONFIGURES],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "tests.settings", "TJWATER_READ_ENV_FILE": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert HANDLE not in result.stdout + result.stderr
    assert '"DELETE /api/v1/mcp-query-contexts/[redacted] HTTP/1.1" 404' in result.stdout
    assert "Not Found: /api/v1/mcp-query-contexts/[redacted]" in result.stdout


def test_api_errors_outside_a_view_are_json_and_the_admin_keeps_its_pages() -> None:
    factory = RequestFactory()
    api_500 = server_error(factory.delete(f"/api/v1/mcp-query-contexts/{HANDLE}"))
    assert (api_500.status_code, api_500["Content-Type"]) == (500, "application/json")
    assert (
        api_500.content
        == b'{"code": "INTERNAL_ERROR", "message": "The server failed to complete the request.", "retryable": false}'
    )
    api_404 = not_found(factory.delete(f"/api/v1/mcp-query-contexts/{HANDLE}/"), Exception("x"))
    assert (api_404.status_code, api_404["Content-Type"]) == (404, "application/json")
    assert HANDLE.encode() not in api_404.content
    admin_500 = server_error(factory.get("/admin/"))
    assert admin_500.status_code == 500 and admin_500["Content-Type"].startswith("text/html")
