"""Subprocess children.

A :class:`ProcessActor` runs one OS process in a new session (its own process
group). Stopping it sends SIGTERM to the whole group, waits a grace period on
the runtime's clock, then SIGKILLs the group; the leader is always reaped and
the group swept, so no zombie and no orphaned grandchild survives. A
``brutal_kill`` sends SIGKILL to the group at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from ._actor import Actor, ActorContext, Exit
from ._clock import move_on_after
from ._records import ExitError

__all__ = ["ProcessActor", "Spawner"]

Spawner = Callable[..., Awaitable[Process]]


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pgid, signum)


class ProcessActor(Actor[Any]):
    """Run ``argv`` as a child; a zero exit is ``normal``, anything else an ``error``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        grace: float = 5.0,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdout: int | None = subprocess.DEVNULL,
        stderr: int | None = subprocess.DEVNULL,
        spawn: Spawner = anyio.open_process,
    ) -> None:
        self.argv = list(argv)
        self.grace = grace
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stdout = stdout
        self.stderr = stderr
        self._spawn = spawn
        self.process: Process | None = None

    @property
    def pgid(self) -> int:
        assert self.process is not None
        return self.process.pid  # the leader of its own session

    async def init(self, ctx: ActorContext) -> object:
        self.process = await self._spawn(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            stderr=self.stderr,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        pgid = self.pgid
        ctx._on_kill(lambda: _signal_group(pgid, signal.SIGKILL))
        ctx.log.debug("process_started", pid=pgid, argv=self.argv)
        return None

    async def run(self, ctx: ActorContext) -> None:
        assert self.process is not None
        try:
            code = await self.process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop(ctx)
        if code != 0:
            what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            raise Exit(ExitError(error_type="ProcessExit", message=f"{self.argv[0]}: {what}"))

    async def _stop(self, ctx: ActorContext) -> None:
        process = self.process
        assert process is not None
        if process.returncode is None:
            _signal_group(self.pgid, signal.SIGTERM)
            with move_on_after(ctx.clock, self.grace):
                await process.wait()
            if process.returncode is None:
                ctx.log.warning("process_grace_expired", pid=self.pgid, grace=self.grace)
                _signal_group(self.pgid, signal.SIGKILL)
                await process.wait()
        # The leader is reaped; anything left in its group is an orphan: sweep it.
        _signal_group(self.pgid, signal.SIGKILL)
        await process.aclose()
