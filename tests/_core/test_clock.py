"""The virtual clock: exact times, no sleeping."""

from __future__ import annotations

import anyio
import pytest

import mw_actors as mw

pytestmark = pytest.mark.anyio


async def test_advance_fires_chained_timers_in_order() -> None:
    clock = mw.VirtualClock()
    fired: list[float] = []

    async def chain() -> None:
        for delay in (1, 2, 4):
            await mw.sleep(clock, delay)
            fired.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(chain)
        await clock.advance(10)
    assert fired == [1, 3, 7]
    assert clock.monotonic() == 10


async def test_fail_after_and_move_on_after() -> None:
    clock = mw.VirtualClock(start=100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.autojump)
        with pytest.raises(TimeoutError), mw.fail_after(clock, 30):
            await anyio.sleep_forever()
        assert clock.monotonic() == 130
        with mw.move_on_after(clock, 5) as scope:
            await anyio.sleep_forever()
        assert scope.cancelled_caught and clock.monotonic() == 135
        tg.cancel_scope.cancel()


async def test_exited_scopes_release_their_timers() -> None:
    clock = mw.VirtualClock()
    with mw.move_on_after(clock, 5):
        pass
    assert clock.next_deadline() is None
    assert clock.wall() == 1_700_000_000.0
    with pytest.raises(ValueError, match="never goes back"):
        await clock.advance(-1)


async def test_system_clock_reads_the_backend() -> None:
    clock = mw.SystemClock()
    before = clock.monotonic()
    await mw.sleep(clock, 0.01)
    assert clock.monotonic() >= before + 0.01
    assert isinstance(clock, mw.Clock)
