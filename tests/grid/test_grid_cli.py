"""``mw grid`` as users run it: the contract's commands, and a driver killed with kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from mw_actors.journal import read_journal
from mw_actors.serve_learn import SERVE_LEARN_RECORDS
from mw_actors.serve_learn.records import EpisodeEnded, EpisodeStarted
from tests.processes import episodes_ended, grid_driver, mw

GRID = """\
tag: g1
scenarios: [synthetic_l1]
methods: [mwm-local, blind]
models: [local/scripted]
train_split: 24
allocation: 5
"""


@pytest.mark.timeout(180)
def test_the_contracts_commands(tmp_path: Path) -> None:
    (tmp_path / "grid.yaml").write_text(GRID)
    runs = str(tmp_path / "runs")
    done = mw("grid", "run", str(tmp_path / "grid.yaml"), "--runs", runs, "--max-parallel", "2")
    assert done.returncode == 0, done.stderr
    assert f"leaderboard: {tmp_path / 'runs' / 'g1' / 'leaderboard.csv'}" in done.stdout
    report = mw("grid", "report", "g1", "--runs", runs, "--csv")
    assert report.returncode == 0, report.stderr
    header, *rows = report.stdout.splitlines()
    assert header == "model,method,synthetic_l1_H,synthetic_l1_F,avg_h,avg_f,api_cost_usd"
    assert [r.split(",")[:2] for r in rows] == [
        ["local/scripted", "mwm-local"],
        ["local/scripted", "blind"],
    ]
    assert report.stdout == (tmp_path / "runs" / "g1" / "leaderboard.csv").read_text()
    status = json.loads(mw("grid", "status", "g1", "--runs", runs, "--json").stdout)
    assert set(status) == {"tag", "state", "cells", "spend_usd", "allocation_usd"}
    assert status["state"] == "completed" and status["allocation_usd"] == "5"
    for cell in status["cells"]:
        assert {"tag", "scenario", "method", "model", "state", "hidden", "fully_specified",
                "cost_usd"} <= set(cell)  # fmt: skip
        assert cell["state"] == "completed"
    spent = sum(Decimal(c["cost_usd"]) for c in status["cells"])
    assert Decimal(status["spend_usd"]) == spent > 0
    view = mw("attach", "g1", "--runs", runs, "--once")  # a grid's tag shows the grid
    assert view.returncode == 0, view.stderr
    assert "grid g1  (completed)" in view.stdout and "spend $" in view.stdout
    assert view.stdout.count("completed") >= 3  # the grid and both cells
    page = mw("grid", "report", "g1", "--runs", runs, "--html")
    assert page.stdout.startswith("<!doctype html>") and "synthetic_l1_H" in page.stdout
    assert page.stdout.count("<svg") == 2  # a learning curve per cell
    if shutil.which("chromium"):  # make test installs it where it can
        (tmp_path / "grid.html").write_text(page.stdout)
        dom = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
             (tmp_path / "grid.html").as_uri()],
            capture_output=True, text=True, timeout=90, check=True,
        ).stdout  # fmt: skip
        assert dom.count("<svg") == 2 and ">window</text>" in dom and ">score</text>" in dom
        assert "<title>window 0: Hidden 100.0 (" in dom  # a hover shows a point's numbers
    assert status["cells"][0]["windows"][0]["window"] == 0
    # The cells are ordinary campaigns: `mw status` reads them from their run directories.
    cells = str(tmp_path / "runs" / "g1" / "cells")
    listed = mw("status", "--runs", cells, "--json")
    assert listed.returncode == 0, listed.stderr
    assert {s["state"] for s in json.loads(listed.stdout)} == {"completed"}
    # A grid file that changed under the same tag is refused; nothing of it runs.
    (tmp_path / "grid.yaml").write_text(GRID.replace("allocation: 5", "allocation: 6"))
    changed = mw("grid", "run", str(tmp_path / "grid.yaml"), "--runs", runs)
    assert changed.returncode == 2
    assert "began with other allocation_usd" in changed.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_driver_killed_with_kill_9_resumes_and_loses_nothing(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID + "provider_latency: ttft=0.1\nconcurrency: 2\n")
    runs = tmp_path / "runs"
    journal = runs / "g1" / "cells" / "g1.synthetic_l1.mwm-local.local-scripted" / "journal"
    driver = grid_driver(grid, runs)
    deadline = time.monotonic() + 120
    while True:  # kill it mid-cell, some episodes ended and some in flight
        assert time.monotonic() < deadline and driver.poll() is None
        if episodes_ended(journal) >= 4:
            break
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    killed = json.loads(mw("grid", "status", "g1", "--runs", str(runs), "--json").stdout)
    assert killed["state"] == "interrupted"
    assert killed["cells"][0]["state"] == "unknown" and killed["cells"][0]["hidden"] is None
    report = mw("grid", "report", "g1", "--runs", str(runs), "--csv").stdout.splitlines()
    assert report[1].split(",")[2:4] == ["unknown", "unknown"]  # never a score
    again = mw("grid", "run", str(grid), "--runs", str(runs), timeout=240)
    assert again.returncode == 0, again.stderr
    status = json.loads(mw("grid", "status", "g1", "--runs", str(runs), "--json").stdout)
    assert [c["state"] for c in status["cells"]] == ["completed", "completed"]
    assert Decimal(status["spend_usd"]) <= Decimal(status["allocation_usd"])
    records = [e.rec for e in read_journal(journal, SERVE_LEARN_RECORDS)]
    started = Counter(r.task_id for r in records if isinstance(r, EpisodeStarted))
    assert max(started.values()) == 1  # no episode was run again
    ends = Counter(r.task_id for r in records if isinstance(r, EpisodeEnded))
    assert set(ends) == set(started) and max(ends.values()) == 1  # each ended exactly once
