"""Health endpoints (SPEC §10, issue 24): ``/healthz`` and ``/readyz`` check the database, Redis and the
issuer's JWKS, each bounded so they never hang; ``/readyz`` also asks the in-process readiness of the
parts that register one (``register_readiness``: the MCP endpoint, once its catalog is loaded and its
pools are up); ``/livez`` answers 200 while the process serves requests at all, checking nothing.

Each check opens its own short-lived connection with a connect timeout instead of borrowing from the
Django pool: a pool waits for its own timeout when the database is down, and a health probe must answer
within about three seconds whatever is broken. The JWKS check goes through the process's token
validator: a cached, still-fresh key set is enough (no request to the issuer per probe); otherwise it
is loaded like a request would load it (the shared cache, then the issuer, with the check's timeout).
With the dev issuer the key is local, so the check proves the key file loads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import psycopg
import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0


def check_database() -> None:
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        connect_timeout=int(CHECK_TIMEOUT_S),
        options=f"-c statement_timeout={int(CHECK_TIMEOUT_S * 1000)}",
    ) as conn:
        conn.execute("SELECT 1").fetchone()


def check_redis() -> None:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=CHECK_TIMEOUT_S, socket_timeout=CHECK_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()


def check_jwks() -> None:
    from contexts.tokens import get_validator

    get_validator().ensure_keys(timeout_s=CHECK_TIMEOUT_S)


CHECKS = {"database": check_database, "redis": check_redis, "jwks": check_jwks}


def active_checks() -> dict[str, Callable[[], None]]:
    """The issuer's keys matter only while the endpoint that verifies tokens is served."""
    if settings.TJWATER_MCP_ENABLED:
        return CHECKS
    return {name: fn for name, fn in CHECKS.items() if name != "jwks"}


_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="healthz")


def run_checks() -> dict[str, str]:
    """Run every check concurrently; each answers "ok" or "unavailable" within the deadline."""
    futures = {name: _executor.submit(fn) for name, fn in active_checks().items()}
    results: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=CHECK_TIMEOUT_S + 0.5)
        except FutureTimeout:
            logger.warning("health check timed out check=%s", name)
            results[name] = "unavailable"
        except Exception as exc:  # noqa: BLE001 - any failure of a dependency means "not ready"
            logger.warning("health check failed check=%s error_class=%s", name, type(exc).__name__)
            results[name] = "unavailable"
        else:
            results[name] = "ok"
    return results


#: In-process readiness: name → a cheap, non-blocking predicate (registered by the part it describes, e.g.
#: ``mcp_app.asgi.McpEndpoint``: a lower layer never imports the higher one).
_READINESS: dict[str, Callable[[], bool]] = {}


def register_readiness(name: str, ready: Callable[[], bool]) -> None:
    _READINESS[name] = ready


def livez(request: HttpRequest) -> JsonResponse:
    """``GET /livez`` → 200: the process is alive and serving; no dependency is asked (a restart would
    not mend a database outage — Kubernetes' liveness convention)."""
    response = JsonResponse({"status": "ok"})
    response["Cache-Control"] = "no-store"
    return response


def readyz(request: HttpRequest) -> JsonResponse:
    """``GET /readyz`` → 200 when every dependency answers and every registered part is ready (the MCP
    endpoint has loaded its catalog and started), else 503 naming the failing ones — the instance should
    get traffic only then (Kubernetes' readiness convention)."""
    checks = run_checks()
    for name, ready in _READINESS.items():
        checks[name] = "ok" if ready() else "unavailable"
    failing = sorted(name for name, state in checks.items() if state != "ok")
    body: dict[str, object] = {"status": "ok" if not failing else "unavailable", "checks": checks}
    if failing:
        body["failing"] = failing
    response = JsonResponse(body, status=200 if not failing else 503)
    response["Cache-Control"] = "no-store"
    return response


def healthz(request: HttpRequest) -> JsonResponse:
    """``GET /healthz`` → 200 when every dependency answers, else 503 naming the failing ones."""
    checks = run_checks()
    failing = sorted(name for name, state in checks.items() if state != "ok")
    body: dict[str, object] = {"status": "ok" if not failing else "unavailable", "checks": checks}
    if failing:
        body["failing"] = failing
    return JsonResponse(body, status=200 if not failing else 503)
