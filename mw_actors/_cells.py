"""A grid's cell, of any kind: its state and its tag.

Its state is read from its run directory alone; its tag is derived from the
grid's, and stays the same across runs.

- ``pending``: no campaign journal yet;
- ``running``: a live process holds its campaign lock;
- ``completed``, ``budget_blocked``, ``failed``: its campaign's end record;
- ``unknown``: a journal with no end record and nobody running it (a killed
  driver or node). It has no score: only an ended campaign is scored.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

from ._lock import is_locked
from ._tags import check_tag

__all__ = ["ENDED", "CellState", "run_state", "slug", "stable_tag"]

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


_NOT_IN_TAG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str, fallback: str) -> str:
    """``name`` with every run of characters a tag cannot hold as one ``-``."""
    return _NOT_IN_TAG.sub("-", name).strip("-.") or fallback


def stable_tag(parts: list[str]) -> str:
    """``parts`` joined by ``.``: a valid run name, over 128 characters cut with a digest."""
    tag = ".".join(parts)
    if len(tag) > 128:  # still stable, and still distinct: a digest of the whole name
        digest = hashlib.sha256(tag.encode()).hexdigest()[:12]
        tag = f"{tag[:115]}.{digest}"
    return check_tag(tag)
