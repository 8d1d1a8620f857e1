"""The SDK side of ``/mcp``: a low-level ``mcp.server.Server`` and its handlers (SPEC §2).

Only tools/list, tools/call, resources/list, resources/templates/list and resources/read are
registered, so ``server/discover`` reports exactly ``tools`` and ``resources`` (R-PROTO-2; SDK_NOTES
"Server": the SDK derives capabilities from the handlers, and templates add nothing to them), plus under
``extensions`` client credentials and — where the catalog has a job-backed tool — the MCP Tasks extension
(``mcp_app.tasks_extension``, R-RUN-5). The verified token is put
into the ASGI scope by the HTTP layer (``mcp_app.asgi``) and read here from the Starlette request.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext

from contexts.tokens import VerifiedToken
from mcp_app.catalog import Catalog
from mcp_app.dispatch import Dispatcher
from mcp_app.metrics import Observe
from mcp_app.tasks_extension import TasksExtension, install

SERVER_NAME = "tjwater-mcp"
SERVER_VERSION = "0.1.0"
PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = [PROTOCOL_VERSION]
CLIENT_CREDENTIALS_EXTENSION = "io.modelcontextprotocol/oauth-client-credentials"
TOKEN_SCOPE_KEY = "tjwater.token"
INSTRUCTIONS = (
    "Access to a water utility's hydraulic network model and related data. Every business tool needs the "
    "context_handle of a context created for one project; results are paged and capped. Query tools only "
    "read; where a deployment serves them, the run_* tools start hydraulic analyses as background runs "
    "(follow them with get_analysis_run) and cancel_analysis_run stops one."
)

# R-PROTO-5: the catalog is generic (the same for everyone) → public, 5 minutes; anything read on
# behalf of a caller → private, never reused.
#: The methods registered below (``Observe`` labels anything else ``_OTHER``).
METHODS = ("tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read")
PUBLIC_CATALOG = CacheHint(ttl_ms=300_000, scope="public")
PRIVATE = CacheHint(ttl_ms=0, scope="private")


def request_token(ctx: ServerRequestContext[Any, Any]) -> VerifiedToken:
    token = ctx.request.scope.get(TOKEN_SCOPE_KEY) if ctx.request is not None else None
    if not isinstance(token, VerifiedToken):
        # The HTTP layer authenticates every request before the SDK sees it; reaching here is a bug.
        raise RuntimeError("request reached the MCP server without a verified token")
    return token


def build_server(catalog: Catalog, dispatcher: Dispatcher) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=catalog.tools, ttl_ms=PUBLIC_CATALOG.ttl_ms, cache_scope="public")

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        meta = params.meta or {}
        progress = meta.get("progress_token", meta.get("progressToken")) is not None
        return await dispatcher.call_tool(
            token=request_token(ctx),
            name=params.name,
            arguments=params.arguments,
            session=ctx.session,
            progress=progress,
            # The request's _meta goes through to dispatch (the evidence step reads the request key there).
            meta=meta,
        )

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        # R-EVID-4: the bound task's evidence snapshots, for the context in _meta (dispatch checks it).
        return await dispatcher.list_resources(
            token=request_token(ctx),
            cursor=params.cursor if params is not None else None,
            meta=params.meta if params is not None else None,
        )

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        # No templates: evidence resources are addressed by the URIs the tools return. Answered (not
        # -32601) because the resources capability is declared; private like every resources answer.
        return types.ListResourceTemplatesResult(resource_templates=[], ttl_ms=0, cache_scope="private")

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await dispatcher.read_resource(token=request_token(ctx), uri=str(params.uri), meta=params.meta)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        title="TJ Water MCP",
        instructions=INSTRUCTIONS,
        cache_hints={
            "server/discover": PUBLIC_CATALOG,
            "tools/list": PUBLIC_CATALOG,
            "resources/list": PRIVATE,
            "resources/templates/list": PRIVATE,
            "resources/read": PRIVATE,
        },
        # Header (Mcp-Param-*) validation reads the schema from the catalog instead of running the
        # tools/list handler on every call (SDK_NOTES "Performance").
        get_tool_input_schema=catalog.input_schema,
        on_list_tools=list_tools,
        # The SDK's runner sends a dict result as it is (mcp/server/runner.py); its handler type names models only.
        on_call_tool=call_tool,  # type: ignore[arg-type]
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )
    # R-AUTH-4: service identities may use client_credentials.
    server.extensions = {CLIENT_CREDENTIALS_EXTENSION: {}}
    # R-RUN-5: where the catalog has a job-backed tool, its job is also an MCP task (SEP-2663) for clients
    # that declare the extension: tasks/get, tasks/update, tasks/cancel, advertised in capabilities.
    task_methods = install(server, TasksExtension(dispatcher, token_of=request_token)) if dispatcher.jobs else []

    async def discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams | None) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=SUPPORTED_VERSIONS,
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=INSTRUCTIONS,
            ttl_ms=PUBLIC_CATALOG.ttl_ms,
            cache_scope="public",
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    # Instead of the SDK's default OpenTelemetry middleware (it spans every request with the global
    # tracer even when nothing exports, and labels by the client's tool name): metrics always, our own
    # span when tracing is on (mcp_app.metrics, tjwater.telemetry).
    server.middleware = [Observe(methods=[*METHODS, "server/discover", *task_methods], tools=catalog.entries)]
    return server
