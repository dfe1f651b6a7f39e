"""A third campaign kind, defined here alone and registered with one line, runs under the
daemon and in a grid, and reads in their statuses and views: nothing outside this file
names it."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import msgspec
import pytest
from rich.console import Console

import meters
from mw_actors import kinds
from mw_actors.daemon import (
    Daemon,
    DaemonOptions,
    ListCampaigns,
    Status,
    Submit,
    campaign_status,
    connect,
    status_line,
)
from mw_actors.daemon._attach import render
from mw_actors.grid import (
    GRID_RECORDS,
    GridPlace,
    LocalExecutor,
    attach_grid,
    describe_status,
    grid_status_now,
    leaderboard_csv,
    leaderboard_html,
    load_grid,
    run_grid,
)
from mw_actors.journal import Entry, Record, open_journal, read_journal
from mw_actors.metering import BUDGET_RECORDS, BudgetReserved
from mw_errors import ConfigError, MwError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class NapStarted(Record, tag="nap.started", frozen=True):
    tag: str
    naps: int


class Napped(Record, tag="nap.napped", frozen=True):
    number: int


class NapEnded(Record, tag="nap.ended", frozen=True):
    state: str


class NapSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    naps: int
    seconds: float = 0.01
    allocation_usd: Decimal = Decimal("1")


NAP_RECORDS = (NapStarted, Napped, NapEnded)


class NapRun(kinds.Lifecycle[int]):
    """Its run, under the lifecycle every kind shares: each nap reserved from the budget
    and recorded, then the end record, then a file of its naps (the outputs)."""

    def __init__(self, root: Path, tag: str, nap: NapSpec) -> None:
        self.root, self.journal, self.tag, self.nap = root, root / "journal", tag, nap
        self.records, self.allocation = Naps.records, nap.allocation_usd

    async def started(self, stage: kinds.Stage) -> None:
        await stage.tree.journal.append(NapStarted(tag=self.tag, naps=self.nap.naps))

    async def run(self, stage: kinds.Stage) -> int:
        for number in range(self.nap.naps):
            granted = await stage.tree.budget.reserve(Decimal("0.01"), f"{self.tag}/nap{number}")
            assert isinstance(granted, meters.Granted)
            await stage.tree.budget.release(granted.id)
            await anyio.sleep(self.nap.seconds)
            await stage.tree.journal.append(Napped(number=number))
        return self.nap.naps

    async def ended(self, stage: kinds.Stage, result: int) -> None:
        await stage.tree.journal.append(NapEnded(state="completed"))

    def write_outputs(self, result: int) -> None:
        (self.root / "naps.txt").write_text(f"{result} naps\n")


async def _nap(root: Path, tag: str, nap: NapSpec, budget: meters.Reserver | None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    await kinds.run_kind(NapRun(root, tag, nap), budget=budget)


# -- its grid: one cell per number of naps --------------------------------------------------


class NapCell(msgspec.Struct, frozen=True):
    tag: str
    naps: int


class NapGridSpec(msgspec.Struct, frozen=True, kw_only=True):
    tag: str
    cells: list[NapCell]
    allocation_usd: Decimal
    runs: str | None = None
    max_parallel: int | None = None
    kind: Literal["nap"] = "nap"

    def identity(self) -> dict[str, Any]:
        cells = [c.tag for c in self.cells]
        return {"cells": cells, "settings": {}, "allocation_usd": str(self.allocation_usd)}


class _NapGridFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tag: str
    allocation: str | int | float
    naps: list[int]
    kind: str = "nap"
    runs: str | None = None
    max_parallel: int | None = None


class NapOutcome(msgspec.Struct, frozen=True, kw_only=True):
    kind: ClassVar[str] = "nap"
    tag: str
    state: str
    naps_taken: int
    cost_usd: str = "0.00"


@dataclass(frozen=True)
class NapJob:
    tag: str
    journal: Path
    naps: int

    async def run(self, budget: meters.Reserver) -> None:
        await _nap(self.journal.parent, self.tag, NapSpec(naps=self.naps), budget)


class NapGrid:
    title: str = "a nap grid"
    fields: tuple[str, ...] = ("naps",)
    names: int = 1  # cell
    grid_type: type[Any] = NapGridSpec

    def grid(
        self, raw: Mapping[str, Any], source: str, base: Path, allocation: Decimal
    ) -> NapGridSpec:
        try:
            file = msgspec.convert(raw, _NapGridFile)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{source} is not a nap grid: {exc}", hint="naps: [1, 2]") from None
        cells = [NapCell(f"{file.tag}.{n}", n) for n in file.naps]
        return NapGridSpec(tag=file.tag, cells=cells, allocation_usd=allocation)

    def check(self, grid: NapGridSpec, context: kinds.GridContext) -> None:
        if any(c.naps < 0 for c in grid.cells):
            raise ConfigError("a cell naps fewer than 0 times", hint="naps: [0, 1, ...]")

    def lay_out(self, grid: NapGridSpec, root: Path) -> None:
        pass

    def job(
        self,
        grid: NapGridSpec,
        cell: NapCell,
        root: Path,
        cells: Path,
        *,
        resume: bool,
        context: kinds.GridContext,
    ) -> NapJob:
        return NapJob(cell.tag, cells / cell.tag / "journal", cell.naps)

    def outcome(self, grid: NapGridSpec, cells: Path, cell: NapCell) -> NapOutcome:
        journal = cells / cell.tag / "journal"
        records = [e.rec for e in read_journal(journal, Naps.records)] if journal.is_dir() else []
        ended = any(isinstance(r, NapEnded) for r in records)
        taken = sum(isinstance(r, Napped) for r in records)
        state = "completed" if ended else "unknown" if records else "pending"
        return NapOutcome(tag=cell.tag, state=state, naps_taken=taken)

    def lines(self, grid: NapGridSpec, cells: Path, cell: NapCell) -> list[meters.LedgerLine]:
        return []  # a nap spends nothing

    def leaderboard(self, outcomes: Sequence[NapOutcome]) -> tuple[list[str], list[dict[str, str]]]:
        return ["cell", "naps"], [{"cell": o.tag, "naps": str(o.naps_taken)} for o in outcomes]

    def section(self, cells: Sequence[Mapping[str, Any]]) -> kinds.Section:
        rows = [(c["tag"], c["state"], f"{c['naps_taken']} naps") for c in cells]
        return kinds.Section(title="cells", columns=("cell", "state", "naps"), rows=rows)

    def status_line(self, cell: Mapping[str, Any]) -> str:
        return f"{cell['state']}, {cell['naps_taken']} naps taken"

    def html(
        self, outcomes: Sequence[NapOutcome], columns: list[str], rows: list[dict[str, str]]
    ) -> str:
        return "<p>every nap was quiet</p>"

    def verify(self, cells: Path, outcomes: Sequence[NapOutcome]) -> None:
        pass


class Naps:
    """A kind that only sleeps and records: each nap a record, then its end."""

    name: str = "nap"
    records: Sequence[type[Record]] = (*BUDGET_RECORDS, *NAP_RECORDS)
    started: type[Record] = NapStarted
    resumable: bool = False
    progress_keys: tuple[str, ...] = ("naps_taken",)
    spend_roles: tuple[str, ...] = ()  # a nap spends nothing
    grid: kinds.GridKind | None = NapGrid()
    abandoned: ClassVar[list[Path]] = []

    async def prepare(
        self, tag: str, spec: Mapping[str, Any], *, resume: bool, context: kinds.Context
    ) -> tuple[kinds.Runner, str]:
        try:
            nap = msgspec.convert(spec, NapSpec)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"a nap campaign's spec: {exc}", hint='send {"naps": 3}') from None
        return partial(_nap, context.runs / tag, tag, nap, None), str(nap.allocation_usd)

    async def abandon(self, run: Path) -> None:
        self.abandoned.append(run)

    def summary(self, run: Path, records: Sequence[Record]) -> kinds.Summary:
        ended = [r for r in records if isinstance(r, NapEnded)]
        return kinds.Summary(
            progress={"naps_taken": sum(isinstance(r, Napped) for r in records)},
            spend_usd={},
            allocation_usd="0",
            final="completed" if ended else None,
        )

    def progress_line(self, progress: Mapping[str, int]) -> str:
        return f"{progress.get('naps_taken', 0)} naps taken"

    def view(self, entries: Sequence[Entry], progress: Mapping[str, int]) -> kinds.View:
        start = next(e.rec for e in entries if isinstance(e.rec, NapStarted))
        naps = kinds.Bar("naps", progress.get("naps_taken", 0), start.naps)
        return kinds.View(bars=[naps], milestones=["the last nap was quiet"])


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setitem(kinds.KINDS, "nap", Naps())  # the one registry line
    path = Path(tempfile.mkdtemp(prefix="mwk-"))  # a Unix socket's path is short
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_new_kind_runs_under_the_daemon_and_reads_in_its_status(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with connect(runs) as control:
            submitted = await control.request(Submit(kind="nap", tag="n1", spec={"naps": 3}))
            assert submitted["kind"] == "nap" and submitted["progress"] == {"naps_taken": 0}
            assert submitted["spend_usd"] == {}  # its own roles: none
            with anyio.fail_after(30):
                while (now := await control.request(Status(tag="n1")))["state"] != "completed":
                    await anyio.sleep(0.02)
            assert now["progress"] == {"naps_taken": 3}
            listed = await control.request(ListCampaigns())
            assert [c["kind"] for c in listed] == ["nap"]
            with pytest.raises(MwError, match="a nap campaign's spec"):
                await control.request(Submit(kind="nap", tag="n2", spec={"nap": 3}))
            with pytest.raises(MwError, match="unknown campaign kind 'siesta'"):
                await control.request(Submit(kind="siesta", tag="n3", spec={}))
            assert not (runs / "n2").exists() and not (runs / "n3").exists()
        daemon.stop()
    status = campaign_status(runs / "n1")  # from the run directory alone, as `mw status`
    assert (status.kind, status.state) == ("nap", "completed")
    assert status_line(msgspec.to_builtins(status)).startswith("n1: nap, completed; 3 naps taken")
    console = Console(record=True, width=100)
    console.print(render(runs / "n1", deque())[0])  # `mw attach --once`'s frame
    frame = console.export_text()
    assert "n1  (nap, completed)" in frame and "3/3" in frame and "quiet" in frame, frame
    written = [type(e.rec) for e in read_journal(runs / "n1" / "journal", Naps.records)]
    assert [t for t in written if t in NAP_RECORDS] == [NapStarted, *[Napped] * 3, NapEnded]
    assert (runs / "n1" / "naps.txt").read_text() == "3 naps\n"  # its outputs, after its end


async def test_a_run_of_a_kind_that_never_continues_is_abandoned_on_restart(runs: Path) -> None:
    """The daemon died mid-run: a kind that does not resume ends what was in flight."""
    journal = runs / "n1" / "journal"
    async with open_journal(journal, record_types=Naps.records) as out:
        await out.append(NapStarted(tag="n1", naps=3))
    registry = Daemon(runs, DaemonOptions()).paths.registry
    registry.mkdir(parents=True, exist_ok=True)
    entry = {"kind": "nap", "tag": "n1", "spec": {"naps": 3}}
    (registry / "n1.json").write_text(json.dumps(entry))
    Naps.abandoned.clear()
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        daemon.stop()
    assert Naps.abandoned == [runs / "n1"]
    assert campaign_status(runs / "n1").state == "failed"  # no end: nothing pretends it ran


async def test_a_new_kind_runs_in_a_grid_under_one_budget_and_reads_in_its_status(
    runs: Path,
) -> None:
    path = runs / "naps.yaml"
    path.write_text("tag: nn\nkind: nap\nnaps: [1, 3]\nallocation: 1\n")
    grid = load_grid(path)
    outcomes = await run_grid(grid, runs, kinds.GridContext(), executor=LocalExecutor(2))
    assert [(o.tag, o.state, o.naps_taken) for o in outcomes] == [
        ("nn.1", "completed", 1),
        ("nn.3", "completed", 3),
    ]
    place = GridPlace(runs, "nn")
    assert place.leaderboard.read_text() == "cell,naps\nnn.1,1\nnn.3,3\n"
    assert leaderboard_csv(outcomes) == place.leaderboard.read_text()
    assert "every nap was quiet" in leaderboard_html(outcomes, title="naps")
    # Each nap reserved from the grid's one budget: its journal holds them all.
    reserved = [
        e.rec
        for e in read_journal(place.journal, [*GRID_RECORDS, *BUDGET_RECORDS])
        if isinstance(e.rec, BudgetReserved)
    ]
    assert len(reserved) == 4
    status = grid_status_now(runs, "nn")  # from the files alone, as `mw grid status`
    assert status["kind"] == "nap" and status["state"] == "completed"
    assert describe_status(status).splitlines()[1:] == [
        "  nn.1: completed, 1 naps taken",
        "  nn.3: completed, 3 naps taken",
    ]
    console = Console(record=True, width=100)
    assert await attach_grid(runs, "nn", console=console, once=True) == "completed"
    frame = console.export_text()
    assert "grid nn  (completed)" in frame and "3 naps" in frame, frame
    again = await run_grid(load_grid(path), runs, kinds.GridContext(), executor=LocalExecutor(1))
    assert [o.state for o in again] == ["completed", "completed"]  # nothing ran twice
    with pytest.raises(ConfigError, match="naps belong to a nap grid, not kind: serve-learn"):
        path.write_text("tag: nx\nnaps: [1]\nallocation: 1\n")
        load_grid(path)
