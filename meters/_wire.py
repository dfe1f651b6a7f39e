"""Bytes on one connection: the buffered reader and writer under the meters' HTTP/1.1.

The server (``_server.py``) and the upstream transport (``_transport.py``)
both read heads, lines and exact lengths from a :class:`Wire` and write whole
messages to it. A plain TCP connection is a :class:`SocketWire`: a
non-blocking socket driven directly, so a read or write that can proceed at
once is one system call and no trip through the event loop; only a wait
involves the loop. On asyncio a socket stays registered with the loop between
waits and a timeout is a loop timer (``_LoopReadiness``); elsewhere (trio) the
waits are anyio's ``wait_readable`` / ``wait_writable``. anyio's socket
streams cost a checkpoint per send, an ``epoll_ctl`` pair per receive and a
cancel scope per timeout, which together were a third of the meter's CPU per
request. A TLS connection is a :class:`StreamWire` over anyio's TLS stream,
the same interface.

Errors: the end of the stream is ``False`` from :meth:`Wire.fill` (or ``None``
from the helpers); a broken connection raises :class:`WireBroken`; a wait past
its timeout, or a helper past the wire's ``deadline``, raises ``TimeoutError``;
a separator that does not come within its limit raises :class:`Oversized`.
Callers translate these into their own vocabulary (a 400 for the server,
httpx's errors for the transport).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import errno
import ipaddress
import select
import socket
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

__all__ = [
    "Listener",
    "Oversized",
    "SocketWire",
    "StreamWire",
    "Wire",
    "WireBroken",
    "chunk_size",
    "connect",
    "listen",
]

_READ_SIZE = 256 * 1024


class WireBroken(Exception):
    """The connection broke (reset, closed under us, or an error from the socket)."""


class Oversized(Exception):
    """A separator did not come within the limit the caller set."""


class Wire(abc.ABC):
    """A byte connection with a read buffer. Subclasses fill it and send."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        # A time (anyio's clock) by which the helpers below must be done, else TimeoutError:
        # the server sets it while it reads a request, so a slow sender cannot hold it.
        self.deadline: float | None = None

    def _wait_for(self, timeout: float | None) -> float | None:
        """The wait a helper may take now: ``timeout``, cut to what the deadline leaves."""
        if self.deadline is None:
            return timeout
        left = self.deadline - anyio.current_time()
        if left <= 0:
            raise TimeoutError("past the deadline")
        return left if timeout is None else min(timeout, left)

    @abc.abstractmethod
    async def fill(self, timeout: float | None = None) -> bool:
        """Read what has arrived (waiting up to ``timeout``) into the buffer; False at the end."""

    @abc.abstractmethod
    async def send(self, data: bytes, timeout: float | None = None) -> None:
        """Write all of ``data``, waiting up to ``timeout`` while the peer's window is full."""

    @abc.abstractmethod
    def stale(self) -> bool:
        """True if the idle connection has ended, or has bytes nobody asked for."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the connection (a task waiting on it gets :class:`WireBroken`)."""

    # -- parsing helpers over the buffer ------------------------------------------------

    async def until(self, separator: bytes, limit: int, timeout: float | None = None) -> int | None:
        """The index of ``separator`` in the buffer, reading as needed; None if the stream ends.

        Raises:
            Oversized: ``limit`` bytes are buffered without the separator.
        """
        start = 0
        while (end := self.buffer.find(separator, start)) < 0:
            if len(self.buffer) > limit:
                raise Oversized(f"no {separator!r} within {limit} bytes")
            start = max(0, len(self.buffer) - len(separator) + 1)
            if not await self.fill(self._wait_for(timeout)):
                return None
        if end > limit:
            raise Oversized(f"no {separator!r} within {limit} bytes")
        return end

    async def line(self, limit: int, timeout: float | None = None) -> bytes | None:
        """The next CRLF-ended line, without its CRLF; None if the stream ends first."""
        end = await self.until(b"\r\n", limit, timeout)
        if end is None:
            return None
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    async def exactly(self, count: int, timeout: float | None = None) -> bytes | None:
        """The next ``count`` bytes; None if the stream ends first."""
        while len(self.buffer) < count:
            if not await self.fill(self._wait_for(timeout)):
                return None
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data


async def _wait(
    waiter: Callable[[socket.socket], Awaitable[None]], sock: socket.socket, timeout: float | None
) -> None:
    if timeout is None:
        await waiter(sock)
    else:
        with anyio.fail_after(timeout):
            await waiter(sock)


class _Readiness:
    """Waits for a socket to become readable: anyio's wait, a scope for the timeout."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def wait(self, timeout: float | None) -> None:
        await _wait(anyio.wait_readable, self.sock, timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            anyio.notify_closing(self.sock)


class _LoopReadiness(_Readiness):
    """On asyncio: the socket stays registered with the loop from one wait to the next.

    anyio's wait registers and unregisters the descriptor on every wait (two
    ``epoll_ctl`` calls and the selector's bookkeeping) and opens a cancel scope
    for a timeout. Here the reader stays registered while waits follow each
    other, and comes off only when it fires with nobody waiting (so a
    level-triggered readiness never spins). A timeout is one loop timer kept
    across waits: a wait moves the deadline on, and the timer, when it fires
    before the deadline, sets itself again for it (a streamed answer waits once
    a chunk; a timer made and cancelled each time cost more than its read). An
    anyio cancel scope still cancels the wait: it is a plain future of the task.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(sock)
        self.loop = loop
        self.fd = sock.fileno()
        self.waiter: asyncio.Future[None] | None = None
        self.registered = False
        self.deadline: float | None = None  # the waiting wait's, on the loop's clock
        self.timer: asyncio.TimerHandle | None = None

    async def wait(self, timeout: float | None) -> None:
        if self.waiter is not None:
            raise anyio.BusyResourceError("reading from")
        loop = self.loop
        waiter = self.waiter = loop.create_future()
        if not self.registered:
            loop.add_reader(self.fd, self._ready)
            self.registered = True
        if timeout is None:
            self.deadline = None
        else:
            deadline = self.deadline = loop.time() + timeout
            timer = self.timer
            if timer is None or deadline < timer.when():  # else it sets itself again
                if timer is not None:
                    timer.cancel()
                self.timer = loop.call_at(deadline, self._expire)
        try:
            await waiter
        finally:
            self.waiter = None

    def _expire(self) -> None:
        self.timer = None
        waiter, deadline = self.waiter, self.deadline
        if waiter is None or waiter.done() or deadline is None:
            return  # nobody waits on time now: the next wait sets a timer
        if self.loop.time() >= deadline:
            waiter.set_exception(TimeoutError())
        else:  # this wait began after the timer was set: its own deadline is later
            self.timer = self.loop.call_at(deadline, self._expire)

    def _ready(self) -> None:
        waiter = self.waiter
        if waiter is None:
            self.loop.remove_reader(self.fd)
            self.registered = False
        elif not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self.registered:
            self.loop.remove_reader(self.fd)
            self.registered = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(anyio.ClosedResourceError())


def _readiness(sock: socket.socket) -> _Readiness:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio)
        return _Readiness(sock)
    return _LoopReadiness(sock, loop)


async def _until_ready(wait: Awaitable[None]) -> None:
    """Await a readiness wait; the socket closed under it is a broken wire.

    (Once closed, the socket itself refuses every read and write: ``EBADF``.)
    """
    try:
        await wait
    except anyio.ClosedResourceError:
        raise WireBroken("the connection was closed") from None


class SocketWire(Wire):
    """A plain TCP connection on a non-blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._readable = _readiness(sock)
        self._closed = False

    async def fill(self, timeout: float | None = None) -> bool:
        while True:
            try:
                data = self.sock.recv(_READ_SIZE)
            except BlockingIOError:
                await _until_ready(self._readable.wait(timeout))
                continue
            except OSError as exc:
                raise WireBroken(exc.strerror or type(exc).__name__) from None
            if not data:
                return False
            self.buffer += data
            return True

    async def send(self, data: bytes, timeout: float | None = None) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                await _until_ready(_wait(anyio.wait_writable, self.sock, timeout))
                continue
            except OSError as exc:
                raise WireBroken(exc.strerror or type(exc).__name__) from None
            view = view[sent:]

    def stale(self) -> bool:
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # the end (b"") or unasked bytes
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._readable.close()
            with contextlib.suppress(Exception):
                anyio.notify_closing(self.sock)  # a writer waiting in anyio's wait
            self.sock.close()


class StreamWire(Wire):
    """A connection through an anyio byte stream (TLS)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        super().__init__()
        self.stream = stream
        # Asked once: each ``extra`` builds the stream's attributes anew (a getpeername).
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self._fileno = sock.fileno() if sock is not None else None

    async def fill(self, timeout: float | None = None) -> bool:
        try:
            with anyio.fail_after(timeout):
                data = await self.stream.receive()
        except anyio.EndOfStream:
            return False
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise WireBroken(str(exc) or type(exc).__name__) from None
        self.buffer += data
        return True

    async def send(self, data: bytes, timeout: float | None = None) -> None:
        try:
            with anyio.fail_after(timeout):
                await self.stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise WireBroken(str(exc) or type(exc).__name__) from None

    def stale(self) -> bool:
        if self._fileno is None:
            return False
        poller = select.poll()
        poller.register(self._fileno, select.POLLIN)
        return bool(poller.poll(0))

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await anyio.aclose_forcefully(self.stream)


async def connect(host: str, port: int, timeout: float | None = None) -> SocketWire:
    """A plain TCP connection to ``host:port``, each resolved address tried in turn.

    Raises:
        OSError: no address took the connection.
        TimeoutError: not connected within ``timeout``.
    """
    with anyio.fail_after(timeout):
        try:
            ipaddress.ip_address(host)
            addresses = [(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))]
        except ValueError:
            found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            addresses = [(family, address[:2]) for family, _, _, _, address in found]
        error: OSError | None = None
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                try:
                    sock.connect(address)
                except BlockingIOError:
                    await anyio.wait_writable(sock)
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        raise OSError(code, f"{errno.errorcode.get(code, code)} connecting to "
                                            f"{address[0]}:{address[1]}") from None  # fmt: skip
            except BaseException as exc:
                sock.close()
                if not isinstance(exc, OSError):
                    raise
                error = exc
                continue
            return SocketWire(sock)
        raise error or OSError(f"{host} has no address")


def listen(host: str, port: int, backlog: int = 1024) -> list[Listener]:
    """Listeners on every address of ``host``, all on one port (call it in the event loop).

    Raises:
        OSError: the port is taken, or the address cannot be bound.
    """
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, _, _, _, address in found:
            if (family, str(address[0])) in seen:
                continue
            seen.add((family, str(address[0])))
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the first one's port
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return [Listener(sock) for sock in sockets]


class Listener:
    """A listening socket that hands out :class:`SocketWire` connections."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._readable = _readiness(sock)

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port

    async def accept(self) -> SocketWire:
        """The next connection (waiting for one)."""
        while True:
            try:
                sock, _ = self.sock.accept()
            except BlockingIOError:
                await self._readable.wait(None)
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await anyio.sleep(0.1)  # out of descriptors: let connections finish
                    continue
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                raise
            return SocketWire(sock)

    def close(self) -> None:
        self._readable.close()
        self.sock.close()


_HEX = frozenset(b"0123456789abcdefABCDEF")


def chunk_size(line: bytes) -> int:
    """A chunk-size line's size: 1 to 16 hex digits, then an optional ``;`` extension.

    Python's ``int(x, 16)`` also takes ``-1``, ``0x10``, ``1_0`` and surrounding
    spaces, which another HTTP reader takes differently (request smuggling).

    Raises:
        ValueError: anything else.
    """
    size = line.split(b";", 1)[0].rstrip(b" \t")
    if not 1 <= len(size) <= 16 or not _HEX.issuperset(size):
        raise ValueError(f"bad chunk size {line[:40]!r}")
    return int(size, 16)
