"""A cell's state, for a grid of either kind, read from its run directory alone.

- ``pending``: no campaign journal yet;
- ``running``: a live process holds its campaign lock;
- ``completed``, ``budget_blocked``, ``failed``: its campaign's end record;
- ``unknown``: a journal with no end record and nobody running it (a killed
  driver or node). It has no score: only an ended campaign is scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from .._lock import is_locked

__all__ = ["ENDED", "CellState", "run_state"]

CellState = Literal["pending", "running", "unknown", "completed", "budget_blocked", "failed"]
ENDED = ("completed", "budget_blocked", "failed")


def run_state(root: Path, journal: Path, ended: CellState | None) -> CellState:
    """A run's state (of either kind): ``ended``, the state its end record gives, if any.

    ``pending`` without a journal, ``running`` while a live process holds its lock,
    ``unknown`` with a journal, no end and nobody running it.
    """
    if not journal.is_dir():
        return "pending"
    if ended is not None:
        return ended
    return "running" if is_locked(root) else "unknown"
