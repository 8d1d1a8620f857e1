"""Tracing in-process with the SDK's in-memory exporter (issue 24): the REST request's span tree and
attributes, Celery tasks (outcome metric, span, the publisher's context through the headers), worker
threads continuing the caller's span (the evidence save runs in one), and nothing at all while off."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from tjwater import telemetry


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.configure(exporter=exporter, batch=False)
    yield exporter
    telemetry.shutdown()


def test_a_rest_request_is_one_server_span_with_its_statements(db: None, spans: InMemorySpanExporter) -> None:
    parent_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = Client().get(
        "/api/v1/mcp-query-contexts/some-handle-of-someone",
        headers={"traceparent": f"00-{parent_trace}-00f067aa0ba902b7-01", "authorization": "Bearer not-a-token"},
    )
    assert response.status_code == 401
    finished = spans.get_finished_spans()
    server = next(s for s in finished if s.kind == SpanKind.SERVER)
    assert server.name == "GET api/v1/mcp-query-contexts/<str:handle>"
    assert format(server.context.trace_id, "032x") == parent_trace
    assert format(server.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert dict(server.attributes) == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "http.route": "api/v1/mcp-query-contexts/<str:handle>",
        "http.response.status_code": 401,
    }
    exported = repr([(s.name, dict(s.attributes)) for s in finished])
    assert "some-handle-of-someone" not in exported and "not-a-token" not in exported


def test_django_statements_are_client_spans_without_parameters(db: None, spans: InMemorySpanExporter) -> None:
    from django.contrib.auth.models import Group

    with telemetry.span("parent"):
        assert not Group.objects.filter(name="secret-parameter-value").exists()
    statement = next(s for s in spans.get_finished_spans() if s.name.startswith("postgresql"))
    assert statement.name == "postgresql SELECT" and statement.kind == SpanKind.CLIENT
    assert statement.attributes["db.system.name"] == "postgresql"
    assert "%s" in statement.attributes["db.query.text"]
    assert "secret-parameter-value" not in repr(dict(statement.attributes))


def test_a_worker_thread_continues_the_callers_span(spans: InMemorySpanExporter) -> None:
    @telemetry.traced_sync("evidence.save")
    def save() -> str:
        return "saved"

    async def main() -> str:
        with telemetry.span("tools/call x"):
            return await anyio.to_thread.run_sync(save)  # as evidence.services._in_thread runs it

    assert anyio.run(main) == "saved"
    child, parent = spans.get_finished_spans()
    assert (child.name, parent.name) == ("evidence.save", "tools/call x")
    assert child.parent.span_id == parent.context.span_id


def test_an_exception_is_its_class_name_never_its_text(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError), telemetry.span("work"):
        raise ValueError("a payload value that must not be exported")
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes) == {"error.type": "ValueError"}
    assert span.events == () and "payload" not in repr(span.status)


def test_celery_tasks_are_spans_and_outcomes(spans: InMemorySpanExporter) -> None:
    from tjwater.celery import _inject_trace, heartbeat

    def done(state: str) -> float:
        return (
            REGISTRY.get_sample_value("tjwater_celery_tasks_total", {"task": "tjwater.heartbeat", "state": state}) or 0
        )

    before = done("SUCCESS")
    with telemetry.span("publisher") as publisher:
        headers: dict[str, str] = {}
        _inject_trace(headers=headers)  # what before_task_publish does to a message
    assert headers["traceparent"].split("-")[1] == format(publisher.get_span_context().trace_id, "032x")
    assert heartbeat.apply(headers=headers).get() == "ok"  # runs the task with the signals, in-process
    assert done("SUCCESS") == before + 1
    task = next(s for s in spans.get_finished_spans() if s.name == "celery.task tjwater.heartbeat")
    assert task.kind == SpanKind.CONSUMER
    assert task.attributes["celery.task.state"] == "SUCCESS"
    assert task.parent is not None and task.parent.span_id == publisher.get_span_context().span_id


def test_tracing_off_records_nothing() -> None:
    assert not telemetry.enabled()
    with telemetry.span("nothing") as span:
        assert not span.is_recording()
    assert telemetry.current_ids() is None
