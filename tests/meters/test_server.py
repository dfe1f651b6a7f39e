"""The meters' HTTP/1.1 server, spoken to over raw sockets: what it accepts and what it refuses."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import anyio.abc
import pytest

from meters import AbortConnection, LastChunk, Request, Response, ServerLimits, serve_http

from ..scenarios.meter_attacks import SLOW_CLIENTS, SlowClient
from ..scenarios.wire_faults import BAD_CHUNK_SIZES

pytestmark = pytest.mark.anyio


async def echo(request: Request) -> Response:
    if request.path == "/stream":

        async def parts() -> AsyncIterator[bytes]:
            yield b"one"
            yield b""
            yield b"two"

        return Response(200, [("content-type", "text/plain")], parts())
    if request.path == "/abort":

        async def broken() -> AsyncIterator[bytes]:
            yield b"partial"
            raise AbortConnection

        return Response(200, [], broken())
    if request.path == "/close":
        return Response(200, [("connection", "close")], b"bye")
    if request.path == "/empty":
        return Response(204, [])
    if request.path == "/big":
        return Response(200, [], b"x" * BIG)
    body = b"%s %s %s %s" % (
        request.method.encode(),
        request.target.encode(),
        (request.header("x-test") or "-").encode(),
        request.body,
    )
    return Response(200, [("content-type", "text/plain")], body)


BIG = 64 * 1024 * 1024


@asynccontextmanager
async def server(limits: ServerLimits | None = None) -> AsyncIterator[int]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(partial(serve_http, echo, limits=limits))
        yield port
        tg.cancel_scope.cancel()


async def exchange(port: int, data: bytes, *, reads: int = 1) -> bytes:
    """Send ``data``, then read until the server closes (or ``reads`` answers came)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        got = b""
        with anyio.move_on_after(2):
            while True:
                try:
                    got += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
                if got.count(b"HTTP/1.1 ") >= reads and _complete(got, reads):
                    break
        return got


def _complete(got: bytes, reads: int) -> bool:
    """Whether ``reads`` answers with a content-length or a last chunk are all in."""
    answers = got.split(b"HTTP/1.1 ")[1:]
    if len(answers) < reads:
        return False
    last = answers[-1]
    head, _, body = last.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return b"\r\n\r\n" in last


async def test_keep_alive_serves_one_request_after_another_on_one_connection() -> None:
    one = b"POST /a?q=1 HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\nContent-Length: 2\r\n\r\nhi"
    two = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
    async with server() as port:
        got = await exchange(port, one + two, reads=2)
    answers = got.split(b"HTTP/1.1 ")[1:]
    assert [a.split(b"\r\n")[0] for a in answers] == [b"200 OK", b"200 OK"]
    assert answers[0].endswith(b"\r\n\r\nPOST /a?q=1 yes hi")
    assert answers[1].endswith(b"\r\n\r\nGET /b - ")


async def test_a_chunked_request_body_and_a_streamed_answer() -> None:
    request = (
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
    )
    async with server() as port:
        got = await exchange(port, request)
        streamed = await exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.endswith(b"POST /c - abcde")
    head, _, body = streamed.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"  # an empty part is not a last chunk


async def test_http_1_0_a_close_request_and_a_close_answer_end_the_connection() -> None:
    async with server() as port:
        old = await exchange(port, b"GET /x HTTP/1.0\r\n\r\nGET /y HTTP/1.0\r\n\r\n", reads=2)
        closing = await exchange(
            port, b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\nGET /y HTTP/1.1\r\n\r\n", reads=2
        )
        handler = await exchange(
            port, b"GET /close HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n", reads=2
        )
    for got in (old, closing, handler):
        assert got.count(b"HTTP/1.1 200") == 1  # the second request was never answered
        assert b"connection: close" in got.lower()


async def test_head_and_204_carry_no_body() -> None:
    async with server() as port:
        head = await exchange(port, b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
        empty = await exchange(port, b"GET /empty HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.endswith(b"\r\n\r\n") and b"content-length: 10" in head.lower()
    assert empty.startswith(b"HTTP/1.1 204 No Content\r\n") and empty.endswith(b"\r\n\r\n")
    assert b"content-length" not in empty.lower()


_CHUNKED = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET /x HTTP/2.0\r\n\r\n", b"400"),
        (b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n", b"400"),
        (b"GET /x HTTP/1.1\r\nna me: v\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nContent-Length: abc\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", b"400"),
        (
            b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"400",
        ),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"501"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", b"413"),
        (b"GET /x HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400"),
        # sizes Python's int(x, 16) takes and another reader does not: smuggling's material
        *[(_CHUNKED + size + b"\r\nabc\r\n", b"400") for size in BAD_CHUNK_SIZES],
    ],
)
async def test_a_malformed_request_gets_its_status_and_the_connection_closes(
    request_bytes: bytes, status: bytes
) -> None:
    async with server() as port:
        got = await exchange(port, request_bytes + b"GET /after HTTP/1.1\r\n\r\n", reads=2)
        assert got.startswith(b"HTTP/1.1 " + status + b" ")
        assert b"connection: close" in got.lower() and b"/after" not in got
        # The server is still serving everyone else.
        assert (await exchange(port, b"GET /ok HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")


async def test_a_client_that_leaves_mid_request_or_an_aborted_stream_costs_nothing() -> None:
    async with server() as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\nshort")
        aborted = await exchange(port, b"GET /abort HTTP/1.1\r\n\r\n")
        assert b"7\r\npartial\r\n" in aborted and not aborted.endswith(b"0\r\n\r\n")
        assert (await exchange(port, b"GET /ok HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")


async def test_a_last_chunk_ends_the_answer_before_the_body_has_finished() -> None:
    """The meter marks a stream's last bytes so the client has the whole answer before
    the meter's accounting (the body's ``finally``) runs; here that ``finally`` waits
    until the client has read the end, which it could not if the end came after it."""
    released = anyio.Event()
    finished = anyio.Event()

    async def handler(request: Request) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            try:
                yield b"one"
                yield LastChunk(b"two")
                yield b"never sent"
            finally:
                with anyio.CancelScope(shield=True):
                    await released.wait()
                finished.set()

        return Response(200, [], parts())

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, handler)
        got = await exchange(port, b"GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
        released.set()
        with anyio.fail_after(5):
            await finished.wait()
        tg.cancel_scope.cancel()
    assert got.partition(b"\r\n\r\n")[2] == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


SHORT = ServerLimits(idle_seconds=0.3, request_seconds=0.3, send_seconds=0.3, max_connections=8)


@pytest.mark.parametrize("case", SLOW_CLIENTS, ids=lambda c: c.name)
async def test_a_slow_client_is_cut_off_and_the_server_goes_on(case: SlowClient) -> None:
    """Slowloris: a connection that idles, or sends its request a byte at a time, is closed."""
    async with server(SHORT) as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            if case.opening:
                await stream.send(case.opening)

            async def drip() -> None:
                for byte in case.drip:
                    await anyio.sleep(0.02)
                    try:
                        await stream.send(bytes([byte]))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        return

            got = b""
            with anyio.fail_after(5):  # the drip alone would take 2-8 s
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drip)
                    while True:
                        try:
                            got += await stream.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
                    tg.cancel_scope.cancel()
        assert got.startswith(case.answer) if case.answer else got == b""
        assert (await exchange(port, b"GET /ok HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")


async def test_a_client_that_reads_nothing_of_its_answer_is_dropped() -> None:
    async with server(dataclasses.replace(SHORT, max_connections=1)) as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /big HTTP/1.1\r\n\r\n")
            # Its one connection is free again once the stalled one is dropped: until then a
            # second is turned away (503). Not a fixed wait: on a busy machine the server may
            # not have begun to send.
            ok = b"GET /ok HTTP/1.1\r\n\r\n"
            while not (await exchange(port, ok)).startswith(b"HTTP/1.1 200"):
                await anyio.sleep(0.1)
            got = 0
            with anyio.fail_after(10):
                while True:
                    try:
                        got += len(await stream.receive())
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
        assert 0 < got < BIG  # what the socket buffers held, then the end


async def test_connections_past_the_bound_are_turned_away_with_503() -> None:
    limits = ServerLimits(max_connections=3)
    async with server(limits) as port:
        held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(3)]
        await anyio.sleep(0.1)  # all three accepted and served
        turned = await exchange(port, b"GET /ok HTTP/1.1\r\n\r\n")
        assert turned.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in turned
        await held.pop().aclose()
        await anyio.sleep(0.1)
        assert (await exchange(port, b"GET /ok HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
        for stream in held:
            await stream.aclose()
