"""Budget arithmetic: a cumulative allocation, reservations as leases, exact money.

``reserve`` checks and reserves in one synchronous step, so no await can
slip between the check and the reservation: at every instant
``allocation >= settled + outstanding``. A reservation is a lease: if its
holder never settles or releases it (a crash), it expires and is reclaimed,
and the reclaim is reported so that it can be recorded. The reserver actor
in ``mw_actors`` wraps this; the meter reaches it through :class:`Reserver`.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from decimal import Decimal
from typing import Protocol

import anyio
import msgspec

from mw_errors import MeterError

from ._money import usd

__all__ = [
    "Blocked",
    "Budget",
    "BudgetStatistics",
    "Granted",
    "Reclaimed",
    "Reservation",
    "Reserver",
    "reserve_waiting",
]


class Granted(msgspec.Struct, frozen=True):
    id: str
    amount: str


class Blocked(msgspec.Struct, frozen=True):
    requested: str
    remaining: str
    # Reserved for requests still in flight when it was refused: as they settle (for less,
    # as most do), a request blocked only by them may fit. "0": blocked for good.
    outstanding: str = "0"

    def may_fit_later(self) -> bool:
        """Whether it would fit if the requests in flight settled at nothing."""
        return Decimal(self.requested) <= Decimal(self.remaining) + Decimal(self.outstanding)


class Reservation(msgspec.Struct, frozen=True):
    id: str
    amount: str
    holder: str
    expires_at: float
    reserved_at: float = 0.0  # on the same clock as expires_at


class Reclaimed(msgspec.Struct, frozen=True):
    reservation: Reservation
    at: float


class BudgetStatistics(msgspec.Struct, frozen=True):
    allocation_usd: str
    settled_usd: str
    outstanding_usd: str
    remaining_usd: str
    reservations: int
    granted: int
    blocked: int
    reclaimed: int


class Reserver(Protocol):
    """What a meter needs of a budget; ``meters`` never imports the actor behind it."""

    async def reserve(self, amount: Decimal, holder: str) -> Granted | Blocked: ...

    async def settle(self, reservation_id: str, actual: Decimal) -> None: ...

    async def release(self, reservation_id: str) -> None: ...

    async def open_reservations(self) -> list[Reservation]:
        """Reservations neither settled nor released (a meter recovers its own at start)."""
        ...


async def reserve_waiting(
    reserver: Reserver, amount: Decimal, holder: str, *, wait_seconds: float
) -> Granted | Blocked:
    """Reserve; while only reservations in flight stand in the way, wait for them to settle.

    Concurrent holders (a campaign's episodes, a grid's cells) each reserve a worst case
    far above what they spend: refused the moment their worst cases fill the allocation,
    a grid ended its cells with 14% of it spent. Blocked for good (settled spend and this
    amount cannot fit), or still blocked after ``wait_seconds``, it is refused. A
    reserver with a ``freed()`` wait (:class:`LocalReserver`) wakes it as soon as a
    reservation is settled or released; others are asked again after a backoff.
    """
    outcome = await reserver.reserve(amount, holder)
    freed = getattr(reserver, "freed", None)  # a reserver that says when money comes back
    delay, deadline = 0.05, anyio.current_time() + wait_seconds
    while (
        isinstance(outcome, Blocked) and outcome.may_fit_later() and anyio.current_time() < deadline
    ):
        with anyio.move_on_after(delay):  # at the latest: a reserver in another process
            await (freed() if freed is not None else anyio.sleep(delay))
        delay = min(delay * 2, 2.0)
        outcome = await reserver.reserve(amount, holder)
    return outcome


class Budget:
    """The state of one allocation. Not thread-safe: one event loop owns it."""

    def __init__(self, allocation: Decimal, *, lease_seconds: float = 900.0) -> None:
        if not allocation.is_finite() or allocation < 0:
            raise MeterError(f"allocation {allocation} must be a finite amount >= 0")
        self.allocation = allocation
        self.lease_seconds = lease_seconds
        self.settled = Decimal(0)
        self._outstanding: dict[str, Reservation] = {}
        # Kept as reservations come and go, so a reserve costs the same with thousands
        # open: their sum, and their expiries in order (an id whose lease ended is skipped).
        self._held = Decimal(0)
        self._expiries: list[tuple[float, str]] = []
        # Ids stay unique across restarts: each Budget instance has its own prefix.
        self._prefix = uuid.uuid4().hex[:8]
        self._ids = itertools.count(1)
        self._granted = self._blocked = self._reclaimed = 0

    @property
    def outstanding(self) -> Decimal:
        return self._held

    def _open(self, reservation: Reservation) -> None:
        self._outstanding[reservation.id] = reservation
        self._held += Decimal(reservation.amount)
        heapq.heappush(self._expiries, (reservation.expires_at, reservation.id))
        if len(self._expiries) > 2 * len(self._outstanding) + 1024:  # mostly settled ids
            self._expiries = [(r.expires_at, r.id) for r in self._outstanding.values()]
            heapq.heapify(self._expiries)

    def _close(self, reservation_id: str) -> Reservation | None:
        reservation = self._outstanding.pop(reservation_id, None)
        if reservation is not None:
            self._held -= Decimal(reservation.amount)
        return reservation

    @property
    def remaining(self) -> Decimal:
        return self.allocation - self.settled - self.outstanding

    def reserve(self, amount: Decimal, holder: str, now: float) -> Granted | Blocked:
        """Reserve ``amount`` if it fits what remains; never partially."""
        if amount < 0:
            raise MeterError(f"cannot reserve a negative amount ({amount})")
        outstanding = self.outstanding
        remaining = self.allocation - self.settled - outstanding
        if amount > remaining:
            self._blocked += 1
            return Blocked(
                requested=usd(amount), remaining=usd(remaining), outstanding=usd(outstanding)
            )
        reservation = Reservation(
            id=f"{self._prefix}.{next(self._ids)}",
            amount=usd(amount),
            holder=holder,
            expires_at=now + self.lease_seconds,
            reserved_at=now,
        )
        self._open(reservation)
        self._granted += 1
        return Granted(id=reservation.id, amount=reservation.amount)

    def settle(self, reservation_id: str, actual: Decimal) -> Decimal:
        """Replace a reservation by what was actually spent; return the actual charge.

        A settle for a reservation that was reclaimed still charges: the money was spent.
        """
        self._close(reservation_id)
        self.settled += actual
        return actual

    def release(self, reservation_id: str) -> None:
        """Give a reservation back unspent (nothing was sent)."""
        self._close(reservation_id)

    def open_reservations(self) -> list[Reservation]:
        return list(self._outstanding.values())

    def lease(self, reservation_id: str) -> Reservation:
        """An outstanding reservation.

        Raises:
            KeyError: it was settled, released or reclaimed.
        """
        return self._outstanding[reservation_id]

    def reclaim_expired(self, now: float) -> list[Reclaimed]:
        """Charge and drop leases whose holder never came back; report each one.

        A lease is charged its full amount: its holder vanished after reserving,
        so the request it covered may have been billed.
        """
        expired = []
        while self._expiries and self._expiries[0][0] <= now:
            _, reservation_id = heapq.heappop(self._expiries)
            reservation = self._close(reservation_id)
            if reservation is not None:  # else settled or released already
                self.settled += Decimal(reservation.amount)
                expired.append(reservation)
        self._reclaimed += len(expired)
        return [Reclaimed(reservation, now) for reservation in expired]

    def restore(self, settled: Decimal, outstanding: list[Reservation]) -> None:
        """Rebuild after a restart from journaled settles and leases still open."""
        self.settled = settled
        self._outstanding, self._held, self._expiries = {}, Decimal(0), []
        for reservation in outstanding:
            self._open(reservation)

    def statistics(self) -> BudgetStatistics:
        outstanding = self.outstanding
        return BudgetStatistics(
            allocation_usd=usd(self.allocation),
            settled_usd=usd(self.settled),
            outstanding_usd=usd(outstanding),
            remaining_usd=usd(self.allocation - self.settled - outstanding),
            reservations=len(self._outstanding),
            granted=self._granted,
            blocked=self._blocked,
            reclaimed=self._reclaimed,
        )
