"""A hostile (or merely wrong) MCP resource and issuer in one small local HTTP server, for the reference
host's discovery tests (issue 23 items 1-3): a real server on 127.0.0.1 that plays ``/mcp`` (401 with a
challenge), its protected-resource metadata, an issuer's metadata and a recording token endpoint —
correct by default; each test breaks one thing (a redirect, a plain-http address, an oversized or slow
document, another issuer). Every request is recorded, so tests can say what the host sent and where."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

REALM = "/realms/hostile"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class Reply:
    status: int = 200
    body: bytes | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    drip_s: float = 0.0  # a pause before each byte of the body (a slow server)


Route = Reply | Callable[[Recorded], Reply]


class HostileServer:
    """``routes`` maps a path to a reply; ``requests`` lists what arrived. Defaults: a correct resource
    at ``/mcp`` and a correct issuer at ``/realms/hostile``."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.routes: dict[str, Route] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                record = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
                record.body = self.rfile.read(length) if length else b""
                outer.requests.append(record)
                route = outer.routes.get(self.path.split("?")[0])
                reply = Reply(404, {"error": "not_found"}) if route is None else route
                if callable(reply):
                    reply = reply(record)
                body = json.dumps(reply.body).encode() if isinstance(reply.body, dict) else reply.body
                self.send_response(reply.status)
                headers = {"content-type": "application/json", "content-length": str(len(body)), **reply.headers}
                for name, value in headers.items():
                    if value:  # an empty value leaves the header out (e.g. no content-length)
                        self.send_header(name, value)
                self.end_headers()
                try:
                    if reply.drip_s:
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(reply.drip_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the host gave up on us, as it should

            do_GET = do_POST = _serve  # noqa: N815 - http.server's naming

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.mcp_url = f"{self.base}/mcp"
        self.issuer = f"{self.base}{REALM}"
        self.token_endpoint = f"{self.issuer}/protocol/openid-connect/token"
        self.prm_path = "/.well-known/oauth-protected-resource/mcp"
        self.routes.update(
            {
                "/mcp": Reply(
                    401,
                    {"error": "unauthorized"},
                    {"www-authenticate": f'Bearer resource_metadata="{self.base}{self.prm_path}"'},
                ),
                self.prm_path: Reply(200, self.resource_metadata()),
                f"{REALM}/.well-known/openid-configuration": Reply(200, self.issuer_metadata()),
                f"{REALM}/protocol/openid-connect/token": Reply(
                    200, {"access_token": "hostile-token", "token_type": "Bearer", "expires_in": 300}
                ),
            }
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def resource_metadata(self, **changes: Any) -> dict[str, Any]:
        return {"resource": self.mcp_url, "authorization_servers": [self.issuer], **changes}

    def issuer_metadata(self, **changes: Any) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/protocol/openid-connect/auth",
            "token_endpoint": self.token_endpoint,
            "response_types_supported": ["code"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            **changes,
        }

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
