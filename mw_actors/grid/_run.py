"""``mw grid run``: every cell of a grid to its end, under one budget, resumable.

::

    grid root (one_for_one)
     ├─ reserver    BudgetReserver(grid allocation): the grid's one budget; every
     │              cell's meters reserve from it (each cell under its own name)
     └─ cells       one_for_one; each cell a temporary child, started by the
                    executor N at a time, running one ordinary campaign

The driver's journal (``<runs>/<grid>/grid-journal``) records the grid's start,
each cell's start and end, and every reservation. Each cell is an ordinary
serve-and-learn campaign in ``<runs>/<grid>/cells/<cell>``: its own journal,
meters, ledgers and results, exactly what ``mw serve-learn run`` writes for it
(or, in an editing grid, what ``wsm benchmark run`` writes: see ._editing).

Run again on the same grid, the driver skips the cells that ended and resumes
the others from their journals: an episode a killed run left in flight ends
``unknown`` there and is never run again. The budget is rebuilt from the grid's
journal and every cell's ledgers, so a restart spends nothing twice.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

import meters
from mw_errors import ConfigError, EvidenceError, MwError

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
from ..editing import CampaignOptions
from ..serve_learn import (
    CampaignSpec,
    Flags,
    check_campaign,
    ensure_synthetic,
    launch_spec,
    run_campaign,
)
from ._budget import CellBudget
from ._cell_state import ENDED
from ._editing import (
    EditCell,
    EditGridSpec,
    EditJob,
    EditOutcome,
    check_edit_cells,
    config_path,
    edit_cell_lines,
    read_edit_cell,
    require_options,
    write_cell_configs,
)
from ._grid_file import AnyGrid
from ._serve_learn_cells import CellOutcome, cell_lines, read_cell
from ._spec import Cell, GridSpec
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

    cell: Cell | EditCell
    spec: CampaignSpec | EditJob
    resume: bool


async def run_job(job: CellJob, budget: meters.Reserver) -> None:
    """The job's campaign, its meters reserving from ``budget`` (the cell's view of it)."""
    if isinstance(job.spec, EditJob):
        await job.spec.run(budget)
    else:
        await run_campaign(job.spec, budget=budget)


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


def cell_flags(grid: GridSpec, cell: Cell) -> Flags:
    """The flags a cell's campaign runs with: the grid's settings, the cell's axes."""
    settings = dict(grid.settings)
    for name in ("config", "dataset"):  # kept as strings in grid.json
        if name in settings:
            settings[name] = Path(settings[name])
    return Flags(
        scenario=cell.scenario,
        method=cell.method,
        model=cell.model,
        learner_model=cell.learner_model,
        # Each cell may spend up to the grid's whole allocation; the grid's one budget,
        # which every cell reserves from, holds them all to it together.
        allocation=meters.usd(grid.allocation_usd),
        **settings,
    )


def outcome_of(grid: AnyGrid, place: GridPlace, cell: Cell | EditCell) -> CellOutcome | EditOutcome:
    """``cell`` of ``grid`` as its run directory stands now."""
    if isinstance(cell, EditCell):
        assert isinstance(grid, EditGridSpec)
        return read_edit_cell(place.cells, cell, grid.tasks)
    return read_cell(place.cells, cell)


def _jobs(
    grid: AnyGrid,
    place: GridPlace,
    environ: Mapping[str, str],
    editing: CampaignOptions | None,
) -> list[CellJob]:
    """The cells still to run, each with its campaign spec (every check before any write)."""
    jobs = []
    for cell in grid.cells:
        outcome = outcome_of(grid, place, cell)
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
        spec: CampaignSpec | EditJob
        if isinstance(cell, EditCell):  # resumed: a new attempt, the interrupted one kept
            assert isinstance(grid, EditGridSpec)
            options = require_options(grid, editing)
            spec = EditJob(cell.tag, config_path(place.root, cell), place.cells / cell.tag, options)
        else:
            assert isinstance(grid, GridSpec)
            spec = launch_spec(
                cell_flags(grid, cell), environ, place.cells, cell.tag, resume=resume
            )
        jobs.append(CellJob(cell, spec, resume))
    return jobs


def _started(place: GridPlace) -> GridStarted | None:
    if not place.journal.is_dir():
        return None
    started = [e.rec for e in read_journal(place.journal, RECORDS)]
    return next((r for r in started if isinstance(r, GridStarted)), None)


def _check_cells(
    grid: AnyGrid, environ: Mapping[str, str], editing: CampaignOptions | None
) -> None:
    """Every cell checked as ``mw serve-learn run --check`` checks it, writing nothing.

    A cell's campaign is checked in a scratch runs directory, so a grid refused for
    one bad cell leaves nothing behind. An editing grid's cells are checked as
    ``wsm benchmark preflight`` checks them.
    """
    if isinstance(grid, EditGridSpec):
        check_edit_cells(grid, editing)
        return
    with tempfile.TemporaryDirectory(prefix="mw-grid-check-") as scratch:
        for cell in grid.cells:
            spec = launch_spec(cell_flags(grid, cell), environ, Path(scratch), cell.tag)
            ensure_synthetic(spec.dataset, spec.scenario)
            check_campaign(spec)


def _prepare(
    grid: AnyGrid,
    place: GridPlace,
    environ: Mapping[str, str],
    editing: CampaignOptions | None,
) -> list[CellJob]:
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
    if isinstance(grid, EditGridSpec):
        write_cell_configs(grid, place.root)
    jobs = _jobs(grid, place, environ, editing)
    for job in jobs:
        if isinstance(job.spec, CampaignSpec):
            ensure_synthetic(job.spec.dataset, job.spec.scenario)
    place.cells.parent.mkdir(parents=True, exist_ok=True)
    place.cells.parent.chmod(0o700)  # private: its cells' traces hold prompts and spend
    place.cells.mkdir(exist_ok=True)
    if not place.spec.exists():
        data = msgspec.json.format(msgspec.json.encode(grid), indent=2) + b"\n"
        meters.write_atomically(place.spec, data)
    return jobs


async def run_grid(
    grid: AnyGrid,
    runs: Path,
    environ: Mapping[str, str],
    *,
    executor: Executor,
    editing: CampaignOptions | None = None,
) -> list[Any]:
    """Run (or resume) every cell of ``grid`` under ``runs``; each cell's outcome.

    ``editing`` is how an editing grid's campaigns run (the sandbox, the policy's
    credentials: what ``wsm benchmark run`` is given).

    Raises:
        ConfigError: a cell cannot run as given, the grid's journal began another grid,
            or another driver runs it.
    """
    place = GridPlace(runs, grid.tag)
    if not place.journal.is_dir():  # a new grid: nothing is written for one refused
        await anyio.to_thread.run_sync(_check_cells, grid, environ, editing)
    place.root.mkdir(parents=True, exist_ok=True)
    with campaign_lock(place.root):
        jobs = await anyio.to_thread.run_sync(_prepare, grid, place, environ, editing)
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
    kind: str = "serve-learn"


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
        if msgspec.json.decode(data, type=_Kind).kind == "editing":
            return msgspec.json.decode(data, type=EditGridSpec)
        return msgspec.json.decode(data, type=GridSpec)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise EvidenceError(
            f"{place.spec} is not a grid mw wrote: {exc}",
            hint="restore it from a copy; the grid's journal and cells are untouched",
        ) from None


def grid_running(runs: Path, tag: str) -> bool:
    """Whether a driver runs the grid ``tag`` now."""
    return is_locked(GridPlace(runs, tag).root)


def grid_outcomes(grid: AnyGrid, place: GridPlace) -> list[Any]:
    """Every cell of ``grid``, as its run directory stands now, in the grid's order.

    :class:`CellOutcome` for a serve-and-learn grid, :class:`EditOutcome` for an editing one.
    """
    return [outcome_of(grid, place, cell) for cell in grid.cells]


def _all_lines(grid: AnyGrid, place: GridPlace) -> list[meters.LedgerLine]:
    """Every cell's ledger lines so far: the budget settles its open reservations by them."""
    if isinstance(grid, EditGridSpec):
        return [line for cell in grid.cells for line in edit_cell_lines(place.cells, cell)]
    return [line for cell in grid.cells for line in cell_lines(place.cells / cell.tag)]


def _write_leaderboard(place: GridPlace, outcomes: Sequence[Any]) -> None:
    from ._report import leaderboard_csv

    meters.write_atomically(place.leaderboard, leaderboard_csv(outcomes).encode())
    log.info("grid_leaderboard", path=str(place.leaderboard), cells=json.dumps(len(outcomes)))
