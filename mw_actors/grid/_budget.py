"""The grid's one budget, lent to each cell under the cell's own name.

Every cell's meters reserve from the grid's single reserver, so no cell can
spend past the grid's allocation. A meter recovers, at its start, the open
reservations of its own role that a dead meter left: with many cells on one
reserver, a cell's host meter must see only its own cell's. ``CellBudget``
prefixes each holder with the cell's tag and shows a cell only the open
reservations it made.
"""

from __future__ import annotations

from decimal import Decimal

import msgspec

from meters import Blocked, Granted, Reservation, Reserver

__all__ = ["CellBudget"]

SEPARATOR = "|"  # never in a tag, nor the start of a meter's holder (role:attempt:...)


class CellBudget:
    """``budget`` as one cell sees it (a :class:`meters.Reserver`)."""

    def __init__(self, budget: Reserver, cell: str) -> None:
        self.budget = budget
        self.prefix = f"{cell}{SEPARATOR}"

    async def reserve(self, amount: Decimal, holder: str) -> Granted | Blocked:
        return await self.budget.reserve(amount, self.prefix + holder)

    async def settle(self, reservation_id: str, actual: Decimal) -> None:
        await self.budget.settle(reservation_id, actual)

    async def release(self, reservation_id: str) -> None:
        await self.budget.release(reservation_id)

    async def open_reservations(self) -> list[Reservation]:
        """This cell's open reservations, each under the holder its meter gave."""
        return [
            msgspec.structs.replace(r, holder=r.holder.removeprefix(self.prefix))
            for r in await self.budget.open_reservations()
            if r.holder.startswith(self.prefix)
        ]
