"""The Celery application (entry point ``tjwater.celery:app``).

Configuration comes from Django settings under the ``CELERY_`` namespace; the beat schedule is defined
in code there (SPEC §9). Tasks are discovered in each installed app's ``tasks`` module.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tjwater.settings")

app = Celery("tjwater")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="tjwater.heartbeat")
def heartbeat() -> str:
    """A no-op the beat schedule sends so a stalled worker or beat shows up in the logs and tests."""
    return "ok"


# --- operations (issue 24): task outcomes as metrics, tasks as spans ------------------------------------
# Celery's signals, not a base class: every task of every app is covered without naming them. A
# worker's metrics reach /metrics when it shares the server's PROMETHEUS_MULTIPROC_DIR (same host);
# its spans go wherever OTEL_EXPORTER_OTLP_ENDPOINT says.
_task_spans: dict[str, Any] = {}


@signals.worker_process_init.connect
def _worker_telemetry(**kwargs: Any) -> None:
    from tjwater import telemetry

    telemetry.configure_from_settings()


@signals.before_task_publish.connect
def _inject_trace(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    from tjwater import telemetry

    if headers is not None:
        telemetry.inject(headers)


@signals.task_prerun.connect
def _task_started(task_id: str = "", task: Any = None, **kwargs: Any) -> None:
    from tjwater import telemetry

    if telemetry.enabled() and task is not None:
        # A worker puts the message's headers on the request itself; an eager ``apply`` under ``headers``.
        request = vars(task.request)
        carrier = request if "traceparent" in request else (request.get("headers") or {})
        manager = telemetry.task_span(task.name, carrier)
        _task_spans[task_id] = (manager, manager.__enter__())


@signals.task_postrun.connect
def _task_finished(task_id: str = "", task: Any = None, state: str | None = None, **kwargs: Any) -> None:
    from tjwater import metrics

    started = _task_spans.pop(task_id, None)
    if started is not None:
        manager, span = started
        span.set_attribute("celery.task.state", state or "UNKNOWN")
        if state == "FAILURE":
            span.set_attribute("error.type", "FAILURE")
        manager.__exit__(None, None, None)
    if task is not None and task.name in app.tasks:  # registered names only: bounded
        metrics.CELERY_TASKS.labels(task.name, state or "UNKNOWN").inc()
