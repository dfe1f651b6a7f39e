"""Weight-editing grids: students x arms x seeds, each cell a ``wsm benchmark run``."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import statistics
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from mw_actors.editing import (
    EDITING_RECORDS,
    CampaignOptions,
    build_report,
    load_config,
    render_json,
    run_campaign,
    write_fixture,
)
from mw_actors.editing._grid import config_path
from mw_actors.editing.records import EditingEnded, EditingStarted, TrialReserved, TrialStarted
from mw_actors.grid import (
    GRID_RECORDS,
    EditGridSpec,
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
from mw_actors.grid.records import CellStarted
from mw_actors.journal import read_journal
from mw_actors.kinds import GridContext
from mw_actors.metering import BUDGET_RECORDS, BudgetReserved, BudgetSettled
from mw_errors import ConfigError, IntegrityError
from tests.processes import grid_driver, mw

RECORDS = (*BUDGET_RECORDS, *EDITING_RECORDS)  # what an editing run's journal holds

ENVIRON = {"PATH": "/usr/bin:/bin"}
TRUSTED = CampaignOptions(local_trusted=True)  # the library tests: no sandbox start per cell

GRID = """\
tag: e1
kind: editing
config: wsm/config.json
arms: [baseline, scripted]
seeds: [1, 2]
allocation: 1
"""


@pytest.fixture(scope="module")
def wsm_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("wsm") / "wsm").parent


def _grid(tmp_path: Path, master: Path, text: str) -> Path:
    shutil.copytree(master, tmp_path / "wsm")
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def test_an_editing_grid_is_students_by_arms_by_seeds(tmp_path: Path, wsm_master: Path) -> None:
    shutil.copytree(wsm_master / "student", tmp_path / "other")
    path = _grid(tmp_path, wsm_master, GRID + "students: [wsm/student, other]\n")
    grid = load_grid(path)
    assert isinstance(grid, EditGridSpec)
    assert [(c.student, c.arm, c.seed) for c in grid.cells][:3] == [
        ("student", "baseline", 1),
        ("student", "baseline", 2),
        ("student", "scripted", 1),
    ]
    assert len(grid.cells) == 8
    assert grid.cells[0].tag == "e1.student.baseline.s1"
    assert grid.tasks == ["completion"]
    assert load_grid(path) == grid  # the same file names the same cells
    # By default: the config's arms, seed 0, the config's student.
    (tmp_path / "plain.yaml").write_text(
        "tag: e2\nkind: editing\nconfig: wsm/config.json\nallocation: 1\n"
    )
    plain = load_grid(tmp_path / "plain.yaml")
    assert [c.tag for c in plain.cells] == [
        "e2.student.baseline.s0",
        "e2.student.scripted.s0",
        "e2.student.agent.s0",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("arms: [bogus]\n", "arm 'bogus' is not one of the config's arms"),
        ("scenarios: [synthetic_l1]\n", "belong to a serve-and-learn grid"),
        ("students: [nowhere]\n", "is not a model snapshot"),
        ("students: [wsm/student, wsm/student]\n", "must be distinct"),
    ],
)
def test_a_bad_editing_grid_is_refused_in_one_line(
    tmp_path: Path, wsm_master: Path, change: str, message: str
) -> None:
    text = GRID.replace("arms: [baseline, scripted]\n", "") if change.startswith("arms") else GRID
    path = _grid(tmp_path, wsm_master, text + change)
    with pytest.raises(ConfigError, match=message) as caught:
        load_grid(path)
    assert "\n" not in caught.value.render()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GRID.replace("seeds: [1, 2]", "seeds: [1, 1]"), "seeds must be distinct"),
        (GRID.replace("seeds: [1, 2]", "seeds: [-1]"), "seeds are integers"),
        (GRID.replace("config: wsm/config.json\n", ""), "needs config"),
        ("tag: g\nscenarios: [synthetic_l1]\nmethods: [blind]\nmodels: [local/scripted]\n"
         "seeds: [1]\nallocation: 1\n", "belong to an editing grid"),
        ("tag: g\nmethods: [blind]\nallocation: 1\n", "needs scenarios, models"),
        (GRID + "students: [a b, a-b]\n", "two cells get the same tag"),
    ],
)  # fmt: skip
def test_fields_of_the_other_kind_or_bad_seeds_are_refused(
    tmp_path: Path, wsm_master: Path, text: str, message: str
) -> None:
    path = _grid(tmp_path, wsm_master, text)
    shutil.copytree(tmp_path / "wsm" / "student", tmp_path / "a b")
    shutil.copytree(tmp_path / "wsm" / "student", tmp_path / "a-b")
    with pytest.raises(ConfigError, match=message):
        load_grid(path)


@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_each_cell_is_what_wsm_benchmark_run_writes_and_seeds_are_distinct_trials(
    tmp_path: Path, wsm_master: Path
) -> None:
    grid = load_grid(_grid(tmp_path, wsm_master, GRID))
    runs = tmp_path / "runs"
    outcomes = await run_grid(grid, runs, GridContext(ENVIRON, TRUSTED), executor=LocalExecutor(2))
    assert [o.state for o in outcomes] == ["completed"] * 4
    place = GridPlace(runs, "e1")
    reports = {c.tag: build_report(place.cells / c.tag) for c in grid.cells}
    # A cell is exactly what `wsm benchmark run --config <its config>` writes, run alone.
    cell = grid.cells[2]  # scripted, seed 1
    alone = tmp_path / "alone"
    await run_campaign(load_config(config_path(place.root, cell)), alone, TRUSTED)
    assert render_json(build_report(alone)) == render_json(reports[cell.tag])
    assert reports[cell.tag].seed == 1 and reports[cell.tag].trials[0].arm == "scripted"
    # The seed reaches the edit: the scripted arm's seeds differ, the baseline's do not.
    loss = {tag: r.trials[0].task_loss for tag, r in reports.items()}
    assert loss["e1.student.scripted.s1"] != loss["e1.student.scripted.s2"]
    assert loss["e1.student.baseline.s1"] == loss["e1.student.baseline.s2"]
    # The leaderboard: each (student, arm)'s mean and sd over its seeds, recomputed here.
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(outcomes))))
    assert [(r["student"], r["arm"], r["seeds"]) for r in rows] == [
        ("student", "baseline", "2"),
        ("student", "scripted", "2"),
    ]
    for row in rows:
        seeds = [loss[f"e1.student.{row['arm']}.s{s}"] for s in (1, 2)]
        regression = [
            reports[f"e1.student.{row['arm']}.s{s}"].trials[0].regression_loss for s in (1, 2)
        ]
        assert float(row["completion_task_loss"]) == pytest.approx(statistics.fmean(seeds))
        assert float(row["completion_task_loss_sd"]) == pytest.approx(statistics.stdev(seeds))
        assert float(row["completion_regression_loss"]) == pytest.approx(
            statistics.fmean(regression)
        )
    assert place.leaderboard.read_text() == leaderboard_csv(outcomes)
    # Status and the live view show each cell's trials and losses.
    status = grid_status_now(runs, "e1")
    assert status["kind"] == "editing" and status["state"] == "completed"
    assert status["cells"][2]["tasks"]["completion"]["task_loss"] == loss[cell.tag]
    assert "e1.student.scripted.s1: completed, 1/1 trials ended, completion loss" in (
        describe_status(status)
    )
    console = Console(width=160, record=True)
    await attach_grid(runs, "e1", console=console, once=True)
    view = console.export_text()
    assert "completion loss" in view and f"{loss[cell.tag]:.4f}" in view
    page = leaderboard_html(outcomes, title="grid e1")
    assert "<svg" in page and "Task losses" in page and "http" not in page
    # Run again: every cell ended, so nothing runs.
    again = await run_grid(grid, runs, GridContext(ENVIRON, TRUSTED), executor=LocalExecutor(2))
    assert again == outcomes
    records = read_journal(place.journal, [*GRID_RECORDS, *BUDGET_RECORDS])
    assert sum(isinstance(e.rec, CellStarted) for e in records) == 4


@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_agent_trials_reserve_from_the_grids_one_budget(
    tmp_path: Path, wsm_master: Path
) -> None:
    # The synthetic agent reserves 4 turns x $0.01 per trial, and spends nothing.
    text = GRID.replace("[baseline, scripted]", "[baseline, agent]").replace("[1, 2]", "[0]")
    grid = load_grid(_grid(tmp_path, wsm_master, text.replace("allocation: 1", "allocation: 0.03")))
    runs = tmp_path / "runs"
    outcomes = await run_grid(grid, runs, GridContext(ENVIRON, TRUSTED), executor=LocalExecutor(1))
    assert [o.state for o in outcomes] == ["completed", "budget_blocked"]
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(outcomes))))
    assert rows[1]["completion_task_loss"] == "" and rows[1]["seeds"] == "0"  # never a score
    # With room for it, the agent's envelope is reserved from the grid's budget, under
    # the cell's name, and the cell's own journal holds no budget of its own.
    fits = load_grid(_grid(tmp_path / "fits", wsm_master, text))
    runs = tmp_path / "fits" / "runs"
    more = await run_grid(fits, runs, GridContext(ENVIRON, TRUSTED), executor=LocalExecutor(1))
    assert [o.state for o in more] == ["completed", "completed"]
    place = GridPlace(runs, "e1")
    held = [
        e.rec.holder
        for e in read_journal(place.journal, [*GRID_RECORDS, *BUDGET_RECORDS])
        if isinstance(e.rec, BudgetReserved)
    ]
    assert held == ["e1.student.agent.s0|completion.agent.0000"]
    own = read_journal(place.cells / "e1.student.agent.s0" / "journal", RECORDS)
    assert not [e for e in own if isinstance(e.rec, BudgetReserved)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_editing_grid_sets_the_interrupted_cell_aside_and_finishes(
    tmp_path: Path, wsm_master: Path
) -> None:
    grid = _grid(tmp_path, wsm_master, GRID.replace("[1, 2]", "[1, 2, 3]"))
    runs = tmp_path / "runs"
    second = runs / "e1" / "cells" / "e1.student.baseline.s2"
    driver = grid_driver(grid, runs)
    deadline = time.monotonic() + 120
    while not _has(second, TrialStarted):  # kill it mid-trial, in the second cell
        assert time.monotonic() < deadline and driver.poll() is None
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    killed = json.loads(mw("grid", "status", "e1", "--runs", str(runs), "--json").stdout)
    assert killed["kind"] == "editing" and killed["state"] == "interrupted"
    assert [c["state"] for c in killed["cells"]][:3] == ["completed", "unknown", "pending"]
    report = mw("grid", "report", "e1", "--runs", str(runs), "--csv").stdout.splitlines()
    assert report[1].split(",")[2:5] == ["unknown"] * 3  # the row of the killed cell
    again = mw("grid", "run", str(grid), "--runs", str(runs), timeout=240)
    assert again.returncode == 0, again.stderr
    status = json.loads(mw("grid", "status", "e1", "--runs", str(runs), "--json").stdout)
    assert [c["state"] for c in status["cells"]] == ["completed"] * 6
    assert [c["attempts"] for c in status["cells"]] == [0, 1, 0, 0, 0, 0]
    # The interrupted attempt is kept whole: begun, never ended.
    aside = runs / "e1" / "cells" / ".attempts" / "e1.student.baseline.s2.1"
    kept = [e.rec for e in read_journal(aside / "journal", RECORDS)]
    assert any(isinstance(r, EditingStarted) for r in kept)
    assert not any(isinstance(r, EditingEnded) for r in kept)
    # The new attempt ran each trial once; the grid's journal says it was a new attempt.
    fresh = [e.rec for e in read_journal(second / "journal", RECORDS)]
    assert Counter(r.trial_id for r in fresh if isinstance(r, TrialStarted)) == {
        "completion.baseline.0000": 1
    }
    starts = [
        e.rec
        for e in read_journal(runs / "e1" / "grid-journal", [*GRID_RECORDS, *BUDGET_RECORDS])
        if isinstance(e.rec, CellStarted) and e.rec.cell == "e1.student.baseline.s2"
    ]
    assert [s.resume for s in starts] == [False, True]
    assert Decimal(status["spend_usd"]) <= Decimal(status["allocation_usd"])
    # The leaderboard verifies each cell's evidence: a changed receipt refuses it.
    receipt = next((second / "trials").glob("*/receipts/*.json"))
    receipt.chmod(0o644)
    receipt.write_text(receipt.read_text().replace('"grade"', '"grade" ', 1))
    refused = mw("grid", "report", "e1", "--runs", str(runs), "--csv")
    assert refused.returncode != 0 and "changed after it was written" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_trials_reservation_is_written_off_at_its_envelope(
    tmp_path: Path, wsm_master: Path
) -> None:
    text = GRID.replace("[baseline, scripted]", "[agent]")
    grid = _grid(tmp_path, wsm_master, text)
    runs = tmp_path / "runs"
    first = runs / "e1" / "cells" / "e1.student.agent.s1"
    driver = grid_driver(grid, runs)
    deadline = time.monotonic() + 120
    while not _has(first, TrialReserved):  # kill it with the agent's envelope reserved
        assert time.monotonic() < deadline and driver.poll() is None
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    again = mw("grid", "run", str(grid), "--runs", str(runs), timeout=240)
    assert again.returncode == 0, again.stderr
    records = [
        e.rec for e in read_journal(runs / "e1" / "grid-journal", [*GRID_RECORDS, *BUDGET_RECORDS])
    ]
    reserved = [r for r in records if isinstance(r, BudgetReserved)]
    assert [r.holder for r in reserved] == [
        "e1.student.agent.s1|completion.agent.0000",  # the killed attempt's
        "e1.student.agent.s1|completion.agent.0000",  # the new attempt's
        "e1.student.agent.s2|completion.agent.0000",
    ]
    settled = {r.id: r.actual for r in records if isinstance(r, BudgetSettled)}
    # The dead trial may have spent up to its envelope: written off at it; the others
    # spent nothing (the synthetic agent calls no provider).
    assert settled == {reserved[0].id: "0.04", reserved[1].id: "0", reserved[2].id: "0"}


def _has(run: Path, kind: type) -> bool:
    if not (run / "journal").is_dir():
        return False
    return any(isinstance(e.rec, kind) for e in read_journal(run / "journal", RECORDS))


@pytest.mark.anyio
async def test_the_configs_own_student_keeps_the_configs_pin(
    tmp_path: Path, wsm_master: Path
) -> None:
    # A student changed since the config pinned it is refused, not pinned again.
    grid_file = _grid(tmp_path, wsm_master, GRID.replace("[1, 2]", "[0]"))
    tokenizer = tmp_path / "wsm" / "student" / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text() + " ")
    grid = load_grid(grid_file)
    with pytest.raises(IntegrityError, match=r"tokenizer\.json"):
        await run_grid(
            grid, tmp_path / "runs", GridContext(ENVIRON, TRUSTED), executor=LocalExecutor()
        )
    assert not (tmp_path / "runs" / "e1").exists()  # refused before anything was written


@pytest.mark.anyio
async def test_a_listed_student_changed_after_it_was_pinned_is_refused(
    tmp_path: Path, wsm_master: Path
) -> None:
    grid_file = _grid(tmp_path, wsm_master, GRID.replace("[1, 2]", "[0]") + "students: [other]\n")
    shutil.copytree(tmp_path / "wsm" / "student", tmp_path / "other")
    grid = load_grid(grid_file)  # pins it
    tokenizer = tmp_path / "other" / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text() + " ")
    with pytest.raises(IntegrityError, match=r"student other .* changed since the grid pinned it"):
        await run_grid(
            grid, tmp_path / "runs", GridContext(ENVIRON, TRUSTED), executor=LocalExecutor()
        )
    assert not (tmp_path / "runs" / "e1").exists()
