"""The live readiness check of a running ``/mcp`` (``manage.py mcp_catalog_check --url``, SPEC R-OPS).

What seed 001's start-up check asks, against the server as agents will see it: the unauthenticated 401
challenge and its protected-resource metadata, ``server/discover`` (version pinned, tools + resources
only), ``tools/list`` equal to the offline catalog of this code (names and schemas), the schemas valid,
one harmless authenticated call through a short-lived context (created through the REST API and deleted
afterwards), and a cancellation probe. It never runs model inference.

Each check is ``ok``, ``not_verified`` (it could not be run here — said so, never counted as ok) or a
failure of one of two kinds: ``not_ready`` (the server or a dependency is not up: unreachable, 5xx,
authentication temporarily unavailable — wait and retry) or ``misconfigured`` (it answers, wrongly: another
resource, issuer or catalog, a refused token — a deployment fix).

The cancellation check needs a statement that runs long enough to be seen in ``pg_stat_activity``; the
product catalog has none on purpose (a sleep tool would be a denial-of-service aid, and ``tools/list`` is
the same for every caller). It calls the server's cancellation probe instead (``mcp_app.probe``,
``POST /internal/cancellation-probe``, served to this deployment's service client ``TJWATER_OIDC_CLIENT_ID``
only), which runs one ``pg_sleep`` on the MCP query pool through the path of a tool statement and names
its backend; the check waits until that backend runs it, disconnects, and polls ``pg_stat_activity``
through this command's own database connection (the deployment's ``DATABASE_URL``) until the statement is
gone: "cancellation verified in N ms". Still there after ``CANCEL_LIMIT_S`` is ``misconfigured``. A 404
means the token is not the service client: ``not_verified`` with ``--token`` (an operator's token),
``misconfigured`` with ``--client-credentials`` (the server's ``TJWATER_OIDC_CLIENT_ID`` differs).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx2
from django.conf import settings
from django.db import DatabaseError, connection
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry

from mcp_app.catalog import build_catalog
from mcp_app.probe import PROBE_MARK, PROBE_PATH

PROTOCOL = "2026-07-28"
#: How long the abandoned probe statement may take to leave ``pg_stat_activity`` (it holds ~5 s otherwise).
CANCEL_LIMIT_S = 3.0
#: How long the probe's statement may take to show up in ``pg_stat_activity``.
APPEAR_LIMIT_S = 10.0
#: The longest a busy probe's ``Retry-After`` is believed (the probe's own hold is 5 s), and how often it is asked.
BUSY_RETRY_S = 6.0
BUSY_POLL_S = 0.25
PROBE_BUSY = "a probe is running or the server is at capacity; retry"
#: The probe's statement on one backend: active and marked (the poll's own statement runs on another pid).
PROBE_RUNNING_SQL = (
    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state = 'active' AND query LIKE %s"
    " AND datname = current_database()"
)
Status = Literal["ok", "not_verified", "not_ready", "misconfigured"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""


class _Stop(Exception):
    """The server cannot be checked further (unreachable)."""


def _rpc(
    url: str, token: str | None, method: str, params: dict[str, Any] | None = None, name: str | None = None
) -> httpx2.Response:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": method,
    }
    if name:
        headers["mcp-name"] = name
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta}}
    return httpx2.post(url, json=body, headers=headers, timeout=30)


def reply_of(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        reply: dict[str, Any] = json.loads(data[-1]) if data else {}
        return reply
    body: dict[str, Any] = response.json()
    return body


def _http_failure(name: str, response: httpx2.Response) -> Check:
    """An answer that is not a usable reply: 5xx / 503 means not ready; a 401/403 is our token's fault."""
    if response.status_code >= 500:
        return Check(name, "not_ready", f"HTTP {response.status_code}")
    return Check(name, "misconfigured", f"HTTP {response.status_code}")


class LiveCheck:
    """Runs the checks in order against one ``/mcp`` URL with one bearer token."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        project: str | None,
        context_handle: str | None,
        service_client: bool = False,
    ) -> None:
        self.url = url
        self.token = token
        self.service_client = service_client  # the token is this deployment's client (--client-credentials)
        self.project = project
        self.context_handle = context_handle
        parts = urlsplit(url)
        self.api = f"{parts.scheme}://{parts.netloc}/api/v1"
        prefix = parts.path[: -len("/mcp")] if parts.path.endswith("/mcp") else parts.path.rstrip("/")
        self.probe_url = f"{parts.scheme}://{parts.netloc}{prefix}{PROBE_PATH}"
        self.checks: list[Check] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self._retry_after = BUSY_RETRY_S  # a busy probe's Retry-After (untrusted: bounded to 0..BUSY_RETRY_S)

    def run(self) -> list[Check]:
        steps: list[Callable[[], Check]] = [
            self.challenge,
            self.discover,
            self.catalog,
            self.harmless_call,
            self.cancellation,
        ]
        try:
            for step in steps:
                self.checks.append(step())
        except _Stop as stop:
            self.checks.append(Check("reachable", "not_ready", str(stop)))
        return self.checks

    def _post(self, *args: Any, **kwargs: Any) -> httpx2.Response:
        try:
            return _rpc(self.url, *args, **kwargs)
        except httpx2.TransportError as exc:
            raise _Stop(f"{self.url} unreachable ({type(exc).__name__})") from None

    def challenge(self) -> Check:
        anonymous = self._post(None, "tools/list")
        header = anonymous.headers.get("www-authenticate", "")
        if anonymous.status_code != 401 or "resource_metadata=" not in header or "error=" in header:
            return Check("401 challenge", "misconfigured", f"want 401 + resource_metadata, got {anonymous.status_code}")
        metadata_url = header.split('resource_metadata="', 1)[1].split('"', 1)[0]
        try:
            prm = httpx2.get(metadata_url, timeout=10)
        except httpx2.TransportError:
            return Check("401 challenge", "misconfigured", "the resource metadata URL is unreachable")
        document = prm.json() if prm.status_code == 200 else {}
        if document.get("resource") != self.url:
            return Check("401 challenge", "misconfigured", "the resource metadata names another resource")
        if document.get("authorization_servers") != [settings.TJWATER_OIDC_ISSUER]:
            return Check("401 challenge", "misconfigured", "the resource metadata names another issuer")
        return Check("401 challenge", "ok", "RFC 6750 challenge, RFC 9728 metadata, issuer matches")

    def discover(self) -> Check:
        response = self._post(self.token, "server/discover")
        if response.status_code != 200:
            return _http_failure("server/discover", response)
        result = reply_of(response).get("result", {})
        if result.get("supportedVersions") != [PROTOCOL]:
            return Check("server/discover", "misconfigured", f"versions {result.get('supportedVersions')}")
        capabilities = set(result.get("capabilities", {})) - {"extensions"}
        if capabilities != {"tools", "resources"}:
            return Check("server/discover", "misconfigured", f"capabilities {sorted(capabilities)}")
        return Check("server/discover", "ok", f"{PROTOCOL} only; tools and resources")

    def catalog(self) -> Check:
        response = self._post(self.token, "tools/list")
        if response.status_code != 200:
            return _http_failure("tools/list", response)
        tools = reply_of(response).get("result", {}).get("tools", [])
        self.tools = {tool["name"]: tool for tool in tools}
        expected = {entry.tool.name: entry.tool for entry in build_catalog().entries.values()}
        names = [tool["name"] for tool in tools]
        if names != sorted(expected):
            missing, extra = sorted(set(expected) - set(names)), sorted(set(names) - set(expected))
            return Check("tools/list", "misconfigured", f"differs from this code's catalog: -{missing} +{extra}")
        for tool in tools:
            offline = expected[tool["name"]]
            for key, schema in (("inputSchema", offline.input_schema), ("outputSchema", offline.output_schema)):
                try:
                    Draft202012Validator.check_schema(tool.get(key) or {})
                except SchemaError:
                    return Check("tools/list", "misconfigured", f"{tool['name']}: invalid {key}")
                if tool.get(key) != schema:
                    return Check("tools/list", "misconfigured", f"{tool['name']}: {key} differs from this code's")
        return Check("tools/list", "ok", f"{len(tools)} tools, equal to the offline catalog, schemas valid")

    def _bind(self) -> tuple[str | None, Check | None]:
        if self.context_handle:
            return self.context_handle, None
        if not self.project:
            return None, Check("harmless call", "not_verified", "no --project (or --context-handle) to bind")
        try:
            response = httpx2.post(
                f"{self.api}/mcp-query-contexts",
                headers={"authorization": f"Bearer {self.token}"},
                json={"project": self.project, "session_id": f"readiness-{time.time_ns()}", "purpose": "ordinary_chat"},
                timeout=30,
            )
        except httpx2.TransportError as exc:
            raise _Stop(f"{self.api} unreachable ({type(exc).__name__})") from None
        if response.status_code == 403:
            return None, Check("harmless call", "not_verified", "the token may not bind contexts (mcp.context.bind)")
        if response.status_code != 201:
            return None, _http_failure("harmless call (bind)", response)
        return str(response.json()["context_handle"]), None

    def _unbind(self, handle: str) -> None:
        if handle != self.context_handle:  # only a context this check created
            httpx2.delete(
                f"{self.api}/mcp-query-contexts/{handle}", headers={"authorization": f"Bearer {self.token}"}, timeout=30
            )

    def harmless_call(self) -> Check:
        tool = "get_network_schema"
        if tool not in self.tools:
            return Check("harmless call", "not_verified", f"{tool} is not in the catalog")
        handle, refused = self._bind()
        if refused is not None:
            return refused
        assert handle is not None
        try:
            response = self._post(
                self.token,
                "tools/call",
                {"name": tool, "arguments": {"context_handle": handle, "kind": "junction"}},
                tool,
            )
            if response.status_code == 403:
                return Check("harmless call", "not_verified", "the token may not call tools (mcp.query)")
            if response.status_code != 200:
                return _http_failure("harmless call", response)
            reply = reply_of(response)
            result = reply.get("result", {})
            if result.get("isError") or result.get("resultType") != "complete":
                code = (result.get("structuredContent") or {}).get("code") or reply.get("error", {}).get("code")
                retryable = (result.get("structuredContent") or {}).get("retryable")
                return Check("harmless call", "not_ready" if retryable else "misconfigured", f"refused: {code}")
            try:
                Draft202012Validator(self.tools[tool]["outputSchema"], registry=Registry()).validate(
                    result.get("structuredContent")
                )
            except ValidationError:
                return Check("harmless call", "misconfigured", "the result does not match its outputSchema")
            return Check("harmless call", "ok", f"{tool} through a short-lived context (deleted)")
        finally:
            self._unbind(handle)

    def cancellation(self) -> Check:
        """Abandon one probe statement mid-flight and time how long it takes to leave PostgreSQL. A busy probe
        (another check's, or one just abandoned that the server is still putting away) is asked again every
        ``BUSY_POLL_S`` for its ``Retry-After`` (at most ``BUSY_RETRY_S``) plus a second: two readiness checks at
        once are both answered. A 429 starts nothing on the server, so asking again costs it nothing."""
        check = self._cancellation_once()
        deadline = time.monotonic() + self._retry_after + 1.0
        while check.detail == PROBE_BUSY and time.monotonic() < deadline:
            time.sleep(BUSY_POLL_S)
            check = self._cancellation_once()
        return check

    def _cancellation_once(self) -> Check:
        headers = {"authorization": f"Bearer {self.token}"}
        try:
            with connection.cursor() as cursor, httpx2.Client(timeout=30) as client:
                with client.stream("POST", self.probe_url, headers=headers) as response:
                    if response.status_code != 200:
                        return self._probe_refused(response)
                    lines = response.iter_lines()  # kept open: a dropped iterator closes the connection
                    try:
                        pid = int(json.loads(next(lines, ""))["backend_pid"])
                    except (ValueError, KeyError, TypeError):
                        return Check("cancellation", "misconfigured", "the probe's answer names no backend")
                    deadline = time.monotonic() + APPEAR_LIMIT_S
                    while _count(cursor, pid) == 0:
                        if time.monotonic() > deadline:
                            return Check(
                                "cancellation",
                                "not_verified",
                                "the probe's statement never appeared in this command's database",
                            )
                        time.sleep(0.005)
                abandoned = time.monotonic()  # the stream is closed: the client went away mid-statement
                while _count(cursor, pid) != 0:
                    if time.monotonic() - abandoned > CANCEL_LIMIT_S:
                        return Check("cancellation", "misconfigured", "the abandoned statement is still running")
                    time.sleep(0.002)
                latency_ms = (time.monotonic() - abandoned) * 1000
        except httpx2.TransportError as exc:
            raise _Stop(f"{self.probe_url} unreachable ({type(exc).__name__})") from None
        except DatabaseError as exc:
            return Check("cancellation", "not_verified", f"pg_stat_activity unreadable here ({type(exc).__name__})")
        return Check("cancellation", "ok", f"cancellation verified in {latency_ms:.0f} ms")

    def _probe_refused(self, response: httpx2.Response) -> Check:
        if response.status_code == 404:
            if self.service_client:
                return Check(
                    "cancellation", "misconfigured", "the probe refused this service's client (TJWATER_OIDC_CLIENT_ID)"
                )
            return Check(
                "cancellation", "not_verified", "the probe answers the service client only (--client-credentials)"
            )
        if response.status_code == 429:
            self._retry_after = _retry_after(response.headers.get("retry-after"))
            return Check("cancellation", "not_ready", PROBE_BUSY)
        return _http_failure("cancellation", response)


def _retry_after(header: str | None) -> float:
    """A server's ``Retry-After`` seconds, bounded to 0..``BUSY_RETRY_S`` (``BUSY_RETRY_S`` when unreadable)."""
    try:
        seconds = float(header or "")
    except ValueError:
        return BUSY_RETRY_S
    return min(max(seconds, 0.0), BUSY_RETRY_S) if math.isfinite(seconds) else BUSY_RETRY_S


def _count(cursor: Any, pid: int) -> int:
    """Whether backend ``pid`` runs the probe's statement now. pg_stat_activity is a snapshot fixed for the
    rest of a transaction: take a fresh one each time."""
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute(PROBE_RUNNING_SQL, [pid, f"%{PROBE_MARK}%"])
    return int(cursor.fetchone()[0])


def overall(checks: list[Check]) -> Status:
    """``misconfigured`` beats ``not_ready`` beats ``ok`` (``not_verified`` lines never fail the check)."""
    statuses = {check.status for check in checks}
    if "misconfigured" in statuses:
        return "misconfigured"
    if "not_ready" in statuses:
        return "not_ready"
    return "ok"
