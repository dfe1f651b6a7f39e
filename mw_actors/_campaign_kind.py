"""What a kind of campaign is to the parts that run and show campaigns of every kind.

The daemon, ``mw status`` and the status a daemon serves ask a kind, never its
name: how a submitted spec becomes a runner (every check made before anything
is written), what its journal holds, whether a run that stopped without its end
continues, and how its progress, spend and end read from its records. A kind is
one object (:class:`CampaignKind`), registered by name in ``mw_actors.kinds``.

Its lifecycle, as the daemon drives it::

    submit(kind, tag, spec)   prepare(tag, spec, resume=False, context) -> (runner, allocation)
                              refused here: nothing registered, nothing written
    run                       await runner(): run_kind(the kind's Lifecycle) locks the run,
                              opens its tree, resumes or starts, runs, stops its meters,
                              writes the end record and the outputs (mw_actors._lifecycle)
    daemon restarts           a registered run without its end record: resumable kinds
                              are prepared again with resume=True; the others abandon()
                              it (what was in flight ends as unknown) and are not rerun
    status                    summary(run, records): progress, spend, allocation, end

A kind that runs in grids has a :class:`GridKind` too (``grid``; None where it
has none): how a grid file names its cells, how each cell runs under the grid's
one budget, and how a cell reads from its run directory, in a leaderboard, a
status and a page. ``mw_actors.grid`` drives every kind's grids through it::

    load_grid(path)     grid(raw, source, base, allocation) -> Grid  (every check)
    run_grid            check(grid, context) once, writing nothing; lay_out(grid, root);
                        job(grid, cell, root, cells, resume, context).run(budget) per cell
    status, report      outcome(grid, cells, cell) per cell; leaderboard(outcomes);
                        section(cells), status_line(cell), html(outcomes, columns, rows)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from ._core import Entry, Record

if TYPE_CHECKING:
    import meters

__all__ = [
    "Bar",
    "CampaignKind",
    "CellRunner",
    "Context",
    "Grid",
    "GridContext",
    "GridKind",
    "Outcome",
    "Runner",
    "Section",
    "State",
    "Summary",
    "View",
]

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
    """A table of ``mw attach``: its title, columns and rows, and a line under it.

    A cell is text, or a :class:`Bar` (drawn as a progress bar with ``done/total``).
    The first ``names`` columns name the row and are left-aligned, as is a column
    with no header or with bars; the others are figures, right-aligned.
    """

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str | Bar, ...]]
    footer: str = ""
    names: int = 1


@dataclass(frozen=True)
class View:
    """What ``mw attach`` shows of a run, beside what every run has (actors, spend, events)."""

    bars: list[Bar] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # label, text (time left)
    sections: list[Section] = field(default_factory=list)
    milestones: list[str] = field(default_factory=list)  # the journal's, newest last


@dataclass(frozen=True)
class GridContext:
    """What the program (``bin/``) gives a grid's cells.

    ``environ``: its environment, read once (the launch settings a cell's flags do not
    give); ``settings``: the kind's own (an editing grid: how its trials run).
    """

    environ: Mapping[str, str] = field(default_factory=dict)
    settings: Any = None


class Grid(Protocol):
    """A grid file, checked: what ``grid.json`` holds, and what a resume must find again."""

    @property
    def tag(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def cells(self) -> Sequence[Any]: ...  # each with its ``tag``, in the grid's order
    @property
    def allocation_usd(self) -> Decimal: ...
    @property
    def runs(self) -> str | None: ...
    @property
    def max_parallel(self) -> int | None: ...
    def identity(self) -> dict[str, Any]: ...


class CellRunner(Protocol):
    """One cell's campaign, ready to run (a Ray executor ships it to a worker)."""

    async def run(self, budget: meters.Reserver) -> None: ...


class Outcome(Protocol):
    """A cell as its run directory stands (a msgspec Struct: a status shows its fields)."""

    kind: ClassVar[str]  # the kind's name: a leaderboard of outcomes asks that kind

    @property
    def tag(self) -> str: ...
    @property
    def state(self) -> str: ...  # a CellState
    @property
    def cost_usd(self) -> str: ...


class GridKind(Protocol):
    title: str  # "a serve-and-learn grid": how an error names a grid of this kind
    fields: tuple[str, ...]  # its grid file's own fields (beside tag, kind, allocation, ...)
    names: int  # the leaderboard's leading columns that name a row (left-aligned)
    grid_type: type[Any]  # its Grid, as grid.json holds it

    def grid(self, raw: Mapping[str, Any], source: str, base: Path, allocation: Decimal) -> Grid:
        """The grid ``raw`` (a grid file, decoded) names, checked; its paths relative to ``base``.

        Raises:
            ConfigError: the file names something wrong (one line: what, and what to do).
        """
        ...

    def check(self, grid: Any, context: GridContext) -> None:
        """Every cell checked as its own command checks a campaign, writing nothing."""
        ...

    def lay_out(self, grid: Any, root: Path) -> None:
        """The grid's own files under ``root`` that its cells need (before any cell runs)."""
        ...

    def job(
        self, grid: Any, cell: Any, root: Path, cells: Path, *, resume: bool, context: GridContext
    ) -> CellRunner:
        """The cell's campaign, into ``cells/<tag>``; ``resume``: its run directory exists."""
        ...

    def outcome(self, grid: Any, cells: Path, cell: Any) -> Outcome: ...

    def lines(self, grid: Any, cells: Path, cell: Any) -> list[meters.LedgerLine]:
        """Every ledger line the cell's meters wrote so far (the grid's budget settles by them)."""
        ...

    def leaderboard(self, outcomes: Sequence[Any]) -> tuple[list[str], list[dict[str, str]]]:
        """The leaderboard's columns, and its rows (each a dict of strings)."""
        ...

    def section(self, cells: Sequence[Mapping[str, Any]]) -> Section:
        """The cells' table in ``mw attach GRID`` (each cell as the status gives it)."""
        ...

    def status_line(self, cell: Mapping[str, Any]) -> str:
        """A cell's line in ``mw grid status`` (after its tag)."""
        ...

    def html(self, outcomes: Sequence[Any], columns: list[str], rows: list[dict[str, str]]) -> str:
        """The report page's part beneath the leaderboard: the cells, and the kind's figures."""
        ...

    def verify(self, cells: Path, outcomes: Sequence[Any]) -> None:
        """Before a report: the ended cells' evidence checked (raises IntegrityError)."""
        ...


class CampaignKind(Protocol):
    name: str  # as submitted and shown: "serve-learn"
    records: Sequence[type[Record]]  # its journal's records, beside the budget's
    started: type[Record]  # the record a run of this kind starts its journal with
    resumable: bool  # a run stopped without its end record continues where it stopped
    progress_keys: tuple[str, ...]  # the counts its progress holds, in the order shown
    spend_roles: tuple[str, ...]  # the meters' roles its spend is read by, in the order shown
    grid: GridKind | None  # how it runs in a grid (None: it does not)

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
