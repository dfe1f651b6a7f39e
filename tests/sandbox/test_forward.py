"""A sandbox's one way out: a loopback port inside that reaches one host address."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

import sandbox
from sandbox import Forward, Limits, SandboxConfig, open_sandbox

pytestmark = pytest.mark.anyio

CLIENT = """
import socket, sys
port = int(sys.argv[1])
for word in (b"ping", b"again"):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(word)
        s.shutdown(socket.SHUT_WR)
        print(s.recv(100).decode())
"""

REACH = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    print("reached")
except OSError as exc:
    print("refused", type(exc).__name__)
try:
    socket.socket(socket.AF_UNIX)
    print("unix allowed")
except OSError:
    print("unix refused")
"""


def backends() -> list[str]:
    return ["bwrap", "local-trusted"] if sandbox.find_bwrap() else ["local-trusted"]


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A host TCP server answering ``<what it read>-pong``; yields its port and what it read."""
    seen: list[bytes] = []

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            data = b""
            try:
                while chunk := await stream.receive():
                    data += chunk
            except anyio.EndOfStream:
                pass
            seen.append(data)
            await stream.send(data + b"-pong")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield listener.extra(anyio.abc.SocketAttribute.local_port), seen
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("backend", backends())
async def test_the_forwarded_port_reaches_its_host_address(backend: str, tmp_path: Path) -> None:
    async with echo_server() as (port, seen):
        config = SandboxConfig(scratch=str(tmp_path / "box"), limits=Limits(wall_seconds=60))
        async with open_sandbox(backend, config) as box:
            result = await box.exec(
                [sys.executable, "-c", CLIENT, "{forward_port}"],
                forward=Forward("127.0.0.1", port),
            )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["ping-pong", "again-pong"]
    assert seen == [b"ping", b"again"]


async def test_inside_bwrap_only_the_forward_reaches_out(tmp_path: Path) -> None:
    if sandbox.find_bwrap() is None:
        pytest.skip("bubblewrap is not installed here")
    async with echo_server() as (port, _), echo_server() as (other, _):
        config = SandboxConfig(scratch=str(tmp_path / "box"), limits=Limits(wall_seconds=60))
        async with open_sandbox("bwrap", config) as box:
            direct = await box.exec(
                [sys.executable, "-c", REACH, str(other)], forward=Forward("127.0.0.1", port)
            )
            relayed = await box.exec(
                [sys.executable, "-c", REACH, "{forward_port}"], forward=Forward("127.0.0.1", port)
            )
    # The host's other server is not reachable: the sandbox has its own network namespace.
    assert direct.stdout.splitlines() == ["refused ConnectionRefusedError", "unix refused"]
    # The forward works, and the seccomp filter still refuses the program a Unix socket.
    assert relayed.stdout.splitlines()[0] == "reached"
    if "seccomp" in sandbox.BwrapSandbox(config).layers:
        assert relayed.stdout.splitlines()[1] == "unix refused"


@pytest.mark.parametrize("backend", backends())
async def test_a_forward_to_a_closed_port_closes_the_client_and_the_program_goes_on(
    backend: str, tmp_path: Path
) -> None:
    async with echo_server() as (port, _):
        pass  # now closed
    config = SandboxConfig(scratch=str(tmp_path / "box"), limits=Limits(wall_seconds=60))
    code = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)\n"
        "print(repr(s.recv(10)))\n"
    )
    async with open_sandbox(backend, config) as box:
        result = await box.exec(
            [sys.executable, "-c", code, "{forward_port}"], forward=Forward("127.0.0.1", port)
        )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() in ("b''", "")


async def test_an_error_inside_the_forward_comes_out_as_itself() -> None:
    from sandbox._forward import forwarding

    with pytest.raises(sandbox.SandboxUnavailable):  # not an exception group
        async with forwarding(Forward("127.0.0.1", 9), sys.executable):
            raise sandbox.SandboxUnavailable("bubblewrap could not start the program")
