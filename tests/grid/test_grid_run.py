"""Grids run: each cell is an ordinary campaign, one budget holds them all, a rerun resumes."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

import meters
from meters import Budget, Granted
from mw_actors.grid import (
    GRID_RECORDS,
    GridPlace,
    LocalExecutor,
    grid_status,
    leaderboard_csv,
    load_grid,
    read_cell,
    run_grid,
)
from mw_actors.grid._budget import CellBudget
from mw_actors.grid.records import CellStarted
from mw_actors.journal import read_journal
from mw_actors.kinds import GridContext
from mw_actors.metering import BUDGET_RECORDS
from mw_actors.serve_learn import (
    SERVE_LEARN_RECORDS,
    Flags,
    RunDir,
    ensure_synthetic,
    launch_spec,
    make_method,
    run_campaign,
    score_file,
)
from mw_actors.serve_learn._slb import slb_available
from mw_actors.serve_learn.records import EpisodeStarted

pytestmark = pytest.mark.anyio

ENVIRON = {"PATH": "/usr/bin:/bin"}  # no codex, no keys: what a clean machine has


def _grid(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def _rows(path: Path) -> dict[str, tuple[object, ...]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {
        r["task_id"]: (r["phase"], r["reward"], r["status"], r["checkpoint"])
        for r in rows
        if "task_id" in r
    }


@pytest.mark.timeout(120)
async def test_each_cell_is_what_serve_learn_run_writes_and_a_rerun_runs_nothing(
    tmp_path: Path,
) -> None:
    grid = load_grid(
        _grid(
            tmp_path,
            "tag: g1\nscenarios: [synthetic_l1]\nmethods: [mwm-local, blind]\n"
            "models: [local/scripted]\ntrain_split: 24\nallocation: 5\n",
        )
    )
    runs = tmp_path / "runs"
    outcomes = await run_grid(grid, runs, GridContext(ENVIRON), executor=LocalExecutor(2))
    assert [o.state for o in outcomes] == ["completed", "completed"]
    place = GridPlace(runs, "g1")
    # The same cell as `mw serve-learn run` runs it, alone, elsewhere.
    alone = tmp_path / "alone"
    cell = grid.cells[0]
    flags = Flags(scenario=cell.scenario, method=cell.method, train_split=24, allocation="5")
    spec = launch_spec(flags, ENVIRON, alone, "solo")
    ensure_synthetic(spec.dataset, spec.scenario)
    single = await run_campaign(spec)
    ours = RunDir(place.cells, cell.tag, cell.scenario, cell.method).results
    assert _rows(ours) == _rows(single.results) and _rows(ours)
    ledgers = [single.root / "ledger.jsonl", single.root / "learner" / "ledger.jsonl"]
    lines = [x for path in ledgers if path.exists() for x in meters.read_ledger(path)]
    assert lines and Decimal(outcomes[0].cost_usd) == sum(Decimal(x.cost_usd) for x in lines)
    # The cell reader reads the lone run too (its journal holds its own budget's
    # records), and finds the same scores and spend.
    solo = read_cell(alone, msgspec.structs.replace(cell, tag="solo"))
    assert msgspec.structs.replace(solo, tag=cell.tag) == outcomes[0]
    # The leaderboard is on disk, and rebuilt the same from the cells' files.
    assert place.leaderboard.read_text() == leaderboard_csv(outcomes)
    again = await run_grid(grid, runs, GridContext(ENVIRON), executor=LocalExecutor(2))
    assert again == outcomes
    starts = [
        e.rec
        for e in read_journal(place.journal, [*GRID_RECORDS, *BUDGET_RECORDS])
        if isinstance(e.rec, CellStarted)
    ]
    assert len(starts) == 2  # the second run started no cell


@pytest.mark.timeout(120)
async def test_a_grid_allocation_that_fits_some_cells_blocks_the_rest(tmp_path: Path) -> None:
    # A request may cost up to ~$0.0264 (its worst case is reserved before it is sent),
    # though it costs ~$0.0002. Concurrency 1, tests after training: one request at a
    # time, two reservations at most while one settles as the next one reserves. So the
    # blind cell (~$0.004) fits in $0.065 with room for two; the mwm-local cell after it
    # (~$0.038 if it could finish) cannot: it ends budget_blocked.
    grid = load_grid(
        _grid(
            tmp_path,
            "tag: g2\nscenarios: [synthetic_l1]\nmethods: [blind, mwm-local]\n"
            "models: [local/scripted]\ntrain_split: 72\nconcurrency: 1\n"
            "waiter: after_training\nallocation: 0.065\n",
        )
    )
    outcomes = await run_grid(
        grid, tmp_path / "runs", GridContext(ENVIRON), executor=LocalExecutor(1)
    )
    assert [o.state for o in outcomes] == ["completed", "budget_blocked"]
    status = grid_status("g2", outcomes, grid.allocation_usd, running=False)
    assert Decimal(status["spend_usd"]) <= Decimal("0.065")
    assert Decimal(outcomes[1].cost_usd) > 0  # it ran until the budget stopped it
    place = GridPlace(tmp_path / "runs", "g2")
    cell = RunDir(place.cells, grid.cells[1].tag, "synthetic_l1", "mwm-local")
    started = [
        e.rec.task_id
        for e in read_journal(cell.journal, SERVE_LEARN_RECORDS)
        if isinstance(e.rec, EpisodeStarted)
    ]
    assert max(Counter(started).values()) == 1


class _Reserver:
    """meters.Budget behind the Reserver protocol, as one event loop owns it."""

    def __init__(self) -> None:
        self.budget = Budget(Decimal(1))

    async def reserve(self, amount: Decimal, holder: str) -> object:
        return self.budget.reserve(amount, holder, now=0.0)

    async def settle(self, reservation_id: str, actual: Decimal) -> None:
        self.budget.settle(reservation_id, actual)

    async def release(self, reservation_id: str) -> None:
        self.budget.release(reservation_id)

    async def open_reservations(self) -> list[meters.Reservation]:
        return self.budget.open_reservations()


async def test_a_cell_sees_only_its_own_open_reservations() -> None:
    shared = _Reserver()
    a, b = CellBudget(shared, "g.a"), CellBudget(shared, "g.b")  # type: ignore[arg-type]
    holder = meters.attempt_holder("host", "att-1", "/v1/chat/completions", "m")
    granted = await a.reserve(Decimal("0.1"), holder)
    assert isinstance(granted, Granted)
    # b's host meter, starting, must not write off a's attempt in flight as lost
    assert await b.open_reservations() == []
    (mine,) = await a.open_reservations()
    assert mine.holder == holder  # as a's meter gave it: lost_attempt can read it
    assert meters.lost_attempt(mine, "host", now=1.0) is not None
    await a.settle(granted.id, Decimal("0.05"))
    assert shared.budget.settled == Decimal("0.05")


async def test_a_cell_that_crashes_still_gets_its_end_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mw_actors.grid import _run
    from mw_actors.grid.records import CellEnded

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_run, "run_job", broken)  # the cell's campaign, whatever its kind
    grid = load_grid(
        _grid(
            tmp_path,
            "tag: g3\nscenarios: [synthetic_l1]\nmethods: [blind]\nmodels: [local/scripted]\n"
            "train_split: 24\nallocation: 1\n",
        )
    )
    (outcome,) = await run_grid(
        grid, tmp_path / "runs", GridContext(ENVIRON), executor=LocalExecutor(1)
    )
    assert outcome.state == "pending"  # its campaign never began: no score, no end
    place = GridPlace(tmp_path / "runs", "g3")
    ends = [
        e.rec
        for e in read_journal(place.journal, [*GRID_RECORDS, *BUDGET_RECORDS])
        if isinstance(e.rec, CellEnded)
    ]
    assert [(e.state, e.reason) for e in ends] == [
        ("failed", "internal error: RuntimeError: a bug")
    ]


async def test_a_cell_killed_before_its_journal_began_is_resumed(tmp_path: Path) -> None:
    grid = load_grid(
        _grid(
            tmp_path,
            "tag: g4\nscenarios: [synthetic_l1]\nmethods: [blind]\nmodels: [local/scripted]\n"
            "train_split: 24\nallocation: 1\n",
        )
    )

    class Killed:  # a driver that began the grid and died before any cell's journal
        name = "local"

        async def run_cells(self, run: object) -> None:
            return None

    await run_grid(grid, tmp_path / "runs", GridContext(ENVIRON), executor=Killed())
    place = GridPlace(tmp_path / "runs", "g4")
    (place.cells / grid.cells[0].tag).mkdir(parents=True)  # laid out, no journal yet
    (outcome,) = await run_grid(
        grid, tmp_path / "runs", GridContext(ENVIRON), executor=LocalExecutor(1)
    )
    assert outcome.state == "completed"


@pytest.mark.parametrize("parallel", [1, 3])
async def test_cells_start_in_the_grids_order_at_most_n_at_once(parallel: int) -> None:
    """Which cells one budget covers must not depend on how the event loop schedules."""
    import anyio

    from mw_actors.grid import in_grid_order

    started, running, most = [], 0, 0

    async def one(job: object) -> None:
        nonlocal running, most
        started.append(job)
        running += 1
        most = max(most, running)
        await anyio.sleep(0.01 * (len(started) % 3))  # cells take different times
        running -= 1

    jobs = list(range(12))
    await in_grid_order(jobs, parallel, one)  # type: ignore[arg-type]
    assert started == jobs and most == parallel


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not slb_available(), reason="the servelearnbench package is not installed")
async def test_a_grid_over_the_benchmarks_own_scenario_and_methods(tmp_path: Path) -> None:
    # The real banking_l1 export, shared by every cell through the grid's dataset.
    data = Path(__file__).resolve().parents[1] / "data" / "servelearnbench"
    grid = load_grid(
        _grid(
            tmp_path,
            f"tag: b1\nscenarios: [banking_l1]\nmethods: [blind, slb:blind]\n"
            f"models: [local/scripted]\ndataset: {data}\nallocation: 5\n"
            "train_split: 84\n",  # window 0: the smallest run that shows the point
        )
    )
    runs = tmp_path / "runs"
    outcomes = await run_grid(grid, runs, GridContext(ENVIRON), executor=LocalExecutor(2))
    assert [o.state for o in outcomes] == ["completed", "completed"]
    header, *rows = leaderboard_csv(outcomes).splitlines()
    assert header.split(",")[:4] == ["model", "method", "banking_H_L1", "banking_F_L1"]
    assert [r.split(",")[1] for r in rows] == ["blind", "slb:blind"]
    # Each cell is what `mw serve-learn run banking_l1 --dataset ...` writes for it.
    cell = grid.cells[1]
    flags = Flags(
        scenario="banking_l1", method="slb:blind", dataset=data, allocation="5", train_split=84
    )
    spec = launch_spec(flags, ENVIRON, tmp_path / "alone", "solo")
    single = await run_campaign(spec)
    name = make_method(cell.method).name
    ours = RunDir(GridPlace(runs, "b1").cells, cell.tag, cell.scenario, name).results
    assert ours.is_file() and _rows(ours) == _rows(single.results)
    assert outcomes[1].hidden == score_file(single.results).hidden
