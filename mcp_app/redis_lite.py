"""A minimal pipelined Redis client for the limiter's hot path (issue 10: fewer, cheaper round trips).

redis-py's asyncio client costs ~100 µs of CPU per command in Python (connection pool checkout, retry
wrapper, response parsing). The limiter sends two commands per call (EVALSHA to acquire, ZREM to
release), so this client keeps one connection per process and *pipelines* every caller's commands on
it: a command is written at once and its reply future is queued; RESP replies arrive in order, so the
reader resolves the futures in order. Only what the limiter needs: RESP2 integers, simple strings,
errors, bulk strings and arrays; ``AUTH``/``SELECT`` from the URL at connect; a per-command timeout.

A lost connection fails every waiting command with ``RedisLiteError`` (the limiter fails closed:
``DATA_SOURCE_UNAVAILABLE``); the next command reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any
from urllib.parse import unquote, urlsplit


class RedisLiteError(Exception):
    """Redis could not be reached or answered with an error."""


class ReplyError(RedisLiteError):
    """Redis answered ``-ERR …`` (e.g. ``NOSCRIPT``)."""


def pack(*args: Any) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    pass


def _parse(buf: bytearray, pos: int) -> tuple[Any, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos : pos + 1], bytes(buf[pos + 1 : end])
    pos = end + 2
    if kind == b":":
        return int(line), pos
    if kind == b"+":
        return line.decode(), pos
    if kind == b"-":
        return ReplyError(line.decode(errors="replace")), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + n]), pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            item, pos = _parse(buf, pos)
            items.append(item)
        return items, pos
    raise RedisLiteError("unexpected reply from Redis")


class _Protocol(asyncio.Protocol):
    def __init__(self, client: RedisLite) -> None:
        self.client = client
        self.buffer = bytearray()
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos = 0
        while pos < len(buf):
            try:
                reply, pos_next = _parse(buf, pos)
            except _Incomplete:
                break
            pos = pos_next
            if self.waiters:
                waiter = self.waiters.popleft()
                if not waiter.done():
                    waiter.set_result(reply)
        if pos:
            del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(self)
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RedisLiteError("connection to Redis lost"))


class RedisLite:
    """One pipelined connection to the Redis of ``url`` (``redis://[:password@]host[:port][/db]``)."""

    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.db = int((parts.path or "/0").lstrip("/") or 0)
        self.password = unquote(parts.password) if parts.password else None
        self.username = unquote(parts.username) if parts.username else None
        self.timeout_s = timeout_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), self.host, self.port), self.timeout_s
            )
        except (OSError, TimeoutError) as exc:
            raise RedisLiteError(f"cannot connect to Redis ({type(exc).__name__})") from None
        setup: list[tuple[Any, ...]] = []
        if self.password is not None:
            setup.append(("AUTH", self.username, self.password) if self.username else ("AUTH", self.password))
        if self.db:
            setup.append(("SELECT", self.db))
        for command in setup:
            reply = await self._send(protocol, command)
            if isinstance(reply, ReplyError):
                protocol.transport.close()  # type: ignore[union-attr]
                raise reply
        self._protocol = protocol
        return protocol

    async def _ensure(self) -> _Protocol:
        if self._protocol is not None:
            return self._protocol
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting  # several calls may wait on one connect: each looks at its own
        try:
            return await asyncio.shield(connecting)
        finally:
            # A failed connect is forgotten (the next call tries again) — only if no newer one replaced it.
            if connecting.done() and connecting.exception() is not None and self._connecting is connecting:
                self._connecting = None

    async def _send(self, protocol: _Protocol, args: tuple[Any, ...]) -> Any:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.waiters.append(waiter)
        protocol.transport.write(pack(*args))  # type: ignore[union-attr]
        timer = asyncio.get_running_loop().call_later(self.timeout_s, _expire, waiter, protocol)
        try:
            return await waiter
        finally:
            timer.cancel()

    async def execute(self, *args: Any) -> Any:
        """Send one command and return its reply; ``RedisLiteError`` when Redis is unreachable, too
        slow (the timeout drops the connection: later replies could no longer be matched) or answers
        with an error."""
        protocol = await self._ensure()
        reply = await self._send(protocol, args)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    def send_nowait(self, *args: Any) -> asyncio.Future[Any] | None:
        """Write one command now and return its reply future without waiting for it (None when not
        connected: the caller then uses ``execute``). Replies stay matched by order, and Redis runs
        this connection's commands in the order written, so every later command of this process sees
        this one's effect."""
        protocol = self._protocol
        if protocol is None or protocol.transport is None or protocol.transport.is_closing():
            return None
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.waiters.append(waiter)
        protocol.transport.write(pack(*args))
        return waiter

    async def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send several commands in one write and return their replies (errors as ``ReplyError`` values)."""
        if not commands:
            return []
        protocol = await self._ensure()
        loop = asyncio.get_running_loop()
        waiters = [loop.create_future() for _ in commands]
        protocol.waiters.extend(waiters)
        protocol.transport.write(b"".join(pack(*c) for c in commands))  # type: ignore[union-attr]
        timer = loop.call_later(self.timeout_s, _expire, waiters[-1], protocol)
        try:
            return list(await asyncio.gather(*waiters))
        finally:
            timer.cancel()

    async def aclose(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
            with contextlib.suppress(BaseException):
                await self._connecting


def _expire(waiter: asyncio.Future[Any], protocol: _Protocol) -> None:
    if not waiter.done():
        # Replies are matched by order: after a timeout the connection cannot be trusted. Drop it; every
        # waiter fails, and the next command reconnects.
        if protocol.transport is not None:
            protocol.transport.abort()
        waiter.set_exception(RedisLiteError("Redis did not answer in time"))
