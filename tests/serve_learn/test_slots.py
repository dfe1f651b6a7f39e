"""--concurrency N is the total number of episodes in flight; a freed slot goes to serving first."""

from __future__ import annotations

import anyio
import pytest

from mw_actors.serve_learn._slots import Slots

pytestmark = pytest.mark.anyio


async def test_serving_and_tests_together_never_exceed_n_and_the_stream_goes_first() -> None:
    slots = Slots(3)
    inside = 0
    most = 0
    started: list[str] = []
    release = anyio.Event()

    async def episode(phase: str, name: str) -> None:
        nonlocal inside, most
        async with slots.hold(phase):
            inside += 1
            most = max(most, inside)
            started.append(name)
            await release.wait()
            await anyio.sleep(0.01)
            inside -= 1

    async with anyio.create_task_group() as group:
        # The stream fills every slot, more of it waits, then a window's tests come.
        arrivals = [("serving", f"s{n}") for n in range(6)] + [("test", "t0"), ("test", "t1")]
        for phase, name in arrivals:
            group.start_soon(episode, phase, name)
            await anyio.wait_all_tasks_blocked()  # each in turn: the order they came in
        assert started == ["s0", "s1", "s2"] and slots.busy == 3
        release.set()
    assert most == 3 and slots.most == 3  # never more than N, serving and tests together
    # The three slots freed went to the stream's next before the tests that came after
    # them (the stream is the critical path); once no serving episode waited, the tests.
    assert sorted(started[3:6]) == ["s3", "s4", "s5"]
    assert sorted(started[6:]) == ["t0", "t1"]
    assert slots.busy == 0


async def test_a_waiter_cancelled_gives_up_its_place() -> None:
    slots = Slots(1)
    ran: list[str] = []
    scopes: list[anyio.CancelScope] = []

    async def episode(phase: str, name: str) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            async with slots.hold(phase):
                ran.append(name)
                await anyio.sleep(0.01)

    async with anyio.create_task_group() as group, slots.hold("serving"):
        group.start_soon(episode, "test", "cancelled")
        await anyio.wait_all_tasks_blocked()
        group.start_soon(episode, "serving", "after")
        await anyio.wait_all_tasks_blocked()
        scopes[0].cancel()  # the test gives up while it waits
        await anyio.wait_all_tasks_blocked()
    assert ran == ["after"] and slots.busy == 0
