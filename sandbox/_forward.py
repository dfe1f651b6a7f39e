"""One way out of a sandbox: a loopback port inside that reaches one host address.

``exec(..., forward=Forward(host, port))`` wraps the program in the relay
(:mod:`._relay`) and passes it one end of a socket pair. The host end answers
each request with a socket connected to ``host:port`` and nothing else, so the
sandbox keeps its own network namespace (no route out) and its seccomp filter
(no Unix sockets of its own). A learner session uses it to reach its wire meter.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import structlog

__all__ = ["Forward", "forwarding"]

log = structlog.get_logger("mw.sandbox")
RELAY = Path(__file__).with_name("_relay.py").read_text()


class Forward(msgspec.Struct, frozen=True):
    """TCP connections to ``127.0.0.1:{forward_port}`` inside reach ``host:port`` outside."""

    host: str
    port: int


async def _connect_each(control: socket.socket, forward: Forward) -> None:
    """Answer each request byte with a socket connected to the forward's destination."""
    while True:
        await anyio.wait_readable(control)
        try:
            asked = control.recv(64)
        except BlockingIOError:
            continue
        if not asked:
            return
        for _ in asked:
            try:
                upstream = await anyio.to_thread.run_sync(
                    socket.create_connection, (forward.host, forward.port), 30.0
                )
            except OSError as exc:
                log.warning("forward_refused", host=forward.host, port=forward.port, error=str(exc))
                socket.send_fds(control, [b"x"], [])
                continue
            with upstream:
                upstream.setblocking(True)  # connected with a timeout: O_NONBLOCK travels along
                socket.send_fds(control, [b"k"], [upstream.fileno()])


@asynccontextmanager
async def forwarding(forward: Forward, python: str) -> AsyncIterator[tuple[int, list[str]]]:
    """The fd to pass into the sandbox and the argv prefix that runs the relay with it."""
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host_end.setblocking(False)
    raised: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_connect_each, host_end, forward)
            try:
                yield sandbox_end.fileno(), [python, "-c", RELAY, str(sandbox_end.fileno()), "--"]
            except BaseException as exc:  # re-raised below as itself, not in a group
                raised = exc
            tg.cancel_scope.cancel()
    finally:
        host_end.close()
        sandbox_end.close()
    if raised is not None:
        raise raised
