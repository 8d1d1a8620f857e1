"""Issue 24 "Done when", traces and logs: a real uvicorn server exporting OTLP/HTTP to a receiver the test
starts (decoded with ``opentelemetry-proto``). One ``tools/call`` carrying a ``traceparent`` in
``params._meta`` (SEP-414) continues the caller's trace with its span tree; the call's JSON log line
carries the same trace id and no handle; a REST request continues the W3C header's trace. No span
carries a token or a handle."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable

import httpx2
import pytest
from django.conf import settings

from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.net1 import E2EProject, token
from tests.support.otlp import ReceivedSpan, otlp_receiver
from tests.support.servers import ServerProcess

# The Net1 members' contexts exist for the whole module (tests/conftest.py ``e2e_handles``).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db, pytest.mark.usefixtures("e2e_handles")]

SERVER = 2  # opentelemetry.proto Span.SpanKind SPAN_KIND_SERVER
CLIENT = 3


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[str]:
    return sorted(s.name for s in spans if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id)


def test_a_tools_call_continues_the_callers_trace_and_its_log_line_joins_it(
    start_server: Callable[..., ServerProcess], e2e_project: E2EProject, handle: Callable[..., str]
) -> None:
    with otlp_receiver() as receiver:
        server = start_server(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="100",  # the batch processor's export interval (ms)
            TJWATER_LOG_FORMAT="json",
            REDIS_URL=settings.REDIS_URL,
        )
        trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        bearer, context_handle = token("alice"), handle("alice")
        body = rpc_body(
            "tools/call",
            {"name": "test_slow_query", "arguments": {"context_handle": context_handle, "seconds": 0.01}},
        )
        body["params"]["_meta"]["traceparent"] = f"00-{trace_id}-{caller_span}-01"
        body["params"]["_meta"]["tracestate"] = "vendor=abc"
        response = httpx2.post(
            f"{server.url}/mcp",
            json=body,
            headers=rpc_headers("tools/call", bearer, name="test_slow_query"),
            timeout=30,
        )
        reply = parse_rpc_response(response)
        assert reply["result"]["isError"] is False
        # Nothing of the span goes back to the caller.
        assert "traceparent" not in response.headers and trace_id not in response.text

        spans = receiver.wait_for(lambda got: any(s.name == "tools/call test_slow_query" for s in got))
        call = next(s for s in spans if s.name == "tools/call test_slow_query")
        assert (call.trace_id, call.parent_span_id, call.kind, call.service) == (
            trace_id,
            caller_span,
            SERVER,
            "tjwater-mcp",
        )
        assert call.attributes == {
            "mcp.method.name": "tools/call",
            "mcp.protocol.version": "2026-07-28",
            "network.transport": "tcp",
            "network.protocol.name": "http",
            "jsonrpc.request.id": "1",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "test_slow_query",
        }
        assert children(spans, call) == [
            "authenticate",
            "mcp.context.resolve",
            "postgresql SELECT",  # the tool's statement (pg_sleep)
            "redis slot.acquire",
        ]
        resolve = next(s for s in spans if s.name == "mcp.context.resolve" and s.parent_span_id == call.span_id)
        assert children(spans, resolve) == ["postgresql SELECT"]
        statement = next(s for s in spans if s.parent_span_id == resolve.span_id)
        assert statement.kind == CLIENT
        assert statement.attributes["db.system.name"] == "postgresql"
        assert "%s" in statement.attributes["db.query.text"]  # placeholders, never the handle's hash

        # REST: the W3C header's trace continues; the span is named by the route, never the path.
        rest_trace = secrets.token_hex(16)
        httpx2.get(
            f"{server.url}/api/v1/mcp-query-contexts/{context_handle}",
            headers={"traceparent": f"00-{rest_trace}-{secrets.token_hex(8)}-01"},
            timeout=10,
        )
        spans = receiver.wait_for(lambda got: any(s.trace_id == rest_trace for s in got))
        rest = next(s for s in spans if s.trace_id == rest_trace and s.kind == SERVER)
        assert rest.name == "GET api/v1/mcp-query-contexts/<str:handle>"
        assert rest.attributes["http.route"] == "api/v1/mcp-query-contexts/<str:handle>"

        exported = repr([(s.name, s.attributes) for s in spans])
        assert context_handle not in exported and bearer not in exported

        # The call's JSON log line: same trace id, the call's span, the audit fields, no handle.
        log = server.log()
        assert context_handle not in log and bearer not in log
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        call_line = next(line for line in lines if line["message"].startswith("mcp call "))
        assert call_line["logger"] == "tjwater.mcp"
        assert call_line["trace_id"] == trace_id
        assert call_line["span_id"] == call.span_id
        assert call_line["fields"]["tool"] == "test_slow_query"
        assert call_line["fields"]["outcome"] == "ok"
        server.stop()
