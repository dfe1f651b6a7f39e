"""The grid driver's journal records (kinds ``grid.*``).

The grid's journal is the driver's: which cells it started and how each run
of a cell ended. Each cell's own campaign journal stays the truth about the
cell (its episodes, its end); a cell whose campaign has no end record reads
``unknown``, whatever the driver's journal says.
"""

from __future__ import annotations

from typing import Any, Literal

from .._core import Record

__all__ = ["GRID_RECORDS", "CellEnded", "CellStarted", "GridEnded", "GridStarted"]

CellState = Literal["completed", "budget_blocked", "failed", "cancelled"]


class GridStarted(Record, tag="grid.started", frozen=True):
    tag: str
    cells: list[str]  # the cells' tags, in the grid's order
    allocation_usd: str
    settings: dict[str, Any]  # what every cell is given (GridSpec.identity)
    executor: str


class CellStarted(Record, tag="grid.cell_started", frozen=True):
    cell: str
    resume: bool  # its campaign journal existed: the run resumes it


class CellEnded(Record, tag="grid.cell_ended", frozen=True):
    cell: str
    state: CellState
    reason: str | None = None


class GridEnded(Record, tag="grid.ended", frozen=True):
    cells: dict[str, str]  # cell tag -> the state its campaign ended in


GRID_RECORDS: tuple[type[Record], ...] = (GridStarted, CellStarted, CellEnded, GridEnded)
