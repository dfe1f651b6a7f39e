"""A small HTTP/1.1 server on anyio and h11: keep-alive, streamed responses, loopback only.

The meters and the local provider both serve through it. A handler takes a
:class:`Request` and returns a :class:`Response` whose body is bytes or an
async iterator of bytes; an iterator is sent chunk by chunk
(``Transfer-Encoding: chunked``) and is closed, with ``aclose()``, when the
client goes away, so the handler's ``finally`` blocks run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h11
import structlog

from mw_errors import ConfigError

__all__ = [
    "AbortConnection",
    "Handler",
    "Request",
    "Response",
    "check_bind_address",
    "openai_error",
    "serve_http",
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

    @property
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


class AbortConnection(Exception):
    """Raise from a streamed body to drop the connection mid-message (fault injection)."""


async def _read_request(stream: anyio.abc.ByteStream, conn: h11.Connection) -> Request | None:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                data = b""
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > _MAX_BODY:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return Request(
                method=request.method.decode(),
                target=request.target.decode(),
                headers=list(request.headers),
                body=bytes(body),
            )
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # PAUSED: the client pipelined; we answer one at a time
            return None


async def _send(stream: anyio.abc.ByteStream, conn: h11.Connection, *events: Any) -> None:
    """Send ``events`` in one write (a whole answer is one syscall, not three)."""
    data = b"".join(conn.send(event) or b"" for event in events)
    if data:
        try:
            await stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError) as exc:
            raise _Disconnected from exc


async def _respond(stream: anyio.abc.ByteStream, conn: h11.Connection, response: Response) -> None:
    headers = [(k.encode(), v.encode()) for k, v in response.headers]
    body = response.body
    if isinstance(body, bytes):
        headers.append((b"content-length", str(len(body)).encode()))
        head = h11.Response(status_code=response.status, headers=headers)
        events = (
            (head, h11.Data(data=body), h11.EndOfMessage()) if body else (head, h11.EndOfMessage())
        )
        await _send(stream, conn, *events)
        return
    headers.append((b"transfer-encoding", b"chunked"))
    try:
        await _send(stream, conn, h11.Response(status_code=response.status, headers=headers))
        try:
            async for chunk in body:
                if chunk:
                    await _send(stream, conn, h11.Data(data=chunk))
        except AbortConnection:
            raise _Disconnected from None
        await _send(stream, conn, h11.EndOfMessage())
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


async def _serve_connection(stream: anyio.abc.ByteStream, handler: Handler) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            try:
                request = await _read_request(stream, conn)
            except h11.RemoteProtocolError as exc:
                with anyio.move_on_after(1):
                    status = exc.error_status_hint
                    await _respond_error(stream, conn, status, str(exc))
                return
            if request is None:
                return
            try:
                response = await handler(request)
            except Exception as exc:  # a handler bug must not kill the server
                log.exception("handler_failed", path=request.path)
                response = Response(500, [("content-type", "text/plain")], repr(exc).encode())
            try:
                await _respond(stream, conn, response)
            except _Disconnected:
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return


async def _respond_error(
    stream: anyio.abc.ByteStream, conn: h11.Connection, status: int, message: str
) -> None:
    with contextlib.suppress(_Disconnected, h11.LocalProtocolError):
        await _respond(stream, conn, Response(status, [("connection", "close")], message.encode()))


async def serve_http(
    handler: Handler,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_non_loopback: bool = False,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` until cancelled; report the bound port through ``task_status``.

    Raises:
        ConfigError: a non-loopback ``host`` without ``allow_non_loopback``.
        OSError: the port is taken.
    """
    check_bind_address(host, allow_non_loopback=allow_non_loopback)
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with listener:
        bound = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started(bound)

        async def handle(stream: anyio.abc.SocketStream) -> None:
            try:
                await _serve_connection(stream, handler)
            except Exception:  # one broken connection must not stop the server
                log.exception("connection_failed")

        await listener.serve(handle)


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
