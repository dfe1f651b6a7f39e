"""Episode slots: ``--concurrency N`` is the total number of episodes in flight.

Serving and tests share the N slots. A slot that frees goes to a waiting
serving episode before a waiting test: the stream is the campaign's critical
path (each block waits for the one before it and for its learning; a test waits
for nothing but a slot), so it is never held up by tests that could run later,
and tests take every slot it leaves: a block's tail, once its last episode has
started, and the learner's time between blocks. Tests are not starved: a block
is a bounded number of episodes (12 in mw's schedule), and the next cannot start
before they have all ended. Waiters of one phase are served in the order they
came. Works on asyncio and trio (anyio's events).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

__all__ = ["PHASES", "Slots"]

PHASES = ("serving", "test")  # a freed slot's first taker first


class Slots:
    """At most ``total`` episodes at once, the stream's first."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.busy = 0
        self.most = 0  # the most episodes ever in flight at once
        self._waiting: dict[str, deque[anyio.Event]] = {phase: deque() for phase in PHASES}

    @asynccontextmanager
    async def hold(self, phase: str) -> AsyncIterator[None]:
        """A slot for one episode of ``phase`` (``test`` or ``serving``), while inside."""
        if self.busy < self.total and not any(self._waiting.values()):
            self.busy += 1
        else:
            handed = anyio.Event()
            self._waiting[phase].append(handed)
            try:
                await handed.wait()
            except BaseException:  # cancelled while waiting
                if handed.is_set():  # the slot was handed over already: pass it on
                    self._release()
                else:
                    self._waiting[phase].remove(handed)
                raise
        self.most = max(self.most, self.busy)
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        for phase in PHASES:
            if self._waiting[phase]:
                self._waiting[phase].popleft().set()  # the slot passes on, still busy
                return
        self.busy -= 1
