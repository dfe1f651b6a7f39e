"""Injected time.

Every timeout, heartbeat, backoff, restart window and rate limit in mw reads a
:class:`Clock` the runtime was given. :class:`SystemClock` is real time on the
running backend. :class:`VirtualClock` is time that moves only when told to,
on asyncio and trio alike, so a test of a 30-minute schedule finishes in
milliseconds and can assert exact times.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable

import anyio

__all__ = [
    "Clock",
    "SystemClock",
    "VirtualClock",
    "fail_after",
    "move_on_after",
    "sleep",
]


@runtime_checkable
class Clock(Protocol):
    """What the runtime needs of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, for timestamps in records."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until :meth:`monotonic` reaches ``deadline``."""
        ...

    def cancel_scope_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        """Enter a cancel scope that cancels itself when ``deadline`` is reached."""
        ...


class SystemClock:
    """Real time, read from the running async backend."""

    def monotonic(self) -> float:
        return anyio.current_time()

    def wall(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep_until(deadline)

    def cancel_scope_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        return anyio.CancelScope(deadline=deadline)

    def call_at(
        self, deadline: float, callback: Callable[[], object]
    ) -> Callable[[], object] | None:
        """Call ``callback`` at ``deadline``; return what cancels it.

        None where the backend has no timer to lend (trio): the caller then waits under
        a cancel scope. Not part of :class:`Clock`: a timer is cheaper than a scope
        (``ActorRef.ask`` with a timeout, per request), and a clock may lack one.
        """
        try:
            loop = asyncio.get_running_loop()  # anyio's time on asyncio is the loop's
        except RuntimeError:
            return None
        return loop.call_at(deadline, callback).cancel


class _Timer:
    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], object]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False


class VirtualClock:
    """Time that advances only through :meth:`advance` or :meth:`autojump`.

    Sleepers and deadlines are kept in a heap. Advancing fires them in
    deadline order and lets the woken tasks run (and schedule new timers)
    before moving on, so a backoff chain of 1 s, 2 s, 4 s inside one
    ``advance(10)`` fires at exactly 1, 3 and 7.
    """

    def __init__(self, start: float = 0.0, *, wall_epoch: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_epoch = wall_epoch - start
        self._heap: list[tuple[float, int, _Timer]] = []
        self._counter = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall_epoch + self._now

    def _call_at(self, deadline: float, callback: Callable[[], object]) -> _Timer:
        timer = _Timer(deadline, callback)
        heapq.heappush(self._heap, (deadline, next(self._counter), timer))
        return timer

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        timer = self._call_at(deadline, event.set)
        try:
            await event.wait()
        finally:
            timer.cancelled = True

    @contextmanager
    def cancel_scope_at(self, deadline: float) -> Iterator[anyio.CancelScope]:
        scope = anyio.CancelScope()
        timer = None
        if deadline <= self._now:
            scope.cancel()
        elif deadline != math.inf:
            timer = self._call_at(deadline, scope.cancel)
        try:
            with scope:
                yield scope
        finally:
            if timer is not None:
                timer.cancelled = True

    def call_at(self, deadline: float, callback: Callable[[], object]) -> Callable[[], object]:
        """Call ``callback`` when time reaches ``deadline`` (now, if it has); what cancels it."""
        if deadline <= self._now:
            callback()
            return _nothing
        timer = self._call_at(deadline, callback)
        return lambda: setattr(timer, "cancelled", True)

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or None when nothing waits on time."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def _fire_due(self) -> bool:
        fired = False
        while self._heap and self._heap[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._heap)
            if not timer.cancelled:
                timer.cancelled = True
                timer.callback()
                fired = True
        return fired

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing every timer on the way."""
        if seconds < 0:
            raise ValueError("time never goes back")
        target = self._now + seconds
        await anyio.wait_all_tasks_blocked()
        while (deadline := self.next_deadline()) is not None and deadline <= target:
            self._now = max(self._now, deadline)
            if self._fire_due():
                await anyio.wait_all_tasks_blocked()
        self._now = target
        self._fire_due()
        await anyio.wait_all_tasks_blocked()

    async def autojump(self) -> None:
        """Run forever: whenever every other task is blocked, jump to the next deadline.

        Start it in a task group beside the code under test, like trio's
        ``MockClock(autojump_threshold=0)``.
        """
        while True:
            await anyio.wait_all_tasks_blocked()
            deadline = self.next_deadline()
            if deadline is None:
                await anyio.sleep(0.001)
                continue
            self._now = max(self._now, deadline)
            self._fire_due()


def _nothing() -> None:
    pass


async def sleep(clock: Clock, seconds: float) -> None:
    """Sleep ``seconds`` on ``clock``."""
    await clock.sleep_until(clock.monotonic() + seconds)


@contextmanager
def move_on_after(clock: Clock, seconds: float) -> Iterator[anyio.CancelScope]:
    """Like :func:`anyio.move_on_after`, on ``clock``."""
    with clock.cancel_scope_at(clock.monotonic() + seconds) as scope:
        yield scope


@contextmanager
def fail_after(clock: Clock, seconds: float) -> Iterator[anyio.CancelScope]:
    """Like :func:`anyio.fail_after`, on ``clock``: raises TimeoutError on expiry."""
    with clock.cancel_scope_at(clock.monotonic() + seconds) as scope:
        yield scope
    if scope.cancelled_caught:
        raise TimeoutError
