"""A small HTTP/1.1 server on anyio: keep-alive, streamed responses, loopback only.

The meters and the local provider both serve through it. A handler takes a
:class:`Request` and returns a :class:`Response` whose body is bytes or an
async iterator of bytes; an iterator is sent chunk by chunk
(``Transfer-Encoding: chunked``) and is closed, with ``aclose()``, when the
client goes away, so the handler's ``finally`` blocks run.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import structlog

from mw_errors import ConfigError

from ._wire import Listener, Oversized, Wire, WireBroken, chunk_size, listen

__all__ = [
    "AbortConnection",
    "Handler",
    "LastChunk",
    "Request",
    "Response",
    "ServerLimits",
    "bind_http",
    "check_bind_address",
    "openai_error",
    "serve_http",
    "serve_on",
    "serve_until_signal",
]

log = structlog.get_logger("mw.http")
_MAX_BODY = 64 * 1024 * 1024


@dataclass
class Request:
    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @functools.cached_property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class ServerLimits:
    """What one client may hold of the server, so that none can starve the others.

    ``idle_seconds``: a kept-alive connection waiting for its next request;
    ``request_seconds``: from a request's first byte to its last (a slow head
    or body gets 408); ``send_seconds``: a client that reads nothing of its
    answer for this long is dropped; ``max_connections``: connections served at
    once (one more is answered 503 and closed).
    """

    idle_seconds: float = 120.0
    request_seconds: float = 30.0
    send_seconds: float = 120.0
    max_connections: int = 1024

    def __post_init__(self) -> None:
        if min(self.idle_seconds, self.request_seconds, self.send_seconds) <= 0:
            raise ConfigError("server timeouts must be > 0 seconds")
        if self.max_connections < 1:
            raise ConfigError("max_connections must be >= 1")


def openai_error(status: int, kind: str, code: str, message: str) -> Response:
    """An error answer in the OpenAI wire format: ``{"error": {type, code, message, param}}``."""
    body = {"error": {"type": kind, "code": code, "message": message, "param": None}}
    return Response(status, [("content-type", "application/json")], json.dumps(body).encode())


def check_bind_address(host: str, *, allow_non_loopback: bool = False) -> None:
    """Refuse to listen anywhere but loopback unless explicitly allowed.

    Raises:
        ConfigError: a non-loopback address without ``allow_non_loopback``.
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_non_loopback:
        raise ConfigError(
            f"refusing to listen on {host}: only loopback addresses are allowed",
            hint="use 127.0.0.1, or pass --allow-non-loopback if you mean it",
        )


class _Disconnected(Exception):
    pass


class LastChunk(bytes):
    """A streamed body's last chunk: it goes out with the stream's end, in one send."""


class AbortConnection(Exception):
    """Raise from a streamed body to drop the connection mid-message (fault injection)."""


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_MAX_HEAD = 64 * 1024
# A header name or method is made of these; ``translate`` deletes them, leaving any other.
_TOKEN_BYTES = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_REASONS = {
    200: b"OK", 201: b"Created", 204: b"No Content", 400: b"Bad Request", 401: b"Unauthorized",
    402: b"Payment Required", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
    408: b"Request Timeout", 409: b"Conflict", 413: b"Content Too Large",
    429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
    500: b"Internal Server Error", 501: b"Not Implemented", 502: b"Bad Gateway",
    503: b"Service Unavailable", 504: b"Gateway Timeout",
}  # fmt: skip


async def _read_request(wire: Wire, limits: ServerLimits) -> tuple[Request, bool] | None:
    """The next request and whether the connection stays open after it; None at the end.

    None too for a connection idle past ``limits.idle_seconds``; a request begun
    must be whole within ``limits.request_seconds``.

    Raises:
        _BadRequest: a malformed or slow request (answered with its status, then closed).
    """
    if not wire.buffer:
        try:
            if not await wire.fill(limits.idle_seconds):
                return None
        except TimeoutError:
            return None
    wire.deadline = anyio.current_time() + limits.request_seconds
    try:
        return await _parse_request(wire)
    except TimeoutError:
        seconds = f"{limits.request_seconds:g}"
        raise _BadRequest(408, f"the request did not arrive whole within {seconds} s") from None
    finally:
        wire.deadline = None


async def _parse_request(wire: Wire) -> tuple[Request, bool] | None:
    try:
        end = await wire.until(b"\r\n\r\n", _MAX_HEAD)
    except Oversized:
        raise _BadRequest(431, "request head too large") from None
    if end is None:
        if wire.buffer.strip():
            raise _BadRequest(400, "the connection closed mid-request")
        return None
    lines = bytes(wire.buffer[:end]).split(b"\r\n")
    del wire.buffer[: end + 4]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or parts[0].translate(None, _TOKEN_BYTES) or not parts[1]:
        raise _BadRequest(400, "bad request line")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise _BadRequest(400, "only HTTP/1.1 and HTTP/1.0 are spoken here")
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    keep_alive = version == b"HTTP/1.1"
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name.translate(None, _TOKEN_BYTES):
            raise _BadRequest(400, "bad header line")
        name, value = name.lower(), value.strip(b" \t")
        if b"\r" in value or b"\n" in value or b"\0" in value:
            raise _BadRequest(400, "bad header value")
        headers.append((name, value))
        if name == b"content-length":
            if not value.isdigit() or (length is not None and length != int(value)):
                raise _BadRequest(400, "bad content-length")
            length = int(value)
        elif name == b"transfer-encoding":
            if value.lower() != b"chunked":
                raise _BadRequest(501, "only chunked transfer-encoding is supported")
            chunked = True
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            if b"close" in tokens:
                keep_alive = False
            elif b"keep-alive" in tokens and version == b"HTTP/1.0":
                keep_alive = True
    if chunked and length is not None:
        raise _BadRequest(400, "both content-length and transfer-encoding")
    if chunked:
        payload = await _read_chunked(wire)
    else:
        if (length or 0) > _MAX_BODY:
            raise _BadRequest(413, "request body too large")
        read = await wire.exactly(length) if length else b""
        if read is None:
            raise _BadRequest(400, "the connection closed mid-body")
        payload = read
    request = Request(
        method=method.decode(), target=target.decode("latin-1"), headers=headers, body=payload
    )
    return request, keep_alive


async def _line(wire: Wire, limit: int) -> bytes:
    try:
        line = await wire.line(limit)
    except Oversized:
        raise _BadRequest(400, "line too long") from None
    if line is None:
        raise _BadRequest(400, "the connection closed mid-request")
    return line


async def _read_chunked(wire: Wire) -> bytes:
    body = bytearray()
    while True:
        size_line = await _line(wire, 1024)
        try:
            size = chunk_size(size_line)
        except ValueError:
            raise _BadRequest(400, "bad chunk size") from None
        if size == 0:
            while await _line(wire, _MAX_HEAD):  # trailers
                pass
            return bytes(body)
        if len(body) + size > _MAX_BODY:
            raise _BadRequest(413, "request body too large")
        data = await wire.exactly(size)
        if data is None:
            raise _BadRequest(400, "the connection closed mid-body")
        body += data
        if await _line(wire, 2):
            raise _BadRequest(400, "chunk not followed by CRLF")


async def _send(wire: Wire, data: bytes, timeout: float | None) -> None:
    try:
        await wire.send(data, timeout)
    except (WireBroken, TimeoutError) as exc:  # gone, or not reading its answer
        raise _Disconnected from exc


def _head(status: int, headers: list[tuple[str, str]], extra: list[bytes]) -> list[bytes]:
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))]
    for name, value in headers:
        parts += [name.encode(), b": ", value.encode(), b"\r\n"]
    return parts + extra


async def _respond(
    wire: Wire,
    response: Response,
    *,
    keep_alive: bool,
    head_only: bool,
    send_seconds: float | None = None,
) -> None:
    """Write ``response``: a whole body in one send; a stream as chunks, each as it comes.

    A :class:`LastChunk` goes out with the stream's end in one send, and the
    body is closed then, without waiting for it to say it has ended.
    """
    body = response.body
    close = [] if keep_alive else [b"connection: close\r\n"]
    if isinstance(body, bytes):
        bodiless = head_only or response.status in (204, 304)
        length = [] if response.status in (204, 304) else [b"content-length: %d\r\n" % len(body)]
        parts = _head(response.status, response.headers, [*length, *close, b"\r\n"])
        await _send(wire, b"".join(parts) + (b"" if bodiless else body), send_seconds)
        return
    # The head goes out with the first chunk: one send, one wake-up of the client.
    extra = [b"transfer-encoding: chunked\r\n", *close, b"\r\n"]
    pending = b"".join(_head(response.status, response.headers, extra))
    try:
        try:
            async for chunk in body:
                last = isinstance(chunk, LastChunk)
                if chunk and not head_only:
                    pending += b"%x\r\n%s\r\n" % (len(chunk), chunk)
                    if not last:
                        await _send(wire, pending, send_seconds)
                        pending = b""
                if last:
                    break
        except AbortConnection:
            if pending:  # the head still goes: the client sees the answer begin, then break
                await _send(wire, pending, send_seconds)
            raise _Disconnected from None
        await _send(wire, pending + b"0\r\n\r\n", send_seconds)
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


async def _serve_connection(wire: Wire, handler: Handler, limits: ServerLimits) -> None:
    try:
        while True:
            try:
                read = await _read_request(wire, limits)
            except _BadRequest as exc:
                with anyio.move_on_after(1), contextlib.suppress(_Disconnected):
                    answer = Response(
                        exc.status, [("content-type", "text/plain")], str(exc).encode()
                    )
                    await _respond(wire, answer, keep_alive=False, head_only=False)
                return
            except WireBroken:
                return
            if read is None:
                return
            request, keep_alive = read
            try:
                response = await handler(request)
            except Exception:  # a handler bug must not kill the server, nor show its internals
                log.error("handler_failed", exc_info=True)
                response = Response(500, [("content-type", "text/plain")], b"internal error")
            if any(k.lower() == "connection" and "close" in v.lower() for k, v in response.headers):
                keep_alive = False
                response.headers = [
                    (k, v) for k, v in response.headers if k.lower() != "connection"
                ]
            try:
                await _respond(
                    wire,
                    response,
                    keep_alive=keep_alive,
                    head_only=request.method == "HEAD",
                    send_seconds=limits.send_seconds,
                )
            except _Disconnected:
                return
            if not keep_alive:
                return
    finally:
        await wire.aclose()


def bind_http(
    host: str = "127.0.0.1", port: int = 0, *, allow_non_loopback: bool = False
) -> list[Listener]:
    """Listen on every address of ``host`` (loopback only unless allowed), one port for all.

    Serve them with :func:`serve_on`; close them with ``close()`` if they are never served.

    Raises:
        ConfigError: a non-loopback ``host`` without ``allow_non_loopback``.
        OSError: the port is taken.
    """
    check_bind_address(host, allow_non_loopback=allow_non_loopback)
    return listen(host, port)


async def serve_on(
    handler: Handler, listeners: list[Listener], limits: ServerLimits | None = None
) -> None:
    """Serve ``handler`` on ``listeners`` until cancelled; close them on the way out."""
    limits = limits or ServerLimits()
    serving = 0
    try:

        async def handle(wire: Wire) -> None:
            nonlocal serving
            if serving >= limits.max_connections:
                await _turn_away(wire)
                return
            serving += 1
            try:
                await _serve_connection(wire, handler, limits)
            except Exception:  # one broken connection must not stop the server
                log.error("connection_failed", exc_info=True)
            finally:
                serving -= 1

        async def serve(listener: Listener) -> None:
            while True:
                tg.start_soon(handle, await listener.accept())

        async with anyio.create_task_group() as tg:
            for listener in listeners:
                tg.start_soon(serve, listener)
    finally:
        for listener in listeners:
            listener.close()


async def _turn_away(wire: Wire) -> None:
    """Answer a connection past the bound with 503 and close it."""
    busy = Response(
        503, [("content-type", "text/plain"), ("retry-after", "1")], b"too many connections"
    )
    with anyio.move_on_after(1), contextlib.suppress(_Disconnected):
        await _respond(wire, busy, keep_alive=False, head_only=False, send_seconds=1)
    await wire.aclose()


async def serve_http(
    handler: Handler,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_non_loopback: bool = False,
    limits: ServerLimits | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` until cancelled; report the bound port through ``task_status``.

    Raises:
        ConfigError: a non-loopback ``host`` without ``allow_non_loopback``.
        OSError: the port is taken.
    """
    listeners = bind_http(host, port, allow_non_loopback=allow_non_loopback)
    task_status.started(listeners[0].port)
    await serve_on(handler, listeners, limits)


async def serve_until_signal(
    serve: Callable[..., Coroutine[Any, Any, Any]],
    *,
    host: str = "127.0.0.1",
    announce: Callable[[str], None] = print,
) -> None:
    """Run ``serve`` (a ``task_status`` server), announce its address, stop on SIGTERM/SIGINT.

    Prints exactly one line, ``listening on http://HOST:PORT``, once it is ready.
    """
    import signal

    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            port = await tg.start(serve)
            announce(f"listening on http://{host}:{port}")
            async for _ in signals:
                break
        tg.cancel_scope.cancel()
