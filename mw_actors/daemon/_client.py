"""Talking to a daemon: the control connection and the event subscription."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mw_errors import ConfigError, DaemonError, MwError

from ._protocol import (
    PROTOCOL_VERSION,
    Event,
    Failed,
    Hello,
    Ok,
    Refused,
    Request,
    Welcome,
    read_frame,
    write_frame,
)

__all__ = ["DaemonPaths", "connect", "daemon_running", "subscribe", "unix_address"]

SUN_PATH = 107  # bytes of a unix socket's path the kernel takes (108 with its NUL)


class DaemonPaths:
    """Where a runs directory's daemon keeps its things."""

    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.home = runs / ".mw-daemon"
        self.socket = self.home / "control.sock"
        self.log = self.home / "daemon.log"
        self.registry = self.home / "campaigns"
        self.pid = runs / "mw-daemon.pid"
        self.lock = runs / "mw-daemon.lock"


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """An address that binds or reaches the unix socket at ``path``, however deep it is.

    The kernel takes 107 bytes of a socket's path: a runs directory deep in a tree
    would have a daemon that cannot listen. Such a path is reached through its
    directory's descriptor (``/proc/self/fd/N/control.sock``), open while in use.
    """
    if len(os.fsencode(path)) <= SUN_PATH:
        yield str(path)
        return
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


def daemon_running(runs: Path) -> bool:
    """Whether a daemon answers on ``runs``' control socket."""
    path = DaemonPaths(runs).socket
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe, unix_address(path) as at:
        probe.settimeout(2)
        try:
            probe.connect(at)
        except OSError:
            return False
    return True


class Connection:
    def __init__(self, stream: anyio.abc.ByteStream, pid: int) -> None:
        self.stream = stream
        self.pid = pid

    async def request(self, message: Request) -> Any:
        """Send one request; return its result.

        Raises:
            MwError: the daemon refused it (its code and message kept).
        """
        await write_frame(self.stream, message)
        reply = await read_frame(self.stream)
        if isinstance(reply, Failed):
            error = MwError(reply.message, hint=reply.hint or None)
            error.code = reply.code
            raise error
        assert isinstance(reply, Ok)
        return reply.result


async def _open(runs: Path, role: str, timeout: float) -> tuple[anyio.abc.ByteStream, int]:
    path = DaemonPaths(runs).socket
    try:
        with anyio.fail_after(timeout), unix_address(path) as address:
            stream = await anyio.connect_unix(address)
    except (OSError, TimeoutError):
        raise DaemonError(
            f"no daemon answers on {path}",
            hint=f"start one with `mw daemon start --runs {runs}`",
        ) from None
    await write_frame(stream, Hello(version=PROTOCOL_VERSION, role=role))  # type: ignore[arg-type]
    try:
        with anyio.fail_after(timeout):
            answer = await read_frame(stream)
    except TimeoutError:
        await stream.aclose()
        raise DaemonError(
            f"the daemon on {path} did not answer within {timeout:g} s",
            hint="it may be busy; `mw status` reads the journals without it",
        ) from None
    if isinstance(answer, Refused):
        await stream.aclose()
        raise DaemonError(f"the daemon refused the connection: {answer.reason}")
    if not isinstance(answer, Welcome):
        raise ConfigError("the daemon did not answer the handshake")
    return stream, answer.pid


@asynccontextmanager
async def connect(runs: Path, *, timeout: float = 10.0) -> AsyncIterator[Connection]:
    """A control connection to ``runs``' daemon.

    Raises:
        DaemonError: no daemon answers, or it refused us.
    """
    stream, pid = await _open(runs, "control", timeout)
    async with stream:
        yield Connection(stream, pid)


@asynccontextmanager
async def subscribe(runs: Path, *, timeout: float = 10.0) -> AsyncIterator[AsyncIterator[Event]]:
    """The daemon's events, read-only, as they happen."""
    stream, _ = await _open(runs, "events", timeout)

    async def events() -> AsyncGenerator[Event, None]:
        while True:
            try:
                event = await read_frame(stream)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            yield event

    feed = events()
    async with stream, contextlib.aclosing(feed):  # closed even if the reader stops early
        yield feed
