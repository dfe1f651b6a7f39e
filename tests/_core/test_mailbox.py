"""Mailboxes and actor references: back-pressure, overflow, errors, statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mw_actors as mw

from .helpers import Probe, settle, wait_for, worker

pytestmark = pytest.mark.anyio


async def test_cancelled_receive_never_loses_an_item() -> None:
    got: list[int] = []
    with mw.Mailbox[int](4) as box, anyio.CancelScope():
        await _receive_cancelled_many(box, got)
    assert sorted(got) == list(range(50))


async def _receive_cancelled_many(box: mw.Mailbox[int], got: list[int]) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(50):
            scope = anyio.CancelScope()

            async def receive(scope: anyio.CancelScope = scope) -> None:
                with scope:
                    got.append(await box.get())

            tg.start_soon(receive)
            while box._waiter is None:  # the receiver waits inside get()
                await anyio.lowlevel.checkpoint()
            box.put_nowait(i)  # the receiver is woken...
            scope.cancel()  # ...and cancelled before it runs
    while True:
        try:
            got.append(box.get_nowait())
        except anyio.WouldBlock:
            break


async def test_tell_applies_back_pressure() -> None:
    with mw.Mailbox[int](2) as box:
        await _back_pressure(box)


async def _back_pressure(box: mw.Mailbox[int]) -> None:
    box.put_nowait(1)
    box.put_nowait(2)
    done = anyio.Event()

    async def sender() -> None:
        await box.put(3)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await settle()
        assert not done.is_set()
        assert box.statistics().senders_waiting == 1
        assert await box.get() == 1
        await done.wait()
    assert [box.get_nowait(), box.get_nowait()] == [2, 3]


async def test_overflow_policies_and_statistics() -> None:
    dead: list[int] = []
    box = mw.Mailbox[int](3, on_dead_letter=dead.append)
    for i in range(3):
        box.put_nowait(i)
    with pytest.raises(mw.MailboxFull):
        box.put_nowait(99)
    box.put_nowait(3, mw.Overflow.DROP_OLDEST)
    box.put_nowait(4, mw.Overflow.DROP_OLDEST)
    assert dead == [0, 1]
    assert await box.get() == 2
    box.done()
    stats = box.statistics()
    assert stats == mw.MailboxStatistics(
        capacity=3,
        depth=2,
        high_water=3,
        processed=1,
        dead_letters=2,
        senders_waiting=0,
        closed=False,
    )
    assert box.close() == [3, 4]
    assert dead == [0, 1, 3, 4]
    assert box.statistics().dead_letters == 4


async def test_closed_mailbox_errors() -> None:
    box = mw.Mailbox[int](1)
    box.close()
    with pytest.raises(mw.MailboxClosed):
        box.put_nowait(1)
    with pytest.raises(mw.MailboxClosed):
        await box.put(1)
    with pytest.raises(anyio.EndOfStream):
        await box.get()
    with pytest.raises(anyio.EndOfStream):
        box.get_nowait()


async def test_close_wakes_a_waiting_receiver() -> None:
    box = mw.Mailbox[int](1)
    async with anyio.create_task_group() as tg:  # close() releases the streams

        async def receive() -> None:
            with pytest.raises(anyio.EndOfStream):
                await box.get()

        tg.start_soon(receive)
        await settle()
        box.close()


@pytest.mark.parametrize("capacity", [0, -1, 1.5, "3"])
def test_bad_capacity_is_refused(capacity: Any) -> None:
    with pytest.raises(mw.ConfigError, match="capacity"):
        mw.Mailbox(capacity)


async def test_mailbox_survives_restarts(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w"))
        await ref.tell("block")  # busy: everything below queues behind it
        await ref.tell("a")
        ref.tell_nowait("b")
        await wait_for(lambda: ref.statistics().depth == 2)
        await rt.root.terminate_child("w")
        assert not ref.alive
        await ref.tell("c")  # the identity, and its mailbox, outlive the run
        await rt.root.restart_child("w")
        assert await ref.ask("d") == "d"
        assert ref.statistics().dead_letters == 0
    assert [m for _, m in probe.messages] == ["block", "a", "b", "c", "d"]


async def test_queued_messages_reach_the_restarted_run(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w"))
        await ref.tell("crash")
        await ref.tell("a")
        await ref.tell("b")
        assert await ref.ask("c") == "c"
    assert [m for _, m in probe.messages] == ["crash", "a", "b", "c"]
    assert [a for _, a in probe.of("init")] == [1, 2]


async def test_pending_ask_fails_when_the_actor_dies(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w", restart="temporary"))
        with pytest.raises(mw.ActorExited, match="asked to crash") as info:
            await ref.ask("crash")
        assert isinstance(info.value.reason, mw.ExitError)
        with pytest.raises(mw.ActorExited):
            await ref.ask("anyone?")
        with pytest.raises(mw.ActorExited):
            ref.tell_nowait("anyone?")


async def test_asks_queued_behind_a_dying_actor_fail_too(tmp_path: Path) -> None:
    probe = Probe()
    results: list[object] = []
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w", restart="temporary"))
        await ref.tell("block")

        async def ask(i: int) -> None:
            try:
                results.append(await ref.ask(i))
            except mw.ActorExited as exc:
                results.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(ask, i)
            await wait_for(lambda: ref.statistics().depth == 3)
            await rt.root.terminate_child("w")
    assert len(results) == 3 and all(isinstance(r, mw.ActorExited) for r in results)


async def test_ask_timeout_on_virtual_time(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    async with mw.open_runtime(journal=tmp_path, clock=clock) as rt:
        ref = await rt.spawn(worker(probe, "w"))
        await ref.tell("block")
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.autojump)
            with pytest.raises(mw.AskTimeout):
                await ref.ask("late", timeout=30)
            tg.cancel_scope.cancel()
        assert clock.monotonic() == 30


async def test_an_ask_times_out_whether_it_waits_for_a_reply_or_for_room(tmp_path: Path) -> None:
    """Real time: an ask the mailbox took times its wait by the clock's timer (asyncio) or a
    cancel scope (trio); one that waits for room in a full mailbox, by a scope. On virtual
    time a timeout of 0 is over at once, and a full mailbox times out at its deadline."""
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w", mailbox_capacity=1))
        assert await ref.ask("echo", timeout=30) is not None  # answered: the timer is cancelled
        await ref.tell("block")
        await wait_for(lambda: ("root/w", "block") in probe.messages)
        with anyio.fail_after(30), pytest.raises(mw.AskTimeout, match="root/w did not answer"):
            await ref.ask("late", timeout=0.1)  # taken by the mailbox, never answered
        assert ref.statistics().depth == 1  # the mailbox is full now
        with anyio.fail_after(30), pytest.raises(mw.AskTimeout):
            await ref.ask("no room", timeout=0.1)
    clock = mw.VirtualClock()
    async with mw.open_runtime(journal=tmp_path / "v", clock=clock) as rt:
        ref = await rt.spawn(worker(probe, "v", mailbox_capacity=1))
        await ref.tell("block")
        await wait_for(lambda: ("root/v", "block") in probe.messages)
        with pytest.raises(mw.AskTimeout):
            await ref.ask("over at once", timeout=0)
        assert clock.monotonic() == 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.autojump)
            with pytest.raises(mw.AskTimeout):
                await ref.ask("no room", timeout=30)  # the mailbox holds "over at once"
            tg.cancel_scope.cancel()
        assert clock.monotonic() == 30


async def test_an_ask_from_a_cancelled_scope_sends_nothing(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w"))
        for timeout in (30.0, None):
            with anyio.CancelScope() as scope:
                scope.cancel()
                await ref.ask(("never", timeout), timeout=timeout)
            assert scope.cancelled_caught
        assert await ref.ask("after", timeout=30) == "after"  # handled after any earlier one
    assert [m for _, m in probe.messages] == ["after"]


async def test_drop_oldest_fails_the_dropped_ask(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(worker(probe, "w", mailbox_capacity=1))
        await ref.tell("block")
        await wait_for(lambda: ("root/w", "block") in probe.messages)
        outcome: list[BaseException] = []

        async def ask() -> None:
            try:
                await ref.ask("first")
            except mw.ActorExited as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await wait_for(lambda: ref.statistics().depth == 1)
            ref.tell_nowait("second", mw.Overflow.DROP_OLDEST)
        assert len(outcome) == 1
        assert ref.statistics().dead_letters == 1
        with pytest.raises(mw.MailboxFull):
            ref.tell_nowait("third")


class _Batcher(mw.Actor[object]):
    """Takes what waits in its mailbox at once; answers once told to, or dies."""

    def __init__(self, taken: list[int], release: anyio.Event) -> None:
        self.taken, self.release = taken, release

    async def run(self, ctx: mw.ActorContext) -> None:
        while True:
            batch = await ctx.receive_waiting(16)
            self.taken.append(len(batch))
            await self.release.wait()
            if any(e.message == "die" for e in batch):
                raise RuntimeError("died holding a batch")
            for envelope in batch:
                if envelope.reply is not None:
                    envelope.reply.set(envelope.message)


async def test_an_actor_takes_what_waits_at_once_and_each_asker_hears_if_it_dies() -> None:
    taken: list[int] = []
    release = anyio.Event()
    answers: list[object] = []
    failed: list[BaseException] = []
    spec = mw.ChildSpec(id="batcher", start=lambda: _Batcher(taken, release), restart="temporary")
    async with mw.open_runtime() as rt:
        ref = await rt.spawn(spec)

        async def ask(message: object) -> None:
            try:
                answers.append(await ref.ask(message, timeout=30))
            except mw.ActorExited as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 0)
            await wait_for(lambda: taken == [1])  # the first went alone; the rest queue
            for n in range(1, 6):
                tg.start_soon(ask, n)
            tg.start_soon(ask, "die")
            await wait_for(lambda: ref.statistics().depth == 6)
            release.set()
        assert taken == [1, 6] and answers == [0]
        # Each of the batch held when it died is told so, not left to time out.
        assert len(failed) == 6
