"""The meter's lean HTTP/1.1 transport, against raw servers that answer as scripted."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
import trustme
from anyio.streams.tls import TLSListener

from meters._transport import LeanTransport

pytestmark = pytest.mark.anyio

Answer = Callable[[bytes], bytes | None]  # request bytes -> answer bytes; None: close silently


@asynccontextmanager
async def raw_server(
    answer: Answer, *, close_after: bool = False, tls: ssl.SSLContext | None = None
) -> AsyncIterator[dict[str, Any]]:
    """A TCP server (TLS with ``tls``): reads one request (head + content-length body),
    writes ``answer``."""
    state: dict[str, Any] = {"connections": 0, "requests": []}

    async def handle(stream: anyio.abc.SocketStream) -> None:
        state["connections"] += 1
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    try:
                        buffer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buffer) < length:
                    buffer += await stream.receive()
                request, buffer = head + b"\r\n\r\n" + buffer[:length], buffer[length:]
                state["requests"].append(request)
                reply = answer(request)
                if reply is None:
                    return
                await stream.send(reply)
                if close_after:
                    return

    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener: anyio.abc.Listener[Any] = (
        tcp if tls is None else TLSListener(tcp, tls, standard_compatible=False)
    )
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        state["url"] = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
        yield state
        tg.cancel_scope.cancel()


def fixed(reply: bytes) -> Answer:
    return lambda request: reply


async def get(transport: LeanTransport, url: str, **timeouts: float) -> httpx.Response:
    request = httpx.Request(
        "POST", url + "/v1/x", content=b'{"a": 1}', extensions={"timeout": timeouts}
    )
    response = await transport.handle_async_request(request)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


async def test_a_whole_answer_then_the_connection_is_kept_alive() -> None:
    body = b'{"ok": true}'
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    async with raw_server(fixed(reply % (len(body), body))) as server:
        transport = LeanTransport()
        for _ in range(3):
            response = await get(transport, server["url"])
            assert (response.status_code, response.content) == (200, body)
            assert response.headers["content-type"] == "application/json"
        await transport.aclose()
    assert server["connections"] == 1
    first = server["requests"][0]
    assert first.startswith(b"POST /v1/x HTTP/1.1\r\n") and first.endswith(b'\r\n\r\n{"a": 1}')
    assert b"content-length: 8" in first.lower() and b"host: 127.0.0.1" in first.lower()


async def test_chunked_answers_and_informational_heads_are_read_whole() -> None:
    reply = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with raw_server(fixed(reply)) as server:
        transport = LeanTransport()
        first = await get(transport, server["url"])
        second = await get(transport, server["url"])
        await transport.aclose()
    assert first.content == second.content == b"hello, world"
    assert server["connections"] == 1  # a complete chunked answer keeps the connection


async def test_streamed_chunks_arrive_as_they_are_sent() -> None:
    sent = anyio.Event()

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
            await sent.wait()
            await stream.send(b"3\r\ntwo\r\n0\r\n\r\n")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        transport = LeanTransport()
        request = httpx.Request("POST", f"http://127.0.0.1:{port}/s", content=b"{}")
        response = await transport.handle_async_request(request)
        parts = []
        async for part in response.aiter_raw():
            parts.append(part)
            sent.set()  # the second chunk is sent only after the first was read
        await response.aclose()
        await transport.aclose()
        tg.cancel_scope.cancel()
    assert parts == [b"one", b"two"]


async def test_a_bodys_rest_is_read_by_one_deadline_not_one_per_read() -> None:
    """``finish_by``: the rest of a body read to keep its connection (the meter, after a
    stream's last event). An upstream that trickles a chunk more often than any read's
    timeout is stopped by the whole deadline; a rest already here is read past it."""
    trickled = 0

    async def trickle(stream: anyio.abc.SocketStream) -> None:
        nonlocal trickled
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                while True:
                    await anyio.sleep(0.05)
                    await stream.send(b"1\r\nx\r\n")
                    trickled += 1

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, trickle)
        transport = LeanTransport()
        request = httpx.Request(
            "POST", f"http://127.0.0.1:{port}/s", content=b"{}", extensions={"timeout": {"read": 5}}
        )
        response = await transport.handle_async_request(request)
        parts = aiter(response.stream)
        assert await anext(parts) == b"one"
        response.stream.finish_by(anyio.current_time() + 0.5)  # type: ignore[attr-defined]
        with anyio.fail_after(30), pytest.raises(httpx.ReadTimeout):  # 30 s: a hang guard
            async for _ in parts:
                pass
        await response.aclose()
        await transport.aclose()
        tg.cancel_scope.cancel()
    assert trickled >= 2  # each read was answered within its own timeout

    sent = anyio.Event()

    async def rest_at_once(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            while True:
                await stream.receive()
                await stream.send(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n"
                )
                await stream.send(b"3\r\ntwo\r\n0\r\n\r\n")
                sent.set()

    connections = 0

    async def counted(stream: anyio.abc.SocketStream) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            await rest_at_once(stream)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, counted)
        transport = LeanTransport()
        for _ in range(2):
            sent = anyio.Event()
            request = httpx.Request("POST", f"http://127.0.0.1:{port}/s", content=b"{}")
            response = await transport.handle_async_request(request)
            parts = aiter(response.stream)
            await sent.wait()
            response.stream.finish_by(anyio.current_time() - 1)  # type: ignore[attr-defined]
            assert b"".join([part async for part in parts]) == b"onetwo"
            await response.aclose()
        await transport.aclose()
        tg.cancel_scope.cancel()
    assert connections == 1  # read whole past its deadline: the connection was kept


async def test_an_answer_to_the_close_and_a_connection_close_are_not_reused() -> None:
    async with raw_server(fixed(b"HTTP/1.1 200 OK\r\n\r\nall of it"), close_after=True) as server:
        transport = LeanTransport()
        assert (await get(transport, server["url"])).content == b"all of it"
        assert (await get(transport, server["url"])).content == b"all of it"
        await transport.aclose()
    assert server["connections"] == 2
    reply = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    async with raw_server(fixed(reply), close_after=True) as server:
        transport = LeanTransport()
        assert (await get(transport, server["url"])).status_code == 204
        assert (await get(transport, server["url"])).status_code == 204
        await transport.aclose()
    assert server["connections"] == 2


async def test_an_idle_connection_the_server_closed_is_replaced_before_use() -> None:
    body = b"ok"
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + body
    async with raw_server(fixed(reply), close_after=True) as server:
        transport = LeanTransport()  # keep-alive answers, but the server closes each time
        for _ in range(3):
            assert (await get(transport, server["url"])).content == body
            await anyio.sleep(0.05)  # the close reaches us while the connection is idle
        await transport.aclose()
    assert server["connections"] == 3


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (None, httpx.RemoteProtocolError),  # closed without answering
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", httpx.RemoteProtocolError),
        (b"SMTP ready\r\n\r\n", httpx.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", httpx.RemoteProtocolError),
    ],
)
async def test_a_broken_answer_is_httpxs_protocol_error(reply: bytes | None, error: type) -> None:
    async with raw_server(fixed(reply) if reply else (lambda r: None), close_after=True) as server:
        transport = LeanTransport()
        with pytest.raises(error):
            await get(transport, server["url"])


async def test_nobody_listening_is_a_connect_error_and_silence_a_read_timeout() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    with pytest.raises(httpx.ConnectError):
        await get(LeanTransport(), f"http://127.0.0.1:{port}")

    async with raw_server(lambda request: b"") as server:  # answers nothing, stays open
        with pytest.raises(httpx.ReadTimeout):
            await get(LeanTransport(), server["url"], read=0.2)


async def test_a_pool_reuses_returned_connections_and_never_shares_one() -> None:
    from meters import LeanPool

    body = b"ok"
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + body
    async with raw_server(fixed(reply)) as server:
        client = httpx.AsyncClient(base_url=server["url"], transport=LeanPool())
        async with client:
            for _ in range(3):  # one after another: one connection
                assert (await client.post("/a", content=b"{}")).content == body
            async with anyio.create_task_group() as tg:  # four at once: four connections
                for _ in range(4):
                    tg.start_soon(partial(client.post, "/b", content=b"{}"))
            async with client.stream("POST", "/c", content=b"{}") as streamed:
                async for _ in streamed.aiter_raw():
                    pass
    assert server["connections"] == 4
    assert len(server["requests"]) == 8


async def test_https_answers_keep_alive_and_a_closed_idle_connection_is_replaced() -> None:
    """The TLS path (a wire over anyio's TLS stream), against a server whose certificate
    a throwaway CA signed for 127.0.0.1."""
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n"
    replies = iter([whole, chunked, whole])
    async with raw_server(lambda request: next(replies), tls=server_tls) as server:
        transport = LeanTransport(client_tls)
        assert (await get(transport, server["url"])).content == b"ok"
        assert (await get(transport, server["url"])).content == b"one"
        assert (await get(transport, server["url"])).content == b"ok"
        await transport.aclose()
    assert server["connections"] == 1  # kept alive across all three
    assert server["requests"][0].startswith(b"POST /v1/x HTTP/1.1\r\n")

    async with raw_server(fixed(whole), close_after=True, tls=server_tls) as server:
        transport = LeanTransport(client_tls)
        for _ in range(2):
            assert (await get(transport, server["url"])).content == b"ok"
            await anyio.sleep(0.05)  # the server's close reaches us while idle
        await transport.aclose()
    assert server["connections"] == 2

    # A certificate nobody vouches for: refused before anything is sent.
    async with raw_server(fixed(whole), tls=server_tls) as server:
        with pytest.raises(httpx.ConnectError):
            await get(LeanTransport(ssl.create_default_context()), server["url"])
    assert server["requests"] == []


async def test_a_limited_pool_lends_at_most_its_limit_and_reuses_the_last_returned() -> None:
    from meters import LeanPool

    pool = LeanPool(limit=2)
    first, second = await pool.acquire(), await pool.acquire()
    assert first is not second
    third: list[LeanTransport] = []

    async def borrow() -> None:
        third.append(await pool.acquire())

    async with anyio.create_task_group() as tg:
        tg.start_soon(borrow)
        await anyio.wait_all_tasks_blocked()
        assert third == []  # both are lent: the third waits
        pool.release(second)
    assert third == [second]  # the one just returned, not a new connection
    pool.release(first)
    pool.release(second)
    await pool.aclose()
