"""Manual test mode: windows whose checkpoint exists are tested on exactly it, beside training."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mw_actors.journal import read_journal
from mw_actors.metering import BUDGET_RECORDS
from mw_actors.serve_learn import (
    SERVE_LEARN_RECORDS,
    CampaignSpec,
    run_campaign,
    run_manual_tests,
    score_file,
)
from mw_actors.serve_learn.records import BlockLearned, ServeLearnEnded
from mw_errors import ConfigError
from tests.processes import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]
RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]


def rows(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return {row["task_id"]: row for row in lines if row["phase"] == "test"}


def spec(dataset: Path, runs: Path, **fields: Any) -> CampaignSpec:
    return CampaignSpec(
        tag="c", scenario="synthetic_l1", dataset=dataset, runs=runs, train_split=72, **fields
    )


async def test_a_finished_campaign_tests_the_same_as_its_waiter(
    dataset: Path, tmp_path: Path
) -> None:
    run = await run_campaign(spec(dataset, tmp_path))
    report = await run_manual_tests(spec(dataset, tmp_path))
    assert (report.tested, report.skipped, report.earlier) == ([0, 1], [], [])
    ours, waiter = rows(report.run.results), rows(run.results)
    assert ours.keys() == waiter.keys() and ours
    for task_id, row in ours.items():  # same version, same outcome: tests never learn
        expected = waiter[task_id]
        assert (row["checkpoint"], row["reward"], row["status"]) == (
            expected["checkpoint"],
            expected["reward"],
            expected["status"],
        )
    again = await run_manual_tests(spec(dataset, tmp_path))
    assert (again.tested, again.earlier) == ([], [0, 1])  # nothing is tested twice
    assert again.describe().splitlines()[:2] == [
        "window 0: tested by an earlier manual run",
        "window 1: tested by an earlier manual run",
    ]
    assert run.summary().startswith(f"run directory: {run.root}\nwindow 0 on v")
    assert run.summary().endswith(score_file(run.results).line())
    assert report.run.root == run.root / "manual"  # the campaign's own files are untouched
    with pytest.raises(ConfigError, match="holds no campaign"):
        await run_manual_tests(spec(dataset, tmp_path / "elsewhere"))


async def test_a_manual_run_spends_from_one_journaled_budget(dataset: Path, tmp_path: Path) -> None:
    """Its meters reserve from one reserver journaled with its episodes, as a campaign's do."""
    from decimal import Decimal

    import meters
    from mw_actors.metering import BudgetReserved, BudgetSettled

    await run_campaign(spec(dataset, tmp_path))
    report = await run_manual_tests(spec(dataset, tmp_path))
    records = [e.rec for e in read_journal(report.run.journal, RECORDS)]
    reserved = [r for r in records if isinstance(r, BudgetReserved)]
    settled = [r for r in records if isinstance(r, BudgetSettled)]
    ledger = meters.read_ledger(report.run.root / "ledger.jsonl")
    assert reserved and len(reserved) == len(settled) == len(ledger)
    spent = sum(Decimal(r.actual) for r in settled)
    assert spent == sum(Decimal(line.cost_usd) for line in ledger) > 0


async def test_what_a_killed_manual_run_left_in_flight_ends_unknown(
    dataset: Path, tmp_path: Path
) -> None:
    from mw_actors.journal import open_journal
    from mw_actors.serve_learn import EpisodeStarted, read_scenario

    run = await run_campaign(spec(dataset, tmp_path))
    first = next(t for t in read_scenario(dataset, "synthetic_l1").test if t.window == 0)
    journal_dir = run.root / "manual" / "journal"
    async with open_journal(journal_dir, record_types=RECORDS) as journal:  # a run that died
        await journal.append(EpisodeStarted(task_id=first.task_id, phase="test", checkpoint=3))
    report = await run_manual_tests(spec(dataset, tmp_path))
    tested = rows(report.run.results)
    assert tested[first.task_id]["status"] == "unknown"  # never re-run
    assert sum(row["status"] == "finished" for row in tested.values()) == 23


@pytest.mark.slow
async def test_while_training_goes_on_only_learned_checkpoints_are_tested(
    dataset: Path, tmp_path: Path
) -> None:
    campaign = subprocess.Popen(
        [sys.executable, "-m", "bin.mw", "serve-learn", "run", "synthetic_l1", "--dataset",
         str(dataset), "--runs", str(tmp_path), "--tag", "c", "--train-split", "72",
         "--provider-latency", "ttft=0.1", "--waiter", "after_training"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    journal = tmp_path / "c" / "journal"
    try:
        deadline = time.monotonic() + 120
        learned: set[int] = set()
        while 3 not in learned:  # v3 is window 0's test version; v6 is window 1's
            assert time.monotonic() < deadline and campaign.poll() is None
            time.sleep(0.05)
            if journal.is_dir():
                entries = read_journal(journal, RECORDS)
                learned = {e.rec.version for e in entries if isinstance(e.rec, BlockLearned)}
        report = await run_manual_tests(spec(dataset, tmp_path))
        assert campaign.poll() is None  # training was still going on
    finally:
        _, stderr = campaign.communicate(timeout=180)
    assert campaign.returncode == 0, stderr
    assert (report.tested[0] == 0 and 1 not in report.tested) or report.tested == [0, 1]
    tested = rows(report.run.results)
    assert tested and {row["window"] for row in tested.values()} == set(report.tested)
    # Each window on exactly its boundary's version, never a later one.
    assert {row["checkpoint"] for row in tested.values() if row["window"] == 0} == {3}
    ended = [e.rec for e in read_journal(journal, RECORDS)]
    assert isinstance(ended[-1], ServeLearnEnded) or any(
        isinstance(r, ServeLearnEnded) for r in ended
    )
