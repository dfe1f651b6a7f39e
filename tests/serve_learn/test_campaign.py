"""Serve-and-learn campaigns end to end on the synthetic scenario, on asyncio and trio."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from mw_actors import ExitError
from mw_actors._reserver import BUDGET_RECORDS
from mw_actors.journal import ActorExit, read_journal
from mw_actors.kinds import Context
from mw_actors.serve_learn import (
    METHODS,
    SERVE_LEARN,
    SERVE_LEARN_RECORDS,
    CampaignSpec,
    EpisodeEnded,
    plan,
    read_scenario,
    run_campaign,
    score_file,
)
from mw_actors.serve_learn._learner import LearnerUsage
from mw_actors.serve_learn._methods import Lesson, MwmLocal
from mw_actors.serve_learn._worldmodel import WorldModel
from mw_actors.serve_learn.records import BlockLearned, EpisodeStarted, ServeLearnEnded

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]


def _rows(results: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in results.read_text().splitlines()][1:]


def _ended(journal: Path) -> list[EpisodeEnded]:
    return [e.rec for e in read_journal(journal, RECORDS) if isinstance(e.rec, EpisodeEnded)]


async def test_a_campaign_writes_every_output_and_tests_on_the_right_versions(
    dataset: Path, tmp_path: Path
) -> None:
    spec = CampaignSpec(
        tag="mwm", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, train_split=72
    )
    run = await run_campaign(spec)
    for path in (
        run.run_log,
        run.steps,
        run.test_log,
        run.results,
        run.checkout / "card.md",
        run.checkout / "adapter.safetensors",
        run.checkout / "index.json",
        run.root / "wire_ledger.json",
        run.root / "meta_wire_ledger.json",
    ):
        assert path.is_file(), path
    schedule = plan(read_scenario(dataset, "synthetic_l1"), 72)
    steps = [json.loads(line) for line in run.steps.read_text().splitlines()]
    assert [s["block"] for s in steps] == list(range(schedule.blocks))  # one step per block
    ended = _ended(run.journal)
    assert max(Counter(e.task_id for e in ended).values()) == 1  # one terminal record each
    rows = _rows(run.results)
    serving = [r for r in rows if r["phase"] == "serving"]
    assert len(serving) == 72 and len(list(run.evidence.iterdir())) == len(rows)
    for i, row in enumerate(sorted(serving, key=lambda r: r["timestamp"])):
        assert row["checkpoint"] == i // 12
    versions = {w.window: w.test_version for w in schedule.windows}
    index = json.loads((run.checkout / "index.json").read_text())
    discriminating = 0
    for row in (r for r in rows if r["phase"] == "test"):
        assert row["checkpoint"] == versions[row["window"]]
        for step in row["trace"]:
            if step.get("name") == "wm":
                query = step["args"]["query"]
                used = WorldModel.load(run.version_dir(index[str(row["checkpoint"])]))
                assert used.answer(query) == step["obs"]  # replayed on that very version
                later = WorldModel.load(run.version_dir(index[str(schedule.blocks)]))
                discriminating += later.answer(query) != step["obs"]
    assert discriminating > 0  # a later checkpoint would have answered differently
    score = score_file(run.results)
    assert score.hidden is not None and score.fully_specified is not None
    assert json.loads(run.run_log.read_text().splitlines()[0])["setting"]["method"] == "mwm-local"


async def test_mwm_local_learns_what_blind_cannot(dataset: Path, tmp_path: Path) -> None:
    scores = {}
    for method in ("mwm-local", "blind"):
        spec = CampaignSpec(
            tag=method, scenario="synthetic_l1", dataset=dataset, runs=tmp_path, method=method
        )
        run = await run_campaign(spec)
        scores[method] = score_file(run.results)
    assert scores["mwm-local"].hidden is not None and scores["blind"].hidden is not None
    assert scores["mwm-local"].hidden > scores["blind"].hidden + 30
    # The learning curve is real: serving reward dips when the hidden policy changes.
    rows = _rows(tmp_path / "mwm-local" / "task" / "results" / "synthetic_l1_mwm-local.jsonl")
    by_block: dict[int, list[float]] = {}
    for row in rows:
        if row["phase"] == "serving":
            by_block.setdefault((row["timestamp"] - 1) // 12, []).append(row["reward"])
    curve = [sum(v) / len(v) for _, v in sorted(by_block.items())]
    for first in (3, 6, 9):  # each window's first block against the block before it
        assert curve[first] < curve[first - 1] or curve[first + 1] < curve[first - 1]
    assert curve[-1] >= 0.9


class CrashOnce(MwmLocal):
    crashed = False

    async def learn(self, lesson: Lesson) -> LearnerUsage | None:
        if lesson.block == 1 and not CrashOnce.crashed:
            CrashOnce.crashed = True
            raise RuntimeError("learner crash, once")
        return await super().learn(lesson)


async def test_a_learner_crash_is_restarted_and_the_block_learned_once(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    CrashOnce.crashed = False
    monkeypatch.setitem(METHODS, "crash-once", CrashOnce)
    spec = CampaignSpec(
        tag="crash",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=tmp_path,
        method="crash-once",
        train_split=48,
    )
    run = await run_campaign(spec)
    entries = read_journal(run.journal, RECORDS)
    learned = [e.rec.block for e in entries if isinstance(e.rec, BlockLearned)]
    assert learned == [0, 1, 2, 3]
    crashes = [
        e.rec
        for e in entries
        if isinstance(e.rec, ActorExit)
        and e.rec.actor.endswith("learner")
        and isinstance(e.rec.reason, ExitError)
    ]
    assert len(crashes) == 1 and "learner crash" in crashes[0].reason.message
    assert [e.rec.state for e in entries if isinstance(e.rec, ServeLearnEnded)] == ["completed"]


async def test_the_journal_never_holds_more_than_concurrency_episodes_in_flight(
    dataset: Path, tmp_path: Path
) -> None:
    """--concurrency N bounds the episodes between their start and end records, all phases.

    An episode that freed its slot before its end record was durable let the next one
    start beside it: the journal showed 6 in flight at N = 4, 15 at N = 8.
    """
    from mw_actors.provider import Latency

    spec = CampaignSpec(
        tag="bounded",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=tmp_path,
        train_split=24,
        concurrency=3,
        latency=Latency(first_token_seconds=0.01),  # episodes overlap, as with a provider
    )
    run = await run_campaign(spec)
    inside, most, phases = 0, 0, set()
    for entry in read_journal(run.journal, RECORDS):  # in the order they were appended
        if isinstance(entry.rec, EpisodeStarted):
            inside += 1
            phases.add(entry.rec.phase)
        elif isinstance(entry.rec, EpisodeEnded):
            inside -= 1
        most = max(most, inside)
    assert most == 3 and phases == {"serving", "test"}


async def test_a_budget_that_runs_out_stops_cleanly_and_still_scores(
    dataset: Path, tmp_path: Path
) -> None:
    from decimal import Decimal

    spec = CampaignSpec(
        tag="poor",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=tmp_path,
        allocation_usd=Decimal("0.006"),
        concurrency=2,
    )
    run = await run_campaign(spec)
    entries = read_journal(run.journal, RECORDS)
    assert [e.rec.state for e in entries if isinstance(e.rec, ServeLearnEnded)] == [
        "budget_blocked"
    ]
    statuses = Counter(e.status for e in _ended(run.journal))
    assert statuses["budget_blocked"] >= 1
    summary = json.loads((run.root / "wire_ledger.json").read_text())
    assert Decimal(summary["cost_usd"]) <= Decimal("0.006")
    score = score_file(run.results)  # the partial results still score
    assert score.n_test >= 0
    assert len(_rows(run.results)) == sum(statuses.values())


@pytest.mark.slow
async def test_a_resume_after_every_block_was_learned_still_ends(
    dataset: Path, tmp_path: Path
) -> None:
    """Stopped after the last block was learned, before the tests: the resume finishes."""
    spec = CampaignSpec(
        tag="late", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, train_split=24
    )
    run = await run_campaign(spec)
    # Cut the journal just after the last block.learned line, as a kill there would have.
    segment = sorted(run.journal.glob("*.jsonl"))[-1]
    lines = segment.read_bytes().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if b'"serve_learn.block_learned"' in line)
    segment.write_bytes(b"".join(lines[: last + 1]))
    assert _status(tmp_path, "late")["state"] == "failed"
    with anyio.fail_after(60):
        await run_campaign(dataclasses.replace(spec, resume=True))
    status = _status(tmp_path, "late")
    assert status["state"] == "completed" and status["progress"]["blocks_learned"] == 2
    assert max(Counter(e.task_id for e in _ended(run.journal)).values()) == 1


async def test_a_resume_builds_its_method_once_and_reads_its_journal_once_before_the_end(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepared once: the checks, the restored state and the start record share one reading.

    The journal is read once more at the end, for the results (every episode, those of
    the process before too); the results reuse the records the learner was given.
    """
    spec = CampaignSpec(
        tag="once", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, train_split=12
    )
    run = await run_campaign(spec)
    before = run.results.read_bytes()
    segment = sorted(run.journal.glob("*.jsonl"))[-1]
    lines = segment.read_bytes().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if b'"serve_learn.block_learned"' in line)
    segment.write_bytes(b"".join(lines[: last + 1]))  # as a kill just after the block
    calls = _counting(monkeypatch, "make_method", "read_journal")
    with anyio.fail_after(60):
        await run_campaign(dataclasses.replace(spec, resume=True))
    assert calls == {"make_method": 1, "read_journal": 2}
    assert _status(tmp_path, "once")["state"] == "completed"
    records = [json.loads(line).get("record") for line in before.splitlines()]
    assert [r.get("record") for r in _rows(run.results)] == records[1:]  # the config first


def _counting(monkeypatch: pytest.MonkeyPatch, *names: str) -> Counter[str]:
    """Every call of the functions ``names`` anywhere in mw_actors, counted from now."""
    calls: Counter[str] = Counter()

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    for module in [m for name, m in sys.modules.items() if name.startswith("mw_actors")]:
        for name in names:
            if callable(getattr(module, name, None)):
                monkeypatch.setattr(module, name, counted(name, getattr(module, name)))
    return calls


async def test_a_submitted_campaign_is_checked_once_and_runs_as_it_was_checked(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's path: the kind checks a submission whole before the daemon registers
    it, and the runner it returns runs that checked campaign, not a second reading."""
    calls = _counting(monkeypatch, "make_method", "prepare_scenario")
    submitted = {"scenario": "synthetic_l1", "dataset": str(dataset), "train_split": 12}
    runner, allocation = await SERVE_LEARN.prepare(
        "sub", submitted, resume=False, context=Context(runs=tmp_path)
    )
    assert calls == {"make_method": 1, "prepare_scenario": 1} and allocation
    with anyio.fail_after(60):
        await runner()
    assert calls == {"make_method": 1, "prepare_scenario": 1}
    assert _status(tmp_path, "sub")["state"] == "completed"


def test_kill_9_mid_block_then_resume(tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "bin.mw",
        "serve-learn",
        "run",
        "synthetic_l1",
        "--runs",
        str(tmp_path),
        "--tag",
        "k",
        "--train-split",
        "48",
        "--provider-latency",
        "ttft=0.05",
        "--concurrency",
        "3",
    ]
    process = subprocess.Popen(
        base, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    journal = tmp_path / "k" / "journal"
    deadline = time.monotonic() + 90
    checked = False
    while True:
        assert time.monotonic() < deadline and process.poll() is None
        try:
            records = [e.rec for e in read_journal(journal, RECORDS)]
        except Exception:
            records = []
        ended = {r.task_id for r in records if isinstance(r, EpisodeEnded)}
        started = {r.task_id for r in records if isinstance(r, EpisodeStarted)}
        if len(ended) >= 13 and not checked:
            assert _status(tmp_path, "k")["state"] == "running"  # the campaign lock is held
            checked = True
        if checked and len(ended) >= 17 and started - ended:  # mid-block, episodes in flight
            break
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert _status(tmp_path, "k")["state"] == "failed"  # stopped without its terminal records
    before = _ended(journal)
    resumed = subprocess.run(
        [*base, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    after = _ended(journal)
    assert after[: len(before)] == before  # nothing acknowledged was lost or rewritten
    counts = Counter(e.task_id for e in after)
    assert max(counts.values()) == 1  # exactly one terminal record per episode
    statuses = Counter(e.status for e in after)
    assert statuses["unknown"] >= 1  # the in-flight ones, never re-run
    assert sum(e.phase == "serving" for e in after) == 48
    assert (
        score_file(tmp_path / "k" / "task" / "results" / "synthetic_l1_mwm-local.jsonl").n_test > 0
    )
    status = _status(tmp_path, "k")
    assert status["state"] == "completed" and status["kind"] == "serve-learn"
    assert status["progress"]["cases_served"] == 48 and status["progress"]["blocks_learned"] == 4
    ledger = json.loads((tmp_path / "k" / "wire_ledger.json").read_text())
    assert status["spend_usd"]["host"] == ledger["cost_usd"]


def _status(runs: Path, tag: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bin.mw", "status", tag, "--runs", str(runs), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_status_reads_a_finished_or_blocked_campaign_without_a_daemon(
    dataset: Path, tmp_path: Path
) -> None:
    from decimal import Decimal

    from mw_actors.daemon import campaign_status

    spec = CampaignSpec(
        tag="done", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, train_split=24
    )
    await run_campaign(spec)
    status = campaign_status(tmp_path / "done")
    assert status.state == "completed" and status.progress["blocks_learned"] == 2
    learner = status.actors["root/campaign/learner"]
    assert learner.runs == 1 and learner.restarts == 0 and not learner.alive
    assert status.heartbeat is not None and status.heartbeat <= time.time()
    assert status.allocation_usd == "5"
    poor = CampaignSpec(
        tag="poor",
        scenario="synthetic_l1",
        dataset=dataset,
        runs=tmp_path,
        allocation_usd=Decimal("0.004"),
    )
    await run_campaign(poor)
    assert campaign_status(tmp_path / "poor").state == "budget_blocked"


async def test_two_processes_never_share_a_campaign(dataset: Path, tmp_path: Path) -> None:
    from mw_actors._lock import campaign_lock
    from mw_errors import ConfigError

    spec = CampaignSpec(
        tag="busy", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, train_split=12
    )
    await run_campaign(spec)
    with campaign_lock(tmp_path / "busy"):  # as if another process were running it
        resume = CampaignSpec(
            tag="busy",
            scenario="synthetic_l1",
            dataset=dataset,
            runs=tmp_path,
            train_split=12,
            resume=True,
        )
        with pytest.raises(ConfigError, match="running in another process"):
            await run_campaign(resume)
