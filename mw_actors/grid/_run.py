"""``mw grid run``: every cell of a grid to its end, under one budget, resumable.

::

    grid root (one_for_one)
     ├─ reserver    BudgetReserver(grid allocation): the grid's one budget; every
     │              cell's meters reserve from it (each cell under its own name)
     └─ cells       one_for_one; each cell a temporary child, started by the
                    executor N at a time, running one ordinary campaign

The driver's journal (``<runs>/<grid>/grid-journal``) records the grid's start,
each cell's start and end, and every reservation. Each cell is an ordinary
campaign of the grid's kind in ``<runs>/<grid>/cells/<cell>``: its own journal,
meters, ledgers and results, exactly what that kind's own command writes for it
(``mw serve-learn run``, ``wsm benchmark run``). The driver asks the kind
(``kinds.GridKind``) how each cell runs and reads; it never names a kind.

Run again on the same grid, the driver skips the cells that ended and resumes
the others from their journals: an episode a killed run left in flight ends
``unknown`` there and is never run again. The budget is rebuilt from the grid's
journal and every cell's ledgers, so a restart spends nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

import meters
from mw_errors import ConfigError, EvidenceError, MwError

from .._cells import ENDED
from .._core import (
    Actor,
    ActorContext,
    ChildSpec,
    Journal,
    Restart,
    SupervisorRef,
    SupervisorSpec,
    get_logger,
    open_runtime,
    read_journal,
    supervisor,
)
from .._lock import LOCK_NAME, campaign_lock, is_locked
from .._reserver import BUDGET_RECORDS, BudgetReserver, ReserverClient
from ..kinds import CellRunner, GridContext, Outcome
from ._budget import CellBudget
from ._grid_file import DEFAULT_KIND, AnyGrid, grid_kind
from .records import GRID_RECORDS, CellEnded, CellStarted, GridEnded, GridStarted

__all__ = [
    "CellJob",
    "Executor",
    "GridPlace",
    "GridRun",
    "LocalExecutor",
    "grid_outcomes",
    "grid_running",
    "in_grid_order",
    "read_grid",
    "run_grid",
    "run_job",
]

log = get_logger("mw.grid")

RECORDS = (*GRID_RECORDS, *BUDGET_RECORDS)  # what the driver's journal holds


class GridPlace:
    """``<runs>/<grid>/``: the grid's own files, and its cells' run directories."""

    def __init__(self, runs: Path, tag: str) -> None:
        self.root = runs / tag
        self.journal = self.root / "grid-journal"  # not `journal`: a grid is no campaign
        self.spec = self.root / "grid.json"
        self.cells = self.root / "cells"
        self.leaderboard = self.root / "leaderboard.csv"


@dataclass(frozen=True)
class CellJob:
    """One cell to run: its campaign, and whether that resumes one begun before."""

    cell: Any  # the grid's cell (its ``tag``)
    runner: CellRunner  # its campaign, as its kind runs it
    resume: bool


async def run_job(job: CellJob, budget: meters.Reserver) -> None:
    """The job's campaign, its meters reserving from ``budget`` (the cell's view of it)."""
    await job.runner.run(budget)


@dataclass
class GridRun:
    """What an executor runs the cells of, and with."""

    grid: AnyGrid
    place: GridPlace
    jobs: list[CellJob]
    journal: Journal
    budget: meters.Reserver  # the grid's one budget
    cells: SupervisorRef  # where the local executor starts each cell


class Executor(Protocol):
    """Runs a grid's cells to their ends (``local``: here; ``ray``: on a cluster)."""

    name: str

    async def run_cells(self, run: GridRun) -> None: ...


class CellRun(Actor[Any]):
    """One cell's campaign, as a child of the grid's ``cells`` supervisor."""

    def __init__(self, job: CellJob, run: GridRun, done: anyio.Event) -> None:
        self.job, self.run_, self.done = job, run, done

    async def run(self, ctx: ActorContext) -> None:
        tag = self.job.cell.tag
        journal = self.run_.journal
        await journal.append(CellStarted(cell=tag, resume=self.job.resume))
        try:
            await run_job(self.job, CellBudget(self.run_.budget, tag))
        except MwError as exc:
            log.warning("grid_cell_failed", cell=tag, error=exc.render())
            await self._end("failed", exc.render())
            return
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._end("cancelled", "the grid was stopped")
            raise
        except Exception as exc:  # a bug: still the cell's one end record, then crash
            await self._end("failed", f"internal error: {type(exc).__name__}: {exc}")
            raise
        outcome = await anyio.to_thread.run_sync(
            outcome_of, self.run_.grid, self.run_.place, self.job.cell
        )
        await self._end(outcome.state if outcome.state in ENDED else "failed", None)

    async def _end(self, state: Any, reason: str | None) -> None:
        await self.run_.journal.append(
            CellEnded(cell=self.job.cell.tag, state=state, reason=reason)
        )

    async def terminate(self, ctx: ActorContext, reason: object, interrupted: bool) -> None:
        self.done.set()


class LocalExecutor:
    """The embedded executor: cells run as supervised children here, N at a time."""

    name = "local"

    def __init__(self, max_parallel: int = 1) -> None:
        if max_parallel < 1:
            raise ConfigError(f"--max-parallel {max_parallel}", hint="run 1 or more cells at once")
        self.max_parallel = max_parallel

    async def run_cells(self, run: GridRun) -> None:
        await in_grid_order(run.jobs, self.max_parallel, partial(self._cell, run))

    async def _cell(self, run: GridRun, job: CellJob) -> None:
        done = anyio.Event()
        await run.cells.start_child(
            ChildSpec(
                id=job.cell.tag,
                start=partial(CellRun, job, run, done),
                restart=Restart.TEMPORARY,
                shutdown=60.0,  # a campaign stops its meters and writes its end
            )
        )
        await done.wait()


async def in_grid_order(
    jobs: Sequence[CellJob],
    max_parallel: int,
    run_one: Callable[[CellJob], Awaitable[None]],
) -> None:
    """Run ``run_one`` on each job, at most ``max_parallel`` at once, started in order.

    The order is the grid's: a cell starts only after every cell before it has, so
    which cells one budget covers does not depend on how the event loop schedules.
    """
    slots = anyio.Semaphore(max_parallel)

    async def one(job: CellJob) -> None:
        try:
            await run_one(job)
        finally:
            slots.release()

    async with anyio.create_task_group() as tg:
        for job in jobs:
            await slots.acquire()
            tg.start_soon(one, job)


def outcome_of(grid: AnyGrid, place: GridPlace, cell: Any) -> Outcome:
    """``cell`` of ``grid`` as its run directory stands now."""
    return grid_kind(grid.kind).outcome(grid, place.cells, cell)


def _jobs(grid: AnyGrid, place: GridPlace, context: GridContext) -> list[CellJob]:
    """The cells still to run, each with its campaign (every check before any write)."""
    kind = grid_kind(grid.kind)
    jobs = []
    for cell in grid.cells:
        outcome = kind.outcome(grid, place.cells, cell)
        if outcome.state in ENDED:
            continue
        if outcome.state == "running":
            raise ConfigError(
                f"cell {cell.tag} is running in another process",
                hint="stop that run first, or wait for it",
            )
        # Resumed whenever its run directory exists: a driver killed as the campaign laid
        # it out, before its journal began, leaves the directory without a journal.
        resume = (place.cells / cell.tag).exists()
        runner = kind.job(grid, cell, place.root, place.cells, resume=resume, context=context)
        jobs.append(CellJob(cell, runner, resume))
    return jobs


def _started(place: GridPlace) -> GridStarted | None:
    if not place.journal.is_dir():
        return None
    started = [e.rec for e in read_journal(place.journal, RECORDS)]
    return next((r for r in started if isinstance(r, GridStarted)), None)


def _prepare(grid: AnyGrid, place: GridPlace, context: GridContext) -> list[CellJob]:
    """Check the grid against what its journal began, and lay out its files."""
    began = _started(place)
    if began is not None:
        identity = grid.identity()
        journaled = {
            "cells": began.cells,
            "settings": began.settings,
            "allocation_usd": began.allocation_usd,
        }
        if identity != journaled:
            changed = ", ".join(k for k in identity if identity[k] != journaled[k])
            raise ConfigError(
                f"grid {grid.tag} under {place.root.parent} began with other {changed}",
                hint="run it with the grid file it began with, or give the new grid a new tag",
            )
    elif any(p.name != LOCK_NAME for p in place.root.iterdir()):
        raise ConfigError(
            f"{place.root} exists and holds no grid", hint="give the grid another tag, or --runs"
        )
    grid_kind(grid.kind).lay_out(grid, place.root)
    jobs = _jobs(grid, place, context)
    place.cells.parent.mkdir(parents=True, exist_ok=True)
    place.cells.parent.chmod(0o700)  # private: its cells' traces hold prompts and spend
    place.cells.mkdir(exist_ok=True)
    if not place.spec.exists():
        data = msgspec.json.format(msgspec.json.encode(grid), indent=2) + b"\n"
        meters.write_atomically(place.spec, data)
    return jobs


async def run_grid(
    grid: AnyGrid, runs: Path, context: GridContext, *, executor: Executor
) -> list[Any]:
    """Run (or resume) every cell of ``grid`` under ``runs``; each cell's outcome.

    ``context``: what the program read of its environment, and the kind's own settings
    (an editing grid's: the sandbox, the policy's credentials, what ``wsm benchmark
    run`` is given).

    A new grid's cells are all checked first, as their kind's command checks a
    campaign (in a scratch directory): a grid refused for one bad cell leaves
    nothing behind.

    Raises:
        ConfigError: a cell cannot run as given, the grid's journal began another grid,
            or another driver runs it.
    """
    place = GridPlace(runs, grid.tag)
    if not place.journal.is_dir():  # a new grid: nothing is written for one refused
        await anyio.to_thread.run_sync(grid_kind(grid.kind).check, grid, context)
    place.root.mkdir(parents=True, exist_ok=True)
    with campaign_lock(place.root):
        jobs = await anyio.to_thread.run_sync(_prepare, grid, place, context)
        lines = await anyio.to_thread.run_sync(_all_lines, grid, place)
        root = SupervisorSpec(
            strategy="one_for_one",
            intensity=3,
            period=60,
            children=[
                ChildSpec(
                    id="reserver",
                    start=lambda: BudgetReserver(grid.allocation_usd, ledger=lines),
                ),
                supervisor("cells", SupervisorSpec(strategy="one_for_one", children=[])),
            ],
        )
        async with open_runtime(journal=place.journal, record_types=RECORDS, root=root) as rt:
            assert rt.journal is not None
            if _started(place) is None:
                await rt.journal.append(
                    GridStarted(
                        tag=grid.tag,
                        cells=[c.tag for c in grid.cells],
                        allocation_usd=str(grid.allocation_usd),
                        settings=grid.identity()["settings"],
                        executor=executor.name,
                    )
                )
            run = GridRun(
                grid=grid,
                place=place,
                jobs=jobs,
                journal=rt.journal,
                budget=ReserverClient(await rt.root.child("reserver")),
                cells=await rt.root.child_supervisor("cells"),
            )
            await executor.run_cells(run)
            outcomes = await anyio.to_thread.run_sync(grid_outcomes, grid, place)
            await rt.journal.append(GridEnded(cells={o.tag: o.state for o in outcomes}))
    await anyio.to_thread.run_sync(_write_leaderboard, place, outcomes)
    return outcomes


class _Kind(msgspec.Struct):
    kind: str = DEFAULT_KIND


def read_grid(runs: Path, tag: str) -> AnyGrid:
    """The grid ``tag`` under ``runs``, as its first run recorded it.

    Raises:
        ConfigError: no grid of that tag there.
        EvidenceError: its grid.json is damaged.
    """
    place = GridPlace(runs, tag)
    if not place.spec.is_file():
        raise ConfigError(
            f"no grid {tag} under {runs}", hint="pass the grid's tag and its --runs (or $MW_RUNS)"
        )
    data = place.spec.read_bytes()
    try:
        kind = grid_kind(msgspec.json.decode(data, type=_Kind).kind)
        return msgspec.json.decode(data, type=kind.grid_type)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise EvidenceError(
            f"{place.spec} is not a grid mw wrote: {exc}",
            hint="restore it from a copy; the grid's journal and cells are untouched",
        ) from None


def grid_running(runs: Path, tag: str) -> bool:
    """Whether a driver runs the grid ``tag`` now."""
    return is_locked(GridPlace(runs, tag).root)


def grid_outcomes(grid: AnyGrid, place: GridPlace) -> list[Any]:
    """Every cell of ``grid``, as its run directory stands now, in the grid's order."""
    return [outcome_of(grid, place, cell) for cell in grid.cells]


def _all_lines(grid: AnyGrid, place: GridPlace) -> list[meters.LedgerLine]:
    """Every cell's ledger lines so far: the budget settles its open reservations by them."""
    kind = grid_kind(grid.kind)
    return [line for cell in grid.cells for line in kind.lines(grid, place.cells, cell)]


def _write_leaderboard(place: GridPlace, outcomes: Sequence[Any]) -> None:
    from ._report import leaderboard_csv

    meters.write_atomically(place.leaderboard, leaderboard_csv(outcomes).encode())
    log.info("grid_leaderboard", path=str(place.leaderboard), cells=json.dumps(len(outcomes)))
