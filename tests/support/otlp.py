"""A small OTLP/HTTP trace receiver for tests (Debian 12 has no OpenTelemetry collector): accepts
``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest``, decodes it with the official
``opentelemetry-proto`` messages and keeps the spans."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    service: str


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0

    def wait_for(self, predicate: Any, timeout_s: float = 15.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.spans):
                return list(self.spans)
            time.sleep(0.1)
        raise AssertionError(f"spans not received in time: {[s.name for s in self.spans]}")


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            received = []
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        received.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                kind=span.kind,
                                attributes={a.key: _value(a.value) for a in span.attributes},
                                service=str(resource.get("service.name", "")),
                            )
                        )
            with lock:
                receiver.spans.extend(received)
                receiver.requests += 1
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
