"""A lean httpx transport: HTTP/1.1 to one origin over one keep-alive connection.

The meter lends each upstream request a transport of its own (see
:class:`LeanPool`), so a transport never needs a pool, HTTP/2 or proxies. httpx's
default transport (httpcore over h11) costs about 0.4 ms per request on
loopback, more than the whole round trip of the bytes; this one writes the
request in one send and parses the answer's head and body itself, off a
:class:`~meters._wire.Wire` (a plain socket driven directly; TLS through anyio).

It speaks httpx's transport interface: :class:`httpx.Request` in,
:class:`httpx.Response` out, with the body streamed, and it raises httpx's
exceptions (``ConnectError`` when nothing reached the upstream; ``ReadTimeout``,
``RemoteProtocolError``, ... once it may have). Timeouts come from the
request's ``timeout`` extension. A connection is kept for the next request only
after a complete answer that did not ask to close; an idle connection that the
upstream closed is noticed before it is used again.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterator

import anyio
import certifi
import httpx

from ._wire import StreamWire, Wire, WireBroken, chunk_size, connect

__all__ = ["Body", "LeanPool", "LeanTransport"]

_MAX_HEAD = 256 * 1024
_NO_BODY = {204, 304}


class _Connection:
    """One upstream connection: its wire, its origin, and whether it may be kept."""

    def __init__(self, wire: Wire, origin: tuple[str, str, int]) -> None:
        self.wire = wire
        self.buffer = wire.buffer  # the same bytearray, always changed in place
        self.origin = origin
        self.reusable = False

    def stale(self) -> bool:
        """True if the upstream closed the idle connection (or sent unasked bytes)."""
        return self.wire.stale()

    async def receive(self, timeout: float | None, request: httpx.Request) -> bool:
        """Read more into the buffer; False at the end of the stream."""
        try:
            return await self.wire.fill(timeout)
        except TimeoutError:
            raise httpx.ReadTimeout("the upstream sent nothing in time", request=request) from None
        except WireBroken as exc:
            raise httpx.ReadError(str(exc), request=request) from None

    async def aclose(self) -> None:
        await self.wire.aclose()


class Body(httpx.AsyncByteStream):
    """A response body read off the connection: by length, chunked, or to the close."""

    def __init__(
        self,
        transport: LeanTransport,
        connection: _Connection,
        request: httpx.Request,
        length: int | None,
        chunked: bool,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._connection = connection
        self._request = request
        self._length = length
        self._chunked = chunked
        self._timeout = timeout
        self._complete = not chunked and length == 0  # nothing to read
        self._deadline: float | None = None

    def finish_by(self, deadline: float) -> None:
        """Bound the reads left by ``deadline`` (anyio's clock): past it, ``httpx.ReadTimeout``.

        For the rest of a body read only to keep its connection: a whole deadline, not
        one per read (an upstream that trickles a byte a second would pass every read's),
        without a cancel scope per request (the rest is most often buffered already).
        """
        self._deadline = deadline

    def _wait(self) -> float | None:
        """How long the next read may wait."""
        if self._deadline is None:
            return self._timeout
        left = max(0.0, self._deadline - anyio.current_time())
        return left if self._timeout is None else min(left, self._timeout)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._chunked:
            parts = self._read_chunked()
        elif self._length is not None:
            parts = self._read_length(self._length)
        else:
            parts = self._read_to_close()
        async with contextlib.aclosing(parts):  # a body left half-read is closed, not collected
            async for part in parts:
                yield part
        self._complete = True

    async def _read_length(self, remaining: int) -> AsyncGenerator[bytes, None]:
        connection = self._connection
        while remaining:
            if not connection.buffer and not await connection.receive(self._wait(), self._request):
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body",
                    request=self._request,
                )
            part = bytes(connection.buffer[:remaining])
            del connection.buffer[:remaining]
            remaining -= len(part)
            yield part

    async def _line(self) -> bytes:
        connection = self._connection
        while (end := connection.buffer.find(b"\r\n")) < 0:
            if len(connection.buffer) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("chunk size line too long", request=self._request)
            if not await connection.receive(self._wait(), self._request):
                raise httpx.RemoteProtocolError(
                    "peer closed connection in a chunked body", request=self._request
                )
        line = bytes(connection.buffer[:end])
        del connection.buffer[: end + 2]
        return line

    def _take_chunk(self) -> bytes | None:
        """The next whole chunk's data from the buffer (b"" for the last one), or None."""
        buffer = self._connection.buffer
        end = buffer.find(b"\r\n")
        if end < 0:
            if len(buffer) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("chunk size line too long", request=self._request)
            return None
        line = bytes(buffer[:end])
        try:
            size = chunk_size(line)
        except ValueError:
            raise httpx.RemoteProtocolError(
                f"bad chunk size line {line[:40]!r}", request=self._request
            ) from None
        if size == 0:
            del buffer[: end + 2]
            return b""
        start, stop = end + 2, end + 2 + size
        if len(buffer) < stop + 2:
            return None
        if buffer[stop : stop + 2] != b"\r\n":
            raise httpx.RemoteProtocolError("chunk not followed by CRLF", request=self._request)
        data = bytes(buffer[start:stop])
        del buffer[: stop + 2]
        return data

    async def _read_chunked(self) -> AsyncGenerator[bytes, None]:
        """Chunks as they arrive; those that arrived together are handed on together."""
        while True:
            parts: list[bytes] = []
            last = False
            while (data := self._take_chunk()) is not None:
                if not data:
                    last = True
                    break
                parts.append(data)
            if parts:
                yield b"".join(parts)
            if last:
                while await self._line():  # trailers, up to the empty line
                    pass
                return
            if not parts and not await self._connection.receive(self._wait(), self._request):
                raise httpx.RemoteProtocolError(
                    "peer closed connection in a chunked body", request=self._request
                )

    async def _read_to_close(self) -> AsyncGenerator[bytes, None]:
        connection = self._connection
        connection.reusable = False
        while True:
            if connection.buffer:
                part = bytes(connection.buffer)
                connection.buffer.clear()
                yield part
            if not await connection.receive(self._wait(), self._request):
                return

    async def aclose(self) -> None:
        await self._transport._finished(self._connection, complete=self._complete)


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1, one connection at a time, kept alive between complete answers."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._idle: _Connection | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"no {scheme!r} here", request=request)
        origin = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        connection = self._idle
        self._idle = None
        if connection is not None and (connection.origin != origin or connection.stale()):
            await connection.aclose()
            connection = None
        if connection is None:
            connection = await self._connect(origin, timeouts.get("connect"), request)
        try:
            if isinstance(request.stream, httpx.ByteStream):
                body = b"".join(request.stream)  # in memory already: one part
            else:
                body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
            head = [request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n"]
            for name, value in request.headers.raw:
                head += [name, b": ", value, b"\r\n"]
            head.append(b"\r\n")
            try:
                await connection.wire.send(b"".join(head) + body, timeouts.get("write"))
            except TimeoutError:
                raise httpx.WriteTimeout("writing the request timed out", request=request) from None
            except WireBroken as exc:
                raise httpx.WriteError(str(exc), request=request) from None
            return await self._response(connection, request, timeouts.get("read"))
        except BaseException:
            await connection.aclose()
            raise

    async def _connect(
        self, origin: tuple[str, str, int], timeout: float | None, request: httpx.Request
    ) -> _Connection:
        scheme, host, port = origin
        try:
            if scheme == "https":
                if self._tls is None:
                    self._tls = ssl.create_default_context()
                with anyio.fail_after(timeout):
                    stream = await anyio.connect_tcp(
                        host, port, ssl_context=self._tls, tls_hostname=host
                    )
                wire: Wire = StreamWire(stream)
            else:
                wire = await connect(host, port, timeout)
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {host}:{port} timed out", request=request
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        return _Connection(wire, origin)

    async def _response(
        self, connection: _Connection, request: httpx.Request, timeout: float | None
    ) -> httpx.Response:
        while True:  # skip 1xx informational answers
            while (end := connection.buffer.find(b"\r\n\r\n")) < 0:
                if len(connection.buffer) > _MAX_HEAD:
                    raise httpx.RemoteProtocolError("response head too large", request=request)
                if not await connection.receive(timeout, request):
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    )
            lines = bytes(connection.buffer[:end]).split(b"\r\n")
            del connection.buffer[: end + 4]
            try:
                version, code, *reason = lines[0].split(b" ", 2)
                status = int(code)
                if not version.startswith(b"HTTP/1."):
                    raise ValueError
            except ValueError:
                raise httpx.RemoteProtocolError(
                    f"bad status line {lines[0][:60]!r}", request=request
                ) from None
            if not 100 <= status < 200:
                break
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        close = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise httpx.RemoteProtocolError(f"bad header {line[:60]!r}", request=request)
            name, value = name.strip(), value.strip()
            headers.append((name, value))
            lowered = name.lower()
            if lowered == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise httpx.RemoteProtocolError("bad content-length", request=request) from None
            elif lowered == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lowered == b"connection":
                close = b"close" in value.lower() or (
                    version == b"HTTP/1.0" and b"keep-alive" not in value.lower()
                )
        if request.method == "HEAD" or status in _NO_BODY:
            length, chunked = 0, False
        connection.reusable = not close
        body = Body(self, connection, request, None if chunked else length, chunked, timeout)
        return httpx.Response(
            status,
            headers=headers,
            stream=body,
            request=request,
            extensions={"http_version": version, "reason_phrase": b"".join(reason)},
        )

    async def _finished(self, connection: _Connection, *, complete: bool) -> None:
        """A response was closed: keep its connection if the answer was whole and reusable."""
        if complete and connection.reusable and not connection.buffer and self._idle is None:
            self._idle = connection
        else:
            await connection.aclose()

    async def aclose(self) -> None:
        if self._idle is not None:
            await self._idle.aclose()
            self._idle = None


class _Returned(httpx.AsyncByteStream):
    """A response body that gives its transport back to the pool once closed."""

    def __init__(self, body: httpx.AsyncByteStream, pool: LeanPool, lent: LeanTransport) -> None:
        self._body = body
        self._pool = pool
        self._lent: LeanTransport | None = lent

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._body:
            yield part

    async def aclose(self) -> None:
        try:
            await self._body.aclose()
        finally:
            if self._lent is not None:
                self._pool.release(self._lent)
                self._lent = None


class LeanPool(httpx.AsyncBaseTransport):
    """Keep-alive connections, each a :class:`LeanTransport`, lent to one request at a time.

    A pool is lent two ways. As an :class:`httpx.AsyncClient`'s transport, each
    request borrows a transport until its response is closed (the campaign's
    acting loop to its meter). By hand, :meth:`acquire` lends one until
    :meth:`release` (the meter keeps one per upstream attempt until the answer is
    read and settled). The free list is last-in first-out, so the warmest
    connection is reused first; at most ``limit`` are lent at once (None: no
    limit). Unlike httpcore's pool, nothing walks the other connections on each
    request: that walk grows with the connections held, and was the meter's
    largest cost under 32 concurrent clients. One TLS context serves every
    transport (loading the CAs is slow); it is made on first use.
    """

    def __init__(self, tls: ssl.SSLContext | None = None, *, limit: int | None = None) -> None:
        self._tls = tls
        self._limit = limit
        self._slots: anyio.Semaphore | None = None  # made on first use, inside the event loop
        self._free: list[LeanTransport] = []
        self._made: list[LeanTransport] = []

    async def acquire(self) -> LeanTransport:
        """A transport of the pool's, lent until :meth:`release`."""
        if self._limit is not None:
            if self._slots is None:
                self._slots = anyio.Semaphore(self._limit)
            try:
                self._slots.acquire_nowait()  # no trip through the event loop while slots are free
            except anyio.WouldBlock:
                await self._slots.acquire()
        if self._free:
            return self._free.pop()
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=certifi.where())
        transport = LeanTransport(self._tls)
        self._made.append(transport)
        return transport

    def release(self, transport: LeanTransport) -> None:
        self._free.append(transport)
        if self._slots is not None:
            self._slots.release()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lent = await self.acquire()
        try:
            response = await lent.handle_async_request(request)
        except BaseException:
            self.release(lent)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Returned(response.stream, self, lent)
        return response

    async def aclose(self) -> None:
        for transport in self._made:
            await transport.aclose()
