"""The budget reserver: one actor owns a campaign's allocation.

It wraps :class:`meters.Budget` and journals every decision before answering:
a reservation is on disk (``evidence``) before the meter may forward the
request it covers, so a ``kill -9`` never forgets money that may be spent.
Requests that arrive together share one fsync (group commit): each is decided
in turn, and all are answered once the fsync covering them returns.
After a restart the budget is rebuilt from those records, and from the
ledger: a reservation whose ledger line exists is settled at the line's
cost. Leases whose holder never came back are reclaimed, charged at their
reserved amount (the request may have been billed), and the reclaim is
recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import anyio
import msgspec

from meters import Blocked, Budget, Granted, LedgerLine, Reservation

from ._core import Actor, ActorContext, ActorRef, Record, ReplySlot

__all__ = [
    "BUDGET_RECORDS",
    "BudgetReclaimed",
    "BudgetReserved",
    "BudgetReserver",
    "BudgetSettled",
    "ReserverClient",
    "rebuild_budget",
]


MOST_AT_ONCE = 256  # requests answered with one fsync


class BudgetReserved(Record, tag="budget.reserved", frozen=True):
    id: str
    amount: str
    holder: str
    expires_wall: float
    reserved_wall: float = 0.0


class BudgetSettled(Record, tag="budget.settled", frozen=True):
    id: str
    actual: str


class BudgetReleased(Record, tag="budget.released", frozen=True):
    id: str


class BudgetReclaimed(Record, tag="budget.reclaimed", frozen=True):
    id: str
    holder: str
    charged: str


class BudgetBlocked(Record, tag="budget.blocked", frozen=True):
    holder: str
    requested: str
    remaining: str


BUDGET_RECORDS: tuple[type[Record], ...] = (
    BudgetReserved,
    BudgetSettled,
    BudgetReleased,
    BudgetReclaimed,
    BudgetBlocked,
)


class _Reserve(msgspec.Struct, frozen=True):
    amount: str
    holder: str


class _Settle(msgspec.Struct, frozen=True):
    id: str
    actual: str


class _Release(msgspec.Struct, frozen=True):
    id: str


def _replay(records: Iterable[Record]) -> tuple[Decimal, dict[str, Reservation]]:
    """What the journal alone says: the amount settled, and the reservations still open."""
    settled = Decimal(0)
    open_: dict[str, Reservation] = {}
    for rec in records:
        if isinstance(rec, BudgetReserved):
            open_[rec.id] = Reservation(
                rec.id, rec.amount, rec.holder, rec.expires_wall, rec.reserved_wall
            )
        elif isinstance(rec, BudgetSettled):
            open_.pop(rec.id, None)
            settled += Decimal(rec.actual)
        elif isinstance(rec, BudgetReleased):
            open_.pop(rec.id, None)
        elif isinstance(rec, BudgetReclaimed):
            open_.pop(rec.id, None)
            settled += Decimal(rec.charged)
    return settled, open_


def _charged_by_ledger(
    open_: dict[str, Reservation], ledger: Sequence[LedgerLine]
) -> dict[str, str]:
    """Open reservations whose attempt has a ledger line: id -> the line's cost."""
    costs = {line.reservation_id: line.cost_usd for line in ledger if line.reservation_id}
    return {rid: costs[rid] for rid in open_ if rid in costs}


def rebuild_budget(
    budget: Budget, records: Iterable[Record], ledger: Sequence[LedgerLine] = ()
) -> list[Reservation]:
    """Restore ``budget`` from its journal records (and ledger lines); return open leases."""
    settled, open_ = _replay(records)
    for rid, cost in _charged_by_ledger(open_, ledger).items():
        del open_[rid]
        settled += Decimal(cost)
    budget.restore(settled, list(open_.values()))
    return list(open_.values())


class BudgetReserver(Actor[Any]):
    """Reserve / settle / release on a cumulative allocation, journaled, restart-safe."""

    def __init__(
        self,
        allocation: Decimal,
        *,
        lease_seconds: float = 900.0,
        ledger: Sequence[LedgerLine] = (),
    ) -> None:
        self.budget = Budget(allocation, lease_seconds=lease_seconds)
        self.ledger = ledger
        self._waiting: list[ReplySlot] = []  # "freed" asks: a blocked request waits to ask again
        self._freed = False  # a settle or release in this batch

    async def init(self, ctx: ActorContext) -> object:
        self.ctx = ctx
        journal = ctx.journal
        if journal is not None:
            settled, open_ = _replay(await journal.replay(*BUDGET_RECORDS))
            # A meter that wrote its line but died before settling: the ledger settles it,
            # and the journal is told, so it agrees with the ledger on its own.
            for rid, cost in _charged_by_ledger(open_, self.ledger).items():
                del open_[rid]
                settled += Decimal(cost)
                await journal.append(BudgetSettled(id=rid, actual=cost))
            self.budget.restore(settled, list(open_.values()))
        return None

    def _record(self, record: Record) -> None:
        """Journal ``record``; it is durable once the batch it is in is synced."""
        journal = self.ctx.journal
        if journal is not None:
            journal.append_nowait(record, durability="evidence")

    def _reclaim(self) -> None:
        for reclaimed in self.budget.reclaim_expired(self.ctx.clock.wall()):
            lease = reclaimed.reservation
            self._record(BudgetReclaimed(id=lease.id, holder=lease.holder, charged=lease.amount))
            self.ctx.log.warning("budget_lease_reclaimed", id=lease.id, holder=lease.holder)

    async def run(self, ctx: ActorContext) -> None:
        """Answer the requests that arrived together with one fsync (group commit).

        Each is decided in turn, in memory, and its record journaled; none is
        answered before the fsync that covers them all, so a ``kill -9`` never
        loses a grant that a meter acted on. An error fails the whole batch.
        """
        while True:
            try:
                batch = await ctx.receive_waiting(MOST_AT_ONCE)
            except anyio.EndOfStream:
                return
            answers: list[tuple[ReplySlot | None, object]] = []
            for envelope in batch:
                if envelope.message == "freed":
                    if envelope.reply is not None:  # answered on a settle or release
                        self._waiting.append(envelope.reply)
                else:
                    answers.append((envelope.reply, self._decide(envelope.message)))
            if ctx.journal is not None:
                await ctx.journal.sync()
            for reply, answer in answers:
                if reply is not None:
                    reply.set(answer)
            if self._freed:  # money came back: the requests waiting for it ask again
                waiting, self._waiting, self._freed = self._waiting, [], False
                for reply in waiting:
                    reply.set(None)

    def _decide(self, message: Any) -> object:
        self._reclaim()
        if isinstance(message, _Reserve):
            outcome = self.budget.reserve(
                Decimal(message.amount), message.holder, self.ctx.clock.wall()
            )
            if isinstance(outcome, Granted):
                lease = self.budget.lease(outcome.id)
                self._record(
                    BudgetReserved(
                        id=outcome.id,
                        amount=outcome.amount,
                        holder=message.holder,
                        expires_wall=lease.expires_at,
                        reserved_wall=lease.reserved_at,
                    )
                )
            else:
                self._record(
                    BudgetBlocked(
                        holder=message.holder,
                        requested=outcome.requested,
                        remaining=outcome.remaining,
                    )
                )
            return outcome
        if isinstance(message, _Settle):
            self.budget.settle(message.id, Decimal(message.actual))
            self._record(BudgetSettled(id=message.id, actual=message.actual))
            self._freed = True
            return None
        if isinstance(message, _Release):
            self.budget.release(message.id)
            self._record(BudgetReleased(id=message.id))
            self._freed = True
            return None
        if message == "statistics":
            return self.budget.statistics()
        if message == "open":
            return self.budget.open_reservations()
        raise ValueError(f"the reserver does not understand {message!r}")


class ReserverClient:
    """The :class:`meters.Reserver` a meter uses to reach a :class:`BudgetReserver` actor."""

    def __init__(self, ref: ActorRef[Any], *, timeout: float = 30.0) -> None:
        self.ref = ref
        self.timeout = timeout

    async def reserve(self, amount: Decimal, holder: str) -> Granted | Blocked:
        outcome: Granted | Blocked = await self.ref.ask(
            _Reserve(format(amount, "f"), holder), timeout=self.timeout
        )
        return outcome

    async def settle(self, reservation_id: str, actual: Decimal) -> None:
        await self.ref.ask(_Settle(reservation_id, format(actual, "f")), timeout=self.timeout)

    async def release(self, reservation_id: str) -> None:
        await self.ref.ask(_Release(reservation_id), timeout=self.timeout)

    async def open_reservations(self) -> list[Reservation]:
        reservations: list[Reservation] = await self.ref.ask("open", timeout=self.timeout)
        return reservations

    async def freed(self) -> None:
        """Wait until a reservation is settled or released (``meters.reserve_waiting``)."""
        await self.ref.ask("freed")
