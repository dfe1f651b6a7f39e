"""Running one command tree with capped capture, a wall-clock limit and a group kill.

Both backends end here: the backend builds the argv (bubblewrap and its
options, or nothing), this module runs it in a new session, feeds stdin,
drains stdout and stderr concurrently (keeping at most ``output_bytes`` of
each and counting the rest), kills the whole process group on timeout, and
always sweeps the group when the leader exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

import anyio
import msgspec
from anyio.abc import ByteReceiveStream

from mw_errors import SandboxUnavailable

from ._contract import Limits

__all__ = ["RawRun", "limit_argv", "limits_hit", "run_tree"]

_DRAIN_GRACE = 2.0
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_PROCESS_MARKERS = ("Resource temporarily unavailable", "fork: retry", "can't fork")


class RawRun(msgspec.Struct, frozen=True):
    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: list[str]
    timed_out: bool
    duration: float


def limit_argv(limits: Limits) -> list[str]:
    """``prlimit`` options that apply ``limits`` to the command it runs (soft = hard)."""
    cpu = limits.cpu_seconds
    return [
        "prlimit",
        f"--as={limits.address_space}",
        f"--cpu={cpu}:{cpu + 1}",  # SIGXCPU at the soft limit, SIGKILL a second later
        f"--nofile={limits.open_files}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_size}",
        "--",
    ]


def limits_hit(run: RawRun) -> list[str]:
    """Which limits the program ran into, from how it ended and what it said."""
    hit: list[str] = []
    code = run.returncode
    stderr = run.stderr.decode(errors="replace")
    if run.timed_out:
        hit.append("wall_time")
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or (
        code == -signal.SIGKILL and not run.timed_out and "cpu" in stderr.lower()
    ):
        hit.append("cpu_seconds")
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or "File too large" in stderr:
        hit.append("file_size")
    if any(marker in stderr for marker in _MEMORY_MARKERS):
        hit.append("address_space")
    if any(marker in stderr for marker in _PROCESS_MARKERS):
        hit.append("processes")
    if "Too many open files" in stderr:
        hit.append("open_files")
    if run.truncated:
        hit.append("output")
    return hit


async def _drain(
    stream: ByteReceiveStream | None, keep: int, into: bytearray, name: str, cut: list[str]
) -> None:
    if stream is None:
        return
    async for chunk in stream:
        room = keep - len(into)
        if room > 0:
            into += chunk[:room]
        if len(chunk) > room and name not in cut:
            cut.append(name)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_tree(
    argv: Sequence[str],
    *,
    input: bytes | None,
    env: Mapping[str, str],
    cwd: str | None,
    timeout: float,
    output_bytes: int,
    pass_fds: tuple[int, ...] = (),
) -> RawRun:
    """Run ``argv`` in a new session; return when its whole group is gone.

    Raises:
        SandboxUnavailable: the command could not be started at all.
    """
    start = time.monotonic()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        raise SandboxUnavailable(f"cannot start {argv[0]}: {exc}") from exc
    stdout, stderr = bytearray(), bytearray()
    cut: list[str] = []
    timed_out = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, process.stdout, output_bytes, stdout, "stdout", cut)
            tg.start_soon(_drain, process.stderr, output_bytes, stderr, "stderr", cut)
            if process.stdin is not None:
                async with process.stdin:
                    with contextlib.suppress(anyio.BrokenResourceError):
                        await process.stdin.send(input or b"")
            with anyio.move_on_after(timeout) as scope:
                await process.wait()
            if scope.cancelled_caught:
                timed_out = True
                _kill_group(process.pid)
                await process.wait()
            # The leader is gone; anything left in its group is swept, so the
            # pipes close and the drains end. A process that left the group
            # (setsid, without isolation) may still hold a pipe: stop reading.
            _kill_group(process.pid)
            tg.cancel_scope.deadline = anyio.current_time() + _DRAIN_GRACE
    finally:
        with anyio.CancelScope(shield=True):
            _kill_group(process.pid)
            await process.aclose()
    return RawRun(
        returncode=process.returncode if process.returncode is not None else -signal.SIGKILL,
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        truncated=sorted(cut),
        timed_out=timed_out,
        duration=time.monotonic() - start,
    )
