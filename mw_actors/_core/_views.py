"""Projections that rebuild the supervision state from a journal.

``mw status`` without a daemon, crash recovery and the tests all read the
actor tree this way: from records, never from a live process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from mw_errors import JournalError

from ._journal import Entry, read_journal, rebuild
from ._records import ActorExit, ActorSpawn, SupervisorGiveUp, SupervisorRestart

__all__ = ["ActorView", "SupervisionView", "journal_summary"]


class ActorView(msgspec.Struct):
    """One actor as its records tell it."""

    name: str
    supervisor: str = ""
    runs: int = 0
    exits: int = 0
    restarts: int = 0
    last_exit: str | None = None
    open_runs: list[int] = msgspec.field(default_factory=list)
    terminal_per_run: dict[int, int] = msgspec.field(default_factory=dict)

    @property
    def alive(self) -> bool:
        """A run was spawned and has no terminal record: running, or died without one."""
        return bool(self.open_runs)


class SupervisionView:
    """Projection: actor name -> :class:`ActorView`, plus give-ups."""

    def initial(self) -> dict[str, ActorView]:
        return {}

    def apply(self, state: dict[str, ActorView], entry: Entry) -> dict[str, ActorView]:
        rec = entry.rec
        if isinstance(rec, ActorSpawn):
            view = state.setdefault(rec.actor, ActorView(rec.actor))
            view.supervisor = rec.supervisor
            view.runs += 1
            view.open_runs.append(rec.run)
            view.terminal_per_run.setdefault(rec.run, 0)
        elif isinstance(rec, ActorExit):
            view = state.setdefault(rec.actor, ActorView(rec.actor))
            view.exits += 1
            view.last_exit = str(rec.reason)
            view.terminal_per_run[rec.run] = view.terminal_per_run.get(rec.run, 0) + 1
            if rec.run in view.open_runs:
                view.open_runs.remove(rec.run)
        elif isinstance(rec, SupervisorRestart):
            view = state.setdefault(rec.trigger, ActorView(rec.trigger))
            view.restarts += 1
        elif isinstance(rec, SupervisorGiveUp):
            state.setdefault(rec.supervisor, ActorView(rec.supervisor))
        return state


def journal_summary(path: Path, record_types: list[type[Any]]) -> dict[str, Any]:
    """What ``mw journal check`` prints of a journal (or a run directory's).

    Reading it checks it whole (a gap or a bad line in the middle raises).
    Lists the runs without a terminal record, by actor.

    Raises:
        JournalError: no journal there, or it is damaged.
    """
    if (path / "journal").is_dir():  # a run directory: its journal
        path = path / "journal"
    entries = read_journal(path, record_types)
    if not entries:
        raise JournalError(
            f"{path}: no journal here (no records)", hint="pass a journal or a run directory"
        )
    views = rebuild(SupervisionView(), entries)
    return {
        "path": str(path),
        "records": len(entries),
        "last_seq": entries[-1].seq,
        "actors": len(views),
        "runs_without_terminal_record": {
            name: v.open_runs for name, v in views.items() if v.open_runs
        },
    }
