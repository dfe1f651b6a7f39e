"""The ray executor on a local Ray cluster (2 CPUs): the same grid, the same results."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from mw_actors.grid import (
    LocalExecutor,
    RayExecutor,
    grid_status,
    import_ray,
    leaderboard_csv,
    load_grid,
    run_grid,
)
from mw_actors.journal import read_journal
from mw_actors.kinds import GridContext
from mw_actors.serve_learn import SERVE_LEARN_RECORDS, RunDir
from mw_actors.serve_learn.records import EpisodeEnded, EpisodeStarted
from mw_errors import ConfigError
from tests.processes import episodes_ended

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ENVIRON = {"PATH": "/usr/bin:/bin"}
GRID = """\
tag: {tag}
scenarios: [synthetic_l1, synthetic_l2]
methods: [mwm-local, blind]
models: [local/scripted]
train_split: 24
allocation: 5
"""


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _grid(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def _one_cell(tmp_path: Path, tag: str) -> tuple[Any, Path]:
    """A one-cell grid slow enough to be hit mid-cell (0.1 s to each first token); its
    cell's campaign journal under ``tmp_path / "runs"``."""
    text = (
        f"tag: {tag}\nscenarios: [synthetic_l1]\nmethods: [mwm-local]\n"
        "models: [local/scripted]\ntrain_split: 24\nconcurrency: 2\n"
        "provider_latency: ttft=0.1\nallocation: 5\n"
    )
    grid = load_grid(_grid(tmp_path, text))
    (cell,) = grid.cells
    return grid, tmp_path / "runs" / tag / "cells" / cell.tag / "journal"


def _results(cells: Path, outcomes: list) -> dict[str, list[dict[str, object]]]:  # type: ignore[type-arg]
    found = {}
    for o in outcomes:
        rows = RunDir(cells, o.tag, o.scenario, o.method).results.read_text().splitlines()
        found[o.tag] = [
            {k: v for k, v in json.loads(r).items() if k in ("task_id", "reward", "status")}
            for r in rows
        ]
    return found


@pytest.mark.timeout(240)
async def test_local_and_ray_give_the_same_leaderboard(tmp_path: Path, ray_cluster: None) -> None:
    grid = load_grid(_grid(tmp_path, GRID.format(tag="g")))
    local = await run_grid(
        grid, tmp_path / "local", GridContext(ENVIRON), executor=LocalExecutor(2)
    )
    remote = await run_grid(grid, tmp_path / "ray", GridContext(ENVIRON), executor=RayExecutor(2))
    assert [o.state for o in remote] == ["completed"] * 4
    assert leaderboard_csv(remote) == leaderboard_csv(local)
    assert (tmp_path / "ray" / "g" / "leaderboard.csv").read_text() == leaderboard_csv(local)
    assert _results(tmp_path / "ray" / "g" / "cells", remote) == _results(
        tmp_path / "local" / "g" / "cells", local
    )


@pytest.mark.timeout(240)
async def test_cells_on_ray_reserve_from_the_drivers_one_budget(
    tmp_path: Path, ray_cluster: None
) -> None:
    # As test_grid_run's local case: the blind cell fits $0.065, the mwm-local cell cannot.
    text = (
        "tag: b\nscenarios: [synthetic_l1]\nmethods: [blind, mwm-local]\n"
        "models: [local/scripted]\ntrain_split: 72\nconcurrency: 1\n"
        "waiter: after_training\nallocation: 0.065\n"
    )
    grid = load_grid(_grid(tmp_path, text))
    outcomes = await run_grid(
        grid, tmp_path / "runs", GridContext(ENVIRON), executor=RayExecutor(1)
    )
    assert [o.state for o in outcomes] == ["completed", "budget_blocked"]
    status = grid_status("b", outcomes, grid.allocation_usd, running=False)
    assert Decimal(status["spend_usd"]) <= Decimal("0.065")


def _cell_workers() -> list[int]:
    """The pids of Ray workers running a cell now (their title is ray::_run_cell)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if command.startswith(b"ray::_run_cell"):
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(240)
async def test_a_ray_worker_killed_mid_cell_is_resumed_by_the_journal_rules(
    tmp_path: Path, ray_cluster: None
) -> None:
    grid, journal = _one_cell(tmp_path, "k")
    killed: list[int] = []

    async def kill_mid_cell() -> None:
        while True:
            workers = _cell_workers()
            if episodes_ended(journal) >= 4 and workers:
                for pid in workers:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(workers)
                return
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_mid_cell)
        (outcome,) = await run_grid(
            grid, tmp_path / "runs", GridContext(ENVIRON), executor=RayExecutor(1)
        )
        tg.cancel_scope.cancel()
    assert killed, "no cell worker was found to kill"
    assert outcome.state == "completed"
    records = [e.rec for e in read_journal(journal, SERVE_LEARN_RECORDS)]
    started = Counter(r.task_id for r in records if isinstance(r, EpisodeStarted))
    assert max(started.values()) == 1  # the retried task resumed: no episode ran twice
    unknown = [r for r in records if isinstance(r, EpisodeEnded) and r.status == "unknown"]
    print(f"killed {killed}; {len(unknown)} episodes in flight ended unknown")


@pytest.mark.timeout(240)
async def test_a_grid_on_ray_stopped_mid_cell_resumes_on_the_same_cluster(
    tmp_path: Path, ray_cluster: None
) -> None:
    # The relay is named after the grid: a stopped run must free the name for its resume.
    grid, journal = _one_cell(tmp_path, "s")
    with anyio.CancelScope() as stop:

        async def stop_mid_cell() -> None:
            while episodes_ended(journal) < 2:
                await anyio.sleep(0.05)
            stop.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_mid_cell)
            outcomes = await run_grid(
                grid, tmp_path / "runs", GridContext(ENVIRON), executor=RayExecutor(1)
            )
            tg.cancel_scope.cancel()  # it ended before it was stopped: fail, do not wait
    assert stop.cancelled_caught, f"the grid ended before its stop: {outcomes}"
    (outcome,) = await run_grid(
        grid, tmp_path / "runs", GridContext(ENVIRON), executor=RayExecutor(1)
    )
    assert outcome.state == "completed"
    records = [e.rec for e in read_journal(journal, SERVE_LEARN_RECORDS)]
    started = Counter(r.task_id for r in records if isinstance(r, EpisodeStarted))
    assert max(started.values()) == 1


def test_without_ray_the_ray_executor_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ConfigError, match="needs Ray, and it is not installed") as refused:
        import_ray()
    assert "pip install 'mw[ray]'" in refused.value.render()
    assert "\n" not in refused.value.render()
    with pytest.raises(ConfigError, match="needs Ray"):
        RayExecutor(1)


@pytest.mark.timeout(240)
def test_mw_grid_run_with_the_ray_executor(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from tests.processes import mw

    # The run directories on the storage the grid file names (what the nodes share).
    text = GRID.format(tag="c").replace("synthetic_l1, ", "") + "runs: shared/runs\n"
    (tmp_path / "grid.yaml").write_text(text)
    runs = str(tmp_path / "shared" / "runs")
    done = mw("grid", "run", str(tmp_path / "grid.yaml"), "--executor", "ray",
              "--max-parallel", "2", timeout=500)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 of 2 cells ended" in done.stdout
    status = json.loads(mw("grid", "status", "c", "--runs", runs, "--json").stdout)
    assert [c["state"] for c in status["cells"]] == ["completed", "completed"]
    journal = (tmp_path / "shared" / "runs" / "c" / "grid-journal").glob("*.jsonl")
    started = [json.loads(line) for path in journal for line in path.read_text().splitlines()]
    assert any(e["rec"].get("executor") == "ray" for e in started if "rec" in e)
    wrong = mw("grid", "run", str(tmp_path / "grid.yaml"), "--runs", runs, "--address", "x")
    assert wrong.returncode == 2 and "--address names a Ray cluster" in wrong.stderr


@pytest.mark.timeout(240)
async def test_an_editing_grid_on_ray_gives_what_local_gives(
    tmp_path: Path, ray_cluster: None
) -> None:
    from mw_actors.editing import CampaignOptions, build_report, render_json, write_fixture

    write_fixture(tmp_path / "wsm")
    path = _grid(
        tmp_path,
        "tag: e1\nkind: editing\nconfig: wsm/config.json\narms: [baseline, scripted, agent]\n"
        "seeds: [1]\nallocation: 1\n",  # seeds are distinct trials: test_grid_editing.py
    )
    trusted = CampaignOptions(local_trusted=True)
    boards, reports = [], []
    for name, executor in (("local", LocalExecutor(2)), ("ray", RayExecutor(2))):
        runs = tmp_path / name
        outcomes = await run_grid(
            load_grid(path), runs, GridContext(ENVIRON, trusted), executor=executor
        )
        assert [o.state for o in outcomes] == ["completed"] * 3
        boards.append(leaderboard_csv(outcomes))
        reports.append([render_json(build_report(runs / "e1" / "cells" / o.tag)) for o in outcomes])
    assert boards[0] == boards[1]
    assert reports[0] == reports[1]  # every trial, hash and loss the same
