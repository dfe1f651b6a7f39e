"""What a kind of campaign is to the parts that run and show campaigns of every kind.

The daemon, ``mw status`` and the status a daemon serves ask a kind, never its
name: how a submitted spec becomes a runner (every check made before anything
is written), what its journal holds, whether a run that stopped without its end
continues, and how its progress, spend and end read from its records. A kind is
one object (:class:`CampaignKind`), registered by name in ``mw_actors.kinds``.

Its lifecycle, as the daemon drives it::

    submit(kind, tag, spec)   prepare(tag, spec, resume=False, context) -> (runner, allocation)
                              refused here: nothing registered, nothing written
    run                       await runner()  (the kind's own campaign tree: lock, journal,
                              start record, ..., end record, outputs)
    daemon restarts           a registered run without its end record: resumable kinds
                              are prepared again with resume=True; the others abandon()
                              it (what was in flight ends as unknown) and are not rerun
    status                    summary(run, records): progress, spend, allocation, end
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ._core import Entry, Record

__all__ = ["Bar", "CampaignKind", "Context", "Runner", "Section", "State", "Summary", "View"]

State = Literal["running", "completed", "failed", "cancelled", "budget_blocked"]
Runner = Callable[[], Awaitable[Any]]  # runs the campaign to its end records


@dataclass(frozen=True)
class Context:
    """Where a kind's campaigns run, and what the program (``bin/``) decided for them."""

    runs: Path
    secret: Callable[[str], str | None] = field(default=lambda name: None, repr=False)
    settings: Any = None  # this kind's own (weight editing: its CampaignOptions)


@dataclass(frozen=True)
class Summary:
    """What a run's records say of it: progress by name, spend by meter, allocation, end."""

    progress: dict[str, int]
    spend_usd: dict[str, str]
    allocation_usd: str
    final: State | None  # its end record's state; None while it has none


@dataclass(frozen=True)
class Bar:
    """A progress bar of ``mw attach``: ``done`` of ``total``, and a note beside it."""

    label: str
    done: int
    total: int
    note: str = ""


@dataclass(frozen=True)
class Section:
    """A table of ``mw attach``, as text: its title, columns and rows, and a line under it."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    footer: str = ""


@dataclass(frozen=True)
class View:
    """What ``mw attach`` shows of a run, beside what every run has (actors, spend, events)."""

    bars: list[Bar] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # label, text (time left)
    sections: list[Section] = field(default_factory=list)
    milestones: list[str] = field(default_factory=list)  # the journal's, newest last


class CampaignKind(Protocol):
    name: str  # as submitted and shown: "serve-learn"
    records: Sequence[type[Record]]  # its journal's records, beside the budget's
    started: type[Record]  # the record a run of this kind starts its journal with
    resumable: bool  # a run stopped without its end record continues where it stopped
    progress_keys: tuple[str, ...]  # the counts its progress holds, in the order shown

    async def prepare(
        self, tag: str, spec: Mapping[str, Any], *, resume: bool, context: Context
    ) -> tuple[Runner, str]:
        """The runner of campaign ``tag`` and its allocation (USD); every check made here.

        Raises:
            ConfigError: the spec, or what it names, is refused (nothing written).
        """
        ...

    async def abandon(self, run: Path) -> None:
        """A run that stopped without its end and is not continued: end what was in flight."""
        ...

    def summary(self, run: Path, records: Sequence[Record]) -> Summary:
        """What the run's records (its journal's, in order) say of it."""
        ...

    def progress_line(self, progress: Mapping[str, int]) -> str:
        """Its progress in words, as ``mw status`` prints it."""
        ...

    def view(self, entries: Sequence[Entry], progress: Mapping[str, int]) -> View:
        """What ``mw attach`` shows of the run (its journal's entries, in order)."""
        ...
