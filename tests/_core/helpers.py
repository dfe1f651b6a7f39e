"""Scripted actors and small waits for the kernel tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

import mw_actors as mw


class Probe:
    """Shared by the actors of one test: what happened, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.messages: list[tuple[str, Any]] = []

    def log(self, actor: str, what: str, run: int) -> None:
        self.events.append((actor, what, run))

    def of(self, what: str) -> list[tuple[str, int]]:
        return [(a, r) for a, w, r in self.events if w == what]


class Worker(mw.Actor[Any]):
    """A child whose init follows a per-run plan and whose messages are commands.

    Plan actions for init: "ok", "fail", "ignore", "hang".
    Messages: "crash", "normal", "shutdown", ("shutdown", reason), anything else is echoed.
    """

    def __init__(
        self,
        probe: Probe,
        plan: Sequence[str] = ("ok",),
        *,
        hang_terminate: bool = False,
        crash_terminate: bool = False,
        run_action: str = "serve",
    ) -> None:
        self.probe = probe
        self.plan = plan
        self.hang_terminate = hang_terminate
        self.crash_terminate = crash_terminate
        self.run_action = run_action

    async def init(self, ctx: mw.ActorContext) -> object:
        action = self.plan[min(ctx.attempt, len(self.plan)) - 1]
        self.probe.log(ctx.name, "init", ctx.attempt)
        if action == "fail":
            raise RuntimeError(f"init of attempt {ctx.attempt} fails")
        if action == "ignore":
            return mw.IGNORE
        if action == "hang":
            await anyio.sleep_forever()
        return None

    async def run(self, ctx: mw.ActorContext) -> None:
        self.ctx = ctx
        if self.run_action == "crash":
            raise RuntimeError("crashes at once")
        if self.run_action == "normal":
            return
        await super().run(ctx)

    async def handle(self, message: Any) -> object:
        self.probe.messages.append((self.ctx.name, message))
        if message == "crash":
            raise RuntimeError("asked to crash")
        if message == "normal":
            raise mw.Exit(mw.ExitNormal())
        if message == "shutdown":
            raise mw.Exit(mw.ExitShutdown())
        if isinstance(message, tuple) and message[0] == "shutdown":
            raise mw.Exit(mw.ExitShutdown(message[1]))
        if message == "block":
            await anyio.sleep_forever()
        return message

    async def terminate(
        self, ctx: mw.ActorContext, reason: mw.ExitReason, interrupted: bool
    ) -> None:
        self.probe.log(ctx.name, f"terminate:{reason}", ctx.attempt)
        if self.crash_terminate:
            raise RuntimeError("cleanup fails")
        if self.hang_terminate:
            await anyio.sleep_forever()


def worker(probe: Probe, id: str = "w", **kwargs: Any) -> mw.ChildSpec:
    spec_keys = {"restart", "shutdown", "significant", "start_timeout", "mailbox_capacity"}
    spec_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in spec_keys}
    return mw.ChildSpec(id=id, start=lambda: Worker(probe, **kwargs), **spec_kwargs)


async def settle() -> None:
    """Let every task run until all are blocked."""
    await anyio.wait_all_tasks_blocked()


async def wait_for(predicate: Callable[[], bool], *, limit: int = 2000) -> None:
    """Wait for a state, not for time."""
    for _ in range(limit):
        if predicate():
            return
        await anyio.sleep(0.001)
    raise AssertionError("state never reached")


def journal_entries(path: Path) -> list[mw.journal.Entry]:
    return mw.journal.read_journal(path)


def views(path: Path) -> dict[str, mw.journal.ActorView]:
    return mw.journal.rebuild(mw.journal.SupervisionView(), mw.journal.read_journal(path))


def assert_one_terminal_per_run(path: Path) -> dict[str, mw.journal.ActorView]:
    state = views(path)
    for view in state.values():
        for run, count in view.terminal_per_run.items():
            assert count == 1, f"{view.name} run {run} has {count} terminal records"
        assert not view.open_runs, f"{view.name} runs {view.open_runs} have no terminal record"
    return state


def exits(path: Path, actor: str) -> list[str]:
    return [
        str(r.reason)
        for r in mw.journal.replay(mw.journal.read_journal(path), mw.journal.ActorExit)
        if r.actor == actor
    ]
