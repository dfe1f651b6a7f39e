"""The campaign's actors under its supervisor.

The stream serves block k against v(k); the learner turns block k into
v(k+1) exactly once; the waiter tests each window on its test version as
soon as that exists. Each reads and writes the campaign journal.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from .._core import Actor, ActorContext, Journal
from ._episode import serve_episode
from ._methods import Lesson
from ._state import Shared
from .records import (
    BlockLearned,
    WindowTested,
)

__all__ = ["UNSCORED", "Learner", "Stream", "Waiter", "append_line", "digest_dir", "either"]

UNSCORED = ("unknown", "failed", "budget_blocked")  # statuses no score was told for


class _Journaled(Actor[Any]):
    """A campaign actor: it needs the campaign journal (a campaign always has one)."""

    async def init(self, ctx: ActorContext) -> object:
        journal = ctx.journal
        assert journal is not None, "a campaign runs with a journal"
        self.journal: Journal = journal
        return None


class Learner(_Journaled):
    """Learns block k into v(k+1), exactly once; a restart learns what is pending."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def init(self, ctx: ActorContext) -> object:
        self.shared.learner = ctx.ref  # the stream tells it each block served in full
        return await super().init(ctx)

    async def run(self, ctx: ActorContext) -> None:
        # A block served in full but not learned (the learner crashed, or the process
        # died) is learned first, in order, before anything in the mailbox.
        shared = self.shared
        for block, tasks in enumerate(shared.serving_blocks()[: shared.plan.blocks]):
            if block not in shared.learned and all(t.task_id in shared.ended for t in tasks):
                await self.handle(block)
        await super().run(ctx)

    async def handle(self, block: int) -> None:
        shared = self.shared
        if block in shared.learned:
            return
        started = time.perf_counter()
        # What is learned comes from the journaled records (fsynced): each served episode's
        # record, as the benchmark gives a learning method; never an evaluator.
        served = []
        for number, earlier in enumerate(shared.serving_blocks()[: block + 1]):
            for task in earlier:
                ended = shared.ended.get(task.task_id)
                # An episode the agent was never scored on (a dead process left it in
                # flight, every attempt failed, the budget refused it) teaches nothing.
                if ended is not None and ended.status not in UNSCORED:
                    served.append(shared.served(task, ended, number))
        previous = shared.versions.dir(block)
        staging = shared.run.checkout / "staging"

        def settle() -> tuple[str, Path]:  # the new version, by its digest
            digest = digest_dir(staging)
            target = shared.run.version_dir(digest)
            if target.exists():
                shutil.rmtree(staging)
            else:
                os.replace(staging, target)
            return digest, target

        await anyio.to_thread.run_sync(partial(shutil.rmtree, staging, ignore_errors=True))
        lesson = Lesson(
            served=served,
            block=block,
            previous=previous,
            out=staging,
            session=shared.session,
            manual=shared.player.manual,
        )
        usage = await shared.method.learn(lesson)  # an LLM session's, where the method has one
        digest, target = await anyio.to_thread.run_sync(settle)
        duration = time.perf_counter() - started
        await self.journal.append(
            BlockLearned(
                block=block,
                version=block + 1,
                cases=len(shared.serving_blocks()[block]),
                digest=digest,
                duration=round(duration, 4),
            )
        )
        shared.learned.add(block)
        step = {
            "block": block,
            "cases": len(shared.serving_blocks()[block]),
            "version": block + 1,
            "digest": digest,
            "learner_tokens": usage.input_tokens + usage.output_tokens if usage else 0,
            "learner_cost_usd": usage.cost_usd if usage else "0",
            "duration": round(duration, 4),
        }
        await append_line(shared.run.steps, json.dumps(step))
        shared.versions.publish(block + 1, target)
        if len(shared.learned) == shared.plan.blocks:
            shared.learner_done.set()


async def append_line(path: Path, line: str) -> None:
    def write() -> None:
        with open(path, "a") as handle:
            handle.write(line + "\n")

    await anyio.to_thread.run_sync(write)


def digest_dir(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class Stream(_Journaled):
    """Serves the stream block by block; block k waits for v(k)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def run(self, ctx: ActorContext) -> None:
        shared = self.shared
        for block, tasks in enumerate(shared.serving_blocks()):
            if shared.blocked.is_set():
                break
            await shared.versions.wait(block)
            if shared.spec.waiter == "window_by_window":
                for window in shared.plan.windows:
                    served = window.last_position <= shared.plan.block_start(block)
                    if served and window.window not in shared.tested:
                        await either(shared.window_tested[window.window], shared.blocked)
            async with anyio.create_task_group() as tg:
                for task in tasks:
                    tg.start_soon(serve_episode, shared, self.journal, task, "serving", block)
            if shared.blocked.is_set():
                break
            if block < shared.plan.blocks and block not in shared.learned:
                assert shared.learner is not None, "the learner starts before the stream"
                await shared.learner.tell(block)
        shared.stream_done.set()
        if shared.blocked.is_set():
            shared.learner_done.set()


class Waiter(_Journaled):
    """Tests window w on v(test_version(w)) as soon as it exists; tests never learn."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def run(self, ctx: ActorContext) -> None:
        shared = self.shared
        if shared.spec.waiter == "after_training":
            await shared.stream_done.wait()
            await either(shared.learner_done, shared.blocked)
        for window in shared.plan.windows:
            if window.window in shared.tested:
                continue
            await either(shared.versions.ready(window.test_version), shared.blocked)
            if shared.blocked.is_set():
                break
            tests = [t for t in shared.scenario.test if t.window == window.window]
            async with anyio.create_task_group() as tg:
                for task in tests:
                    tg.start_soon(
                        serve_episode, shared, self.journal, task, "test", window.test_version
                    )
            if shared.blocked.is_set():
                break
            await self.journal.append(
                WindowTested(window=window.window, version=window.test_version, episodes=len(tests))
            )
            shared.tested.add(window.window)
            shared.window_tested[window.window].set()
            rewards = [shared.ended[t.task_id].reward for t in tests if t.task_id in shared.ended]
            score = 100 * sum(rewards) / len(rewards) if rewards else 0.0
            await append_line(
                shared.run.test_log,
                f"window {window.window} on v{window.test_version}: {len(tests)} tests, "
                f"score {score:.1f}",
            )
        shared.waiter_done.set()


async def either(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        for event in events:

            async def wait(e: anyio.Event = event) -> None:
                await e.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(wait)
