"""Bounded mailboxes on anyio memory object streams.

A mailbox belongs to an actor's *identity*, not to one run: when the
supervisor restarts the actor, the new run reads the same mailbox, so senders
see no gap.

The owner never waits inside ``MemoryObjectReceiveStream.receive``: it takes
items with ``receive_nowait`` and otherwise waits on a wake-up event. So a
receive cancelled while a sender sends never loses the item: the item stays
in the buffer until a receive returns it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mw_errors import ConfigError, MailboxClosed, MailboxFull

__all__ = ["Mailbox", "MailboxStatistics", "Overflow"]

T = TypeVar("T")


class Overflow(enum.Enum):
    """What ``put_nowait`` does when the mailbox is full."""

    FAIL = "fail"
    DROP_OLDEST = "drop_oldest"


class MailboxStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a mailbox's counters."""

    capacity: int
    depth: int
    high_water: int
    processed: int
    dead_letters: int
    senders_waiting: int
    closed: bool


class Mailbox(Generic[T]):
    """A bounded FIFO with back-pressure, overflow policies and dead-letter accounting.

    ``on_dead_letter`` is called with every item that will never be
    processed: dropped by ``DROP_OLDEST``, or left over at :meth:`close`.
    """

    def __init__(
        self,
        capacity: int = 1000,
        *,
        on_dead_letter: Callable[[T], object] | None = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"mailbox capacity must be an integer >= 1, got {capacity!r}")
        self._send: MemoryObjectSendStream[T]
        self._recv: MemoryObjectReceiveStream[T]
        self._send, self._recv = anyio.create_memory_object_stream[T](capacity)
        self._capacity = capacity
        self._on_dead_letter = on_dead_letter
        self._waiter: anyio.Event | None = None
        self._closed = False
        self._accepted = 0
        self._taken = 0
        self._high_water = 0
        self._dead = 0
        self._processed = 0

    # -- senders -----------------------------------------------------------------

    async def put(self, item: T) -> None:
        """Put ``item``, waiting for room (back-pressure).

        Raises:
            MailboxClosed: the mailbox is closed.
        """
        try:
            await self._send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise MailboxClosed("the mailbox is closed") from None
        self._accepted_one()

    def put_nowait(self, item: T, overflow: Overflow = Overflow.FAIL) -> None:
        """Put ``item`` now, or apply ``overflow`` when the mailbox is full.

        Raises:
            MailboxFull: full, with ``Overflow.FAIL``.
            MailboxClosed: the mailbox is closed.
        """
        try:
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            if overflow is Overflow.FAIL:
                raise MailboxFull(f"mailbox is full ({self._capacity} items)") from None
            self._dead_letter(self._recv.receive_nowait())
            self._taken += 1
            self._send.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise MailboxClosed("the mailbox is closed") from None
        self._accepted_one()

    def _accepted_one(self) -> None:
        self._accepted += 1
        depth = self._accepted - self._taken
        if depth > self._high_water:
            self._high_water = depth
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    # -- the owner ---------------------------------------------------------------

    def get_nowait(self) -> T:
        """Take the oldest item.

        Raises:
            anyio.WouldBlock: nothing is waiting.
            anyio.EndOfStream: the mailbox is closed and drained.
        """
        if self._closed:
            raise anyio.EndOfStream
        item = self._recv.receive_nowait()
        self._taken += 1
        return item

    async def get(self) -> T:
        """Take the oldest item, waiting for one. Cancellation never loses an item.

        Raises:
            anyio.EndOfStream: the mailbox is closed and drained.
        """
        await anyio.lowlevel.checkpoint()
        while True:
            try:
                return self.get_nowait()
            except anyio.WouldBlock:
                pass  # wait outside the handler, so no traceback stays alive while waiting
            self._waiter = waiter = anyio.Event()
            await waiter.wait()

    def done(self) -> None:
        """Count one taken item as processed."""
        self._processed += 1

    def close(self) -> list[T]:
        """Close for good; return what was left (each also counted as a dead letter)."""
        if self._closed:
            return []
        self._closed = True
        left: list[T] = []
        while True:
            try:
                left.append(self._recv.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        self._send.close()
        self._recv.close()
        self._taken += len(left)
        for item in left:
            self._dead_letter(item)
        if self._waiter is not None:
            self._waiter.set()
        return left

    def __enter__(self) -> Mailbox[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _dead_letter(self, item: T) -> None:
        self._dead += 1
        if self._on_dead_letter is not None:
            self._on_dead_letter(item)

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            capacity=self._capacity,
            depth=0 if self._closed else self._send.statistics().current_buffer_used,
            high_water=self._high_water,
            processed=self._processed,
            dead_letters=self._dead,
            senders_waiting=0 if self._closed else self._send.statistics().tasks_waiting_send,
            closed=self._closed,
        )
