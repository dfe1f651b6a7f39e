"""The buffered wire under the meters' server and transport: reads, waits, timeouts, closing.

Real TCP on loopback, on both backends: on asyncio a socket stays registered
with the loop between waits (``_LoopReadiness``), on trio the waits are anyio's.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from meters._wire import SocketWire, WireBroken, connect, listen

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[SocketWire, SocketWire]]:
    """Two ends of one loopback TCP connection, made with the wire's own listen and connect."""
    [listener] = listen("127.0.0.1", 0)
    client = await connect("127.0.0.1", listener.port, timeout=5)
    server = await listener.accept()
    try:
        yield client, server
    finally:
        client.close()
        server.close()
        listener.close()


async def test_heads_lines_and_exact_lengths_then_the_end() -> None:
    async with tcp_pair() as (client, server):
        await client.send(b"POST / HTTP/1.1\r\nA: b\r\n\r\n3\r\nabc\r\n")
        end = await server.until(b"\r\n\r\n", 1024)
        assert end is not None and bytes(server.buffer[:end]) == b"POST / HTTP/1.1\r\nA: b"
        del server.buffer[: end + 4]
        assert await server.line(16) == b"3"
        assert await server.exactly(3) == b"abc"
        assert await server.line(16) == b""
        client.close()
        assert await server.fill(5) is False  # the end of the stream
        assert await server.line(16) is None


async def test_a_separator_past_its_limit_is_oversized() -> None:
    from meters._wire import Oversized

    async with tcp_pair() as (client, server):
        await client.send(b"x" * 100)
        with pytest.raises(Oversized):
            await server.until(b"\r\n", 50, timeout=5)


async def test_a_wait_past_its_timeout_raises_and_the_wire_still_reads() -> None:
    async with tcp_pair() as (client, server):
        for _ in range(2):  # the second wait reuses what the first left registered
            with pytest.raises(TimeoutError):
                await server.fill(0.05)
        await client.send(b"late")
        assert await server.fill(5) is True
        assert bytes(server.buffer) == b"late"


async def test_a_wait_keeps_its_own_deadline_whatever_timer_an_earlier_one_left(
    anyio_backend: str,
) -> None:
    """On asyncio one timer serves a socket's waits: a wait after a longer one times out at
    its own deadline; a timer that fires before the waiting wait's deadline sets itself
    again, and the wait goes on."""
    async with tcp_pair() as (client, server):
        readiness = server._readable  # type: ignore[attr-defined]
        got: list[bool] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _fill_into(server, got))  # it waits: a timer for +600 s
            with anyio.fail_after(30):
                while anyio_backend == "asyncio" and readiness.waiter is None:
                    await anyio.sleep(0.001)
            await client.send(b"x")
        assert got == [True]
        if anyio_backend == "asyncio":
            assert readiness.timer is not None  # left for the next wait
        with anyio.fail_after(30), pytest.raises(TimeoutError):  # 30 s: a hang guard
            await server.fill(0.05)
        if anyio_backend != "asyncio":
            return
        got.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _fill_into(server, got))
            with anyio.fail_after(30):
                while readiness.waiter is None:
                    await anyio.sleep(0.001)
            readiness.timer.cancel()
            readiness._expire()  # as a timer left by an earlier, shorter wait fires
            assert readiness.timer is not None and not readiness.waiter.done()
            await client.send(b"y")
        assert got == [True] and bytes(server.buffer).endswith(b"y")


async def _fill_into(wire: SocketWire, into: list[bool]) -> None:
    into.append(await wire.fill(600))


async def test_a_cancelled_wait_leaves_the_wire_usable() -> None:
    async with tcp_pair() as (client, server):
        with anyio.move_on_after(0.05) as scope:
            await server.fill()
        assert scope.cancelled_caught
        await client.send(b"after")
        assert await server.fill(5) is True
        assert bytes(server.buffer) == b"after"


async def test_bytes_that_come_while_nobody_waits_are_read_at_once(anyio_backend: str) -> None:
    async with tcp_pair() as (client, server):
        with pytest.raises(TimeoutError):
            await server.fill(0.01)  # registered with the loop (on asyncio) and left so
        await client.send(b"unwatched")
        await anyio.sleep(0.05)  # the loop sees the bytes with nobody waiting
        if anyio_backend == "asyncio":
            # It stops watching rather than firing on every turn until someone reads.
            assert server._readable.registered is False  # type: ignore[attr-defined]
        with anyio.fail_after(1):
            assert await server.fill() is True
        assert bytes(server.buffer) == b"unwatched"


async def test_closing_a_wire_wakes_the_task_waiting_on_it() -> None:
    async with tcp_pair() as (_, server):
        failures: list[BaseException] = []

        async def reader() -> None:
            try:
                await server.fill()
            except WireBroken as exc:
                failures.append(exc)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await anyio.sleep(0.05)
                server.close()
        assert len(failures) == 1
        with pytest.raises(WireBroken):
            await server.fill()


async def test_a_reset_connection_is_broken() -> None:
    async with tcp_pair() as (client, server):
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # an RST, not a FIN
        with anyio.fail_after(5), pytest.raises(WireBroken):
            while await server.fill():
                pass


async def test_a_send_bigger_than_the_socket_buffers_waits_for_the_reader() -> None:
    payload = bytes(range(256)) * (32 * 1024)  # 8 MiB
    async with tcp_pair() as (client, server):
        received = bytearray()

        async def reader() -> None:
            while len(received) < len(payload):
                await anyio.sleep(0.001)  # a slow reader: the sender must wait for it
                assert await server.fill(5)
                received.extend(server.buffer)
                server.buffer.clear()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await client.send(payload, timeout=10)
        assert received == payload


async def test_a_send_nobody_reads_times_out() -> None:
    async with tcp_pair() as (client, _):
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            await client.send(b"x" * (64 * 1024 * 1024), timeout=0.2)


async def test_an_idle_connection_is_stale_once_the_peer_speaks_or_leaves() -> None:
    async with tcp_pair() as (client, server):
        assert not client.stale()
        await server.send(b"unasked")
        await anyio.sleep(0.05)
        assert client.stale()
    async with tcp_pair() as (client, server):
        server.close()
        await anyio.sleep(0.05)
        assert client.stale()


async def test_connect_resolves_names_and_reports_a_refusal() -> None:
    [listener] = listen("127.0.0.1", 0)
    try:
        wire = await connect("localhost", listener.port, timeout=5)  # through getaddrinfo
        wire.close()
        port = listener.port
    finally:
        listener.close()
    with pytest.raises(ConnectionRefusedError):
        await connect("127.0.0.1", port, timeout=5)  # nobody listens there now


async def test_listen_puts_every_address_of_a_name_on_one_port() -> None:
    listeners = listen("localhost", 0)
    try:
        ports = {listener.port for listener in listeners}
        assert len(ports) == 1
        wire = await connect("127.0.0.1", ports.pop(), timeout=5)
        wire.close()
    finally:
        for listener in listeners:
            listener.close()
