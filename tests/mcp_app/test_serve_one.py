"""``mcp_app.transport._serve_one``: the SDK's ``serve_one`` with the per-request connection's teardown
only when a handler registered some — the same answers as ``serve_one``, and what a handler puts on
the connection's ``exit_stack`` is still unwound after an answer, after an error and after a cancelled call
(the SDK's ``aclose_shielded``: shielded, so the cleanup's own awaits run inside a cancelled call)."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_one
from mcp.shared.transport_context import TransportContext

from mcp_app.transport import _Exchange, _serve_one

VERSION = "2026-07-28"


async def _nothing(message: Any) -> None:
    """ASGI ``send`` of a test exchange (nothing is sent through it here)."""


def _exchange() -> _Exchange:
    return _Exchange(
        _nothing,
        TransportContext(kind="streamable-http", can_send_request=False, headers={}),
        1,
        None,  # type: ignore[arg-type]  # no HTTP request behind this exchange
        None,
    )


def _params(name: str) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"name": name, "arguments": {}, "_meta": meta}


#: The connection of the call being served (a lowlevel handler's context does not carry it publicly).
current: dict[str, Connection] = {}


def _server(cleaned: list[str], started: asyncio.Event) -> Server[Any]:
    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "plain":
            return types.CallToolResult(content=[types.TextContent(type="text", text="plain")])

        async def cleanup() -> None:
            await asyncio.sleep(0)  # an await inside the cleanup: runs even in a cancelled call
            cleaned.append(params.name)

        current["connection"].exit_stack.push_async_callback(cleanup)
        if params.name == "fails":
            raise RuntimeError("the handler failed")
        if params.name == "waits":
            started.set()
            await asyncio.sleep(30)
        return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])

    return Server("t", on_call_tool=call_tool)


async def _serve(server: Server[Any], name: str, *, sdk: bool = False) -> dict[str, Any]:
    serve = serve_one if sdk else _serve_one
    connection = current["connection"] = Connection.from_envelope(VERSION, None, None)
    return await serve(server, _exchange(), "tools/call", _params(name), connection=connection, lifespan_state=None)


def test_answers_as_the_sdk_does_and_unwinds_what_a_handler_registered() -> None:
    cleaned: list[str] = []

    async def main() -> None:
        server = _server(cleaned, asyncio.Event())
        for name in ("plain", "registers"):
            assert await _serve(server, name) == await _serve(server, name, sdk=True)
        assert cleaned == ["registers", "registers"]  # ours, then the SDK's: once each
        with pytest.raises(RuntimeError, match="the handler failed"):
            await _serve(server, "fails")
        assert cleaned[-1] == "fails"

    asyncio.run(main())


def test_a_cancelled_call_still_unwinds_its_connection() -> None:
    cleaned: list[str] = []

    async def main() -> None:
        started = asyncio.Event()
        server = _server(cleaned, started)
        with anyio.CancelScope() as scope:  # what the transport's disconnect watcher cancels

            async def cancel_when_started() -> None:
                await started.wait()
                scope.cancel()

            watcher = asyncio.ensure_future(cancel_when_started())
            await _serve(server, "waits")
        await watcher
        assert scope.cancelled_caught

    asyncio.run(main())
    assert cleaned == ["waits"]
