"""Prometheus metrics of the service (issue 24), served at ``/metrics`` behind ``TJWATER_METRICS_TOKEN``.

Every instrument of the service is declared here, in one leaf module that imports no app, so that any
layer (``contexts``, ``evidence``, ``mcp_app``, REST, Celery) records into it without an upward import.
Names follow the OpenTelemetry semantic conventions where one exists, converted the way OpenTelemetry's
Prometheus exporter converts them (dots → underscores, the unit as a suffix):
``mcp.server.operation.duration`` → ``mcp_server_operation_duration_seconds`` (attributes
``mcp.method.name``, ``gen_ai.tool.name``, ``error.type``); ``http.server.request.duration`` →
``http_server_request_duration_seconds``. The service's own series are prefixed ``tjwater_``.

Labels are bounded by construction: method names and tool names come from the server's registry (an
unknown one is ``_OTHER``), error types are the stable codes of ``contexts.errors`` or JSON-RPC codes,
routes are URL patterns, never paths. No handle, principal, token, element id or free text is a label.

Processes: a plain ``uvicorn tjwater.asgi:application`` keeps the values in memory and ``/metrics``
serves them. With ``PROMETHEUS_MULTIPROC_DIR`` set (``scripts/run.sh`` sets it for N workers, and a
Celery worker on the same host may share it), prometheus-client keeps each process's values in files
there and ``/metrics`` — answered by whichever worker gets the request — adds them up
(``MultiProcessCollector``); gauges say how (``multiprocess_mode``). The directory must be emptied
before the processes start (``scripts/run.sh`` does).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from time import perf_counter

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from tjwater import telemetry

#: The OpenTelemetry MCP conventions' advised buckets for ``mcp.server.operation.duration`` (seconds).
MCP_DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
#: The HTTP conventions' advised buckets for ``http.server.request.duration`` (seconds).
HTTP_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
#: The value of a label whose real value is not one of the bounded set (OpenTelemetry's convention).
OTHER = "_OTHER"

# --- MCP -------------------------------------------------------------------------------------------
MCP_OPERATION_DURATION = Histogram(
    "mcp_server_operation_duration",
    "MCP request duration as observed on the server, from the request reaching the SDK kernel to the "
    "result (OpenTelemetry mcp.server.operation.duration). error_type is empty on success.",
    ["mcp_method_name", "gen_ai_tool_name", "error_type"],
    unit="seconds",
    buckets=MCP_DURATION_BUCKETS,
)
MCP_INFLIGHT = Gauge(
    "tjwater_mcp_inflight_calls",
    "tools/call requests being served now.",
    multiprocess_mode="livesum",
)
MCP_HTTP_REFUSALS = Counter(
    "tjwater_mcp_http_refusals",
    "/mcp requests refused before the MCP kernel: authentication (401), scope (403), issuer keys "
    "unavailable (503), by HTTP status.",
    ["http_response_status_code"],
)
LIMITER_REFUSALS = Counter(
    "tjwater_mcp_limiter_refusals",
    "Calls refused with RATE_LIMITED, by reason: tenant (the principal × project in-flight limit in "
    "Redis) or process (every query slot of the server process taken).",
    ["reason"],
)
LIMITER_REFUSALS_TENANT = LIMITER_REFUSALS.labels(reason="tenant")
LIMITER_REFUSALS_PROCESS = LIMITER_REFUSALS.labels(reason="process")
STATEMENT_CANCELLATIONS = Counter(
    "tjwater_mcp_statement_cancellations",
    "Running PostgreSQL statements cancelled because their call was cancelled (client gone).",
)
STATEMENT_DEADLINE_STOPS = Counter(
    "tjwater_mcp_statement_deadline_stops",
    "Running PostgreSQL statements cancelled because their call's query budget ran out (QUERY_TIMEOUT).",
)
STATEMENTS_AHEAD = Counter(
    "tjwater_mcp_statements_ahead",
    "Tools' first statements sent in one round trip with their call's context resolution, by outcome: used "
    "(the scope resolved now was the one it was built for) or dropped (it was not, or the call was refused).",
    ["outcome"],
)
STATEMENTS_AHEAD_USED = STATEMENTS_AHEAD.labels(outcome="used")
STATEMENTS_AHEAD_DROPPED = STATEMENTS_AHEAD.labels(outcome="dropped")
DB_POOL_SIZE = Gauge(
    "tjwater_mcp_db_pool_connections",
    "Connections of the /mcp query pool, by state (sampled every few seconds).",
    ["state"],
    multiprocess_mode="livesum",
)
DB_POOL_OPEN = DB_POOL_SIZE.labels(state="open")
DB_POOL_IN_USE = DB_POOL_SIZE.labels(state="in_use")
DB_POOL_WAITING = Gauge(
    "tjwater_mcp_db_pool_waiting_requests",
    "Requests waiting for a connection of the /mcp query pool (sampled).",
    multiprocess_mode="livesum",
)
DB_POOL_WAIT = Counter(
    "tjwater_mcp_db_pool_wait",
    "Time requests spent waiting for a connection of the /mcp query pool (sampled).",
    unit="seconds",
)
DB_POOL_CHECKOUTS = Counter(
    "tjwater_mcp_db_pool_checkouts",
    "Connections taken from the /mcp query pool (sampled).",
)

# --- authentication -----------------------------------------------------------------------------------
JWKS_AGE = Gauge(
    "tjwater_oidc_jwks_age",
    "Age of the issuer key set this process verifies tokens with (-1: none loaded; sampled).",
    unit="seconds",
    multiprocess_mode="livemax",
)
JWKS_REFRESH_FAILURES = Counter(
    "tjwater_oidc_jwks_refresh_failures",
    "Failed loads of the issuer's key set (unreachable, or no usable key).",
)
TOKEN_CACHE = Counter(
    "tjwater_token_cache_lookups",
    "Bearer token verifications by the per-process cache: hit (no signature check) or miss.",
    ["result"],
)
TOKEN_CACHE_HIT = TOKEN_CACHE.labels(result="hit")
TOKEN_CACHE_MISS = TOKEN_CACHE.labels(result="miss")

# --- evidence -----------------------------------------------------------------------------------------
EVIDENCE_SAVES = Counter(
    "tjwater_evidence_saves",
    "Evidence snapshots of task-purpose calls, by outcome: saved or failed (not saved).",
    ["outcome"],
)
EVIDENCE_SAVED = EVIDENCE_SAVES.labels(outcome="saved")
EVIDENCE_FAILED = EVIDENCE_SAVES.labels(outcome="failed")
RECEIPTS_REPLAYED = Counter(
    "tjwater_evidence_receipts_replayed",
    "Task-purpose calls answered from a completed receipt (an identical retry: no new query).",
)

# --- REST and Celery ------------------------------------------------------------------------------------
HTTP_REQUEST_DURATION = Histogram(
    "http_server_request_duration",
    "Duration of requests served by Django (REST API, admin, health), by URL pattern and status "
    "(OpenTelemetry http.server.request.duration).",
    ["http_request_method", "http_route", "http_response_status_code"],
    unit="seconds",
    buckets=HTTP_DURATION_BUCKETS,
)
CELERY_TASKS = Counter(
    "tjwater_celery_tasks",
    "Celery tasks finished, by task name and state (SUCCESS, FAILURE, RETRY, REVOKED, …).",
    ["task", "state"],
)

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def multiprocess_dir() -> str:
    """The multiprocess directory of this process ("" = single process, values in memory)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def exposition() -> bytes:
    """The text exposition of every series: this process's, or every process's under a multiprocess
    directory."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def mark_process_dead() -> None:
    """At a clean shutdown: this process's live gauges stop counting (multiprocess mode only)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]  # unannotated in prometheus_client


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the exposition, for ``Authorization: Bearer <TJWATER_METRICS_TOKEN>`` only.

    With the setting empty the endpoint does not exist (404): never public by default. The token is
    compared in constant time (``hmac.compare_digest``); a missing or wrong one is 401 with an RFC 6750
    challenge and says nothing else."""
    expected = settings.TJWATER_METRICS_TOKEN
    if not expected:
        return HttpResponseNotFound()
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected.encode()):
        response = HttpResponse(status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        response["Cache-Control"] = "no-store"
        return response
    # The classic text format (version 0.0.4): every Prometheus version reads it; all names here are legacy-valid.
    response = HttpResponse(exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
    response["Cache-Control"] = "no-store"
    return response


class RequestMetricsMiddleware:
    """Django middleware: ``http_server_request_duration_seconds`` per request, labelled by the URL
    pattern that matched (``resolver_match.route``: bounded, never the path — a handle in a path never
    becomes a label) — "" when none matched — the method (unknown ones ``_OTHER``) and the status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = perf_counter()
        with telemetry.http_server_span(request) as span:
            response = self.get_response(request)
            match = request.resolver_match
            route = match.route if match is not None else ""
            if span is not None:
                telemetry.end_http_span(span, request, route, response.status_code)
        method = request.method if request.method in HTTP_METHODS else OTHER
        HTTP_REQUEST_DURATION.labels(method, route, response.status_code).observe(perf_counter() - started)
        return response
