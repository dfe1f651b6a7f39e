"""The daemon: its control socket, its guards, and campaigns that survive it."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mw_actors.daemon import (
    Daemon,
    DaemonOptions,
    DaemonPaths,
    ListCampaigns,
    Status,
    connect,
    subscribe,
)
from mw_actors.daemon._process import last_error
from mw_errors import ConfigError, DaemonError, MwError
from tests.processes import mw, runnable_by_others, synthetic_campaign
from tests.scenarios.daemon_frames import KILL_DELAYS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def runs() -> Iterator[Path]:
    # Some tests bind and reach the socket by its path itself (107 bytes at most): keep
    # the runs directory near /. The daemon and its clients reach any depth.
    path = Path(tempfile.mkdtemp(prefix="mwd-"))
    yield path
    subprocess.run(
        [sys.executable, "-m", "bin.mw", "daemon", "stop", "--runs", str(path)],
        cwd=ROOT,
        capture_output=True,
        check=False,
        timeout=120,
    )
    shutil.rmtree(path, ignore_errors=True)


def status(runs: Path, tag: str) -> dict[str, Any]:
    done = mw("status", tag, "--runs", str(runs), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def wait_for(runs: Path, tag: str, states: set[str], limit: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        current = status(runs, tag)
        if current["state"] in states:
            return current
        assert time.monotonic() < deadline, json.dumps(current)
        time.sleep(0.2)


def test_start_submit_status_stop(runs: Path) -> None:
    started = mw("daemon", "start", "--runs", str(runs))
    assert started.returncode == 0, started.stderr
    again = mw("daemon", "start", "--runs", str(runs))
    assert again.returncode == 2 and "a daemon already runs" in again.stderr
    home = DaemonPaths(runs).home
    assert home.stat().st_mode & 0o777 == 0o700
    assert DaemonPaths(runs).socket.stat().st_mode & 0o777 == 0o600
    # Each model call takes 50 ms at least: the campaign runs for seconds, not for the
    # few hundred milliseconds a busy machine may take to answer one poll.
    submitted = mw("serve-learn", "submit", "synthetic_l1", "--runs", str(runs), "--tag", "s",
                   "--train-split", "24", "--provider-latency", "ttft=0.05")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr

    async def live() -> dict[str, Any]:
        """The daemon's status of ``s`` once its learner runs and it reports a mailbox depth."""
        async with connect(runs) as control:
            with anyio.fail_after(60):
                while True:
                    current: dict[str, Any] = await control.request(Status(tag="s"))
                    actors = current.get("actors", {})
                    depths = [a for a in actors.values() if a.get("mailbox_depth") is not None]
                    if depths and "root/campaign/learner" in actors:
                        return current
                    assert current["state"] == "running", current
                    await anyio.sleep(0.01)

    # While it runs, the daemon reports each actor's mailbox depth, live.
    current = anyio.run(live)
    assert "root/campaign/learner" in current["actors"], current["actors"]
    final = wait_for(runs, "s", {"completed", "failed"})
    assert final["state"] == "completed" and final["progress"]["blocks_learned"] == 2
    assert all(a["mailbox_depth"] is None for a in final["actors"].values())  # from the journal
    listed = mw("daemon", "status", "--runs", str(runs))
    assert "s: serve-learn, completed" in listed.stdout
    stopped = mw("daemon", "stop", "--runs", str(runs))
    assert stopped.returncode == 0, stopped.stderr
    assert not DaemonPaths(runs).socket.exists() and not DaemonPaths(runs).pid.exists()
    assert status(runs, "s")["state"] == "completed"  # without the daemon: from the journal


def test_a_runs_directory_too_deep_for_a_socket_path_still_has_a_daemon(runs: Path) -> None:
    """The kernel takes 107 bytes of a unix socket's path: a runs directory deep in a tree
    had a daemon that could not listen (``mw demo`` failed, its error a traceback's frame)."""
    deep = runs / ("d" * 60) / ("e" * 60)
    assert len(str(DaemonPaths(deep).socket)) > 108
    started = mw("daemon", "start", "--runs", str(deep))
    assert started.returncode == 0, started.stderr
    try:
        listed = mw("daemon", "status", "--runs", str(deep))
        assert listed.returncode == 0 and "pid" in listed.stdout, listed.stderr

        async def ask() -> Any:
            async with connect(deep) as control:
                return await control.request(ListCampaigns())

        assert anyio.run(ask) == []
    finally:
        stopped = mw("daemon", "stop", "--runs", str(deep))
    assert stopped.returncode == 0, stopped.stderr
    assert not DaemonPaths(deep).socket.exists()


def test_a_daemon_that_fails_to_start_says_the_exception_not_a_traceback_frame() -> None:
    """An exception group's traceback ends in a frame line (``+-----``), which was all
    the one-line error said."""
    crashed = subprocess.run(
        [sys.executable, "-c", "raise ExceptionGroup('serve', [OSError('AF_UNIX path too long')])"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert crashed.stderr.strip().splitlines()[-1].strip().startswith("+--")
    assert last_error(crashed.stderr) == "OSError: AF_UNIX path too long"
    assert last_error("[info] starting\nmw_errors.ConfigError: no such dir\n") == (
        "mw_errors.ConfigError: no such dir"
    )
    assert last_error("killed\n") == "killed" and last_error("") == "?"


def test_a_stale_socket_is_cleaned_up(runs: Path) -> None:
    paths = DaemonPaths(runs)
    paths.home.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(paths.socket))
    stale.close()  # the file stays; nobody listens
    started = mw("daemon", "start", "--runs", str(runs))
    assert started.returncode == 0, started.stderr
    assert mw("daemon", "status", "--runs", str(runs)).returncode == 0


def test_another_uid_is_refused(runs: Path) -> None:
    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to connect as another user")
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({str(DaemonPaths(runs).socket)!r})\n"
        "except OSError as e:\n    print('refused', type(e).__name__); sys.exit(0)\n"
        "print('connected')\n"
    )
    with runnable_by_others():
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", probe],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
    assert done.stdout.strip() == "refused PermissionError", done.stderr


@pytest.mark.anyio
async def test_the_peer_uid_is_checked_at_the_socket(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions(allowed_uid=os.getuid() + 4242))
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        with pytest.raises(DaemonError, match=f"uid {os.getuid()} may not use this daemon"):
            async with connect(runs):
                pass
        daemon.stop()


@pytest.mark.anyio
async def test_a_second_daemon_on_the_same_runs_is_refused(runs: Path) -> None:
    first = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(first.serve)
        with pytest.raises(ConfigError, match="a daemon already runs"):
            await Daemon(runs, DaemonOptions()).serve()
        first.stop()


@pytest.mark.anyio
async def test_subscribers_see_a_campaign_live_record_by_record(runs: Path) -> None:
    from mw_actors.daemon import Submit
    from mw_actors.daemon._status import CAMPAIGN_RECORDS
    from mw_actors.journal import read_journal
    from mw_actors.serve_learn import EpisodeEnded

    daemon = Daemon(runs, DaemonOptions())
    seen: list[Any] = []
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with subscribe(runs) as events, connect(runs) as control:
            spec = {"scenario": "synthetic_l1", "train_split": 24}
            submitted = await control.request(Submit(kind="serve-learn", tag="live", spec=spec))
            # Before its journal exists a campaign's status already has every field.
            assert submitted["state"] == "running" and submitted["allocation_usd"] == "5"
            assert submitted["progress"]["cases_served"] == 0
            assert submitted["spend_usd"] == {"host": "0", "learner": "0"}
            with anyio.fail_after(120):
                async for event in events:
                    seen.append(event)
                    if event.what == "finished":
                        break
        daemon.stop()
    kinds = [event.what for event in seen]
    ended = [e for e in read_journal(runs / "live" / "journal", CAMPAIGN_RECORDS)
             if isinstance(e.rec, EpisodeEnded)]  # fmt: skip
    assert kinds.count("serve_learn.episode_ended") == len(ended) > 0
    assert kinds.count("serve_learn.block_learned") == 2
    started = next(e for e in seen if e.what == "serve_learn.campaign_started")
    assert started.detail["tag"] == "live" and "test_versions" not in started.detail
    assert kinds[0] == "submitted" and seen[-1].detail == {"state": "done"}
    first = next(e for e in seen if e.what == "serve_learn.episode_ended")
    assert "trace" not in first.detail and first.detail["task_id"] == ended[0].rec.task_id


@pytest.mark.anyio
async def test_abrupt_clients_and_slow_readers_never_disturb_the_daemon(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        # A subscriber that never reads: publishing stays instant, old events are dropped.
        async with subscribe(runs) as events:
            await anyio.sleep(0.05)
            for i in range(5000):  # publish never waits for a reader: it is not async
                daemon.publish("t", "tick", i=i)
            lagged = 0
            for _ in range(5000):
                event = await events.__anext__()
                if event.lagged:
                    lagged = event.lagged
                    break
            assert lagged > 0  # the reader is told how much it missed
        # A client that vanishes mid-frame (RST), then one that behaves.
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(str(DaemonPaths(runs).socket))
        raw.send(b'\x00\x00\x10\x00{"type":')
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.close()
        async with connect(runs) as connection:
            assert await connection.request(ListCampaigns()) == []
            with pytest.raises(Exception, match="no campaign 'nope'"):
                await connection.request(Status(tag="nope"))
        daemon.stop()


def results(runs: Path, tag: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Each episode's outcome in the campaign's results file."""
    path = runs / tag / "task" / "results" / "synthetic_l1_mwm-local.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    fields = ("status", "reward", "checkpoint", "tokens")
    return {(r["task_id"], r["phase"]): tuple(map(r.get, fields)) for r in rows}


def learned(runs: Path, tag: str) -> dict[int, str]:
    """Each learned version's content digest."""
    from mw_actors.journal import read_journal
    from mw_actors.metering import BUDGET_RECORDS
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS
    from mw_actors.serve_learn.records import BlockLearned

    entries = read_journal(runs / tag / "journal", [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS])
    return {e.rec.version: e.rec.digest for e in entries if isinstance(e.rec, BlockLearned)}


def check_accounts(runs: Path, tag: str) -> None:
    """No ledger line lost, and spend equal everywhere it is counted."""
    from decimal import Decimal

    import meters
    from mw_actors.journal import read_journal
    from mw_actors.metering import BUDGET_RECORDS, BudgetReserved, rebuild_budget
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS

    lines = meters.read_ledger(runs / tag / "ledger.jsonl")
    entries = read_journal(runs / tag / "journal", [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS])
    reserved = [e.rec for e in entries if isinstance(e.rec, BudgetReserved)]
    # Every reservation the meter made has exactly one ledger line (ok, or lost in a kill).
    assert sorted(r.id for r in reserved) == sorted(x.reservation_id or "" for x in lines)
    budget = meters.Budget(Decimal(1000))
    assert rebuild_budget(budget, [e.rec for e in entries]) == []  # nothing left open
    spent = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
    assert budget.settled == spent == Decimal(status(runs, tag)["spend_usd"]["host"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_of_the_daemon_at_random_moments_then_restart(runs: Path) -> None:
    """20 rounds: a campaign, the daemon killed at a random moment, restarted; it completes.

    Each round against an uninterrupted run of the same campaign (deterministic
    engine): one terminal record per episode; every episode that was not in
    flight at the kill has the uninterrupted outcome (status, reward,
    checkpoint, tokens) as long as the checkpoint it ran on was learned from
    the same evidence; the ones in flight are ``unknown`` and never re-run
    (DESIGN.md, promise 1), so the blocks after one learn from less; no ledger
    line lost, spend equal in the ledger, the reserver's journal and ``mw status``.
    """
    from collections import Counter

    from mw_actors.journal import read_journal
    from mw_actors.metering import BUDGET_RECORDS
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS, EpisodeEnded, EpisodeStarted

    kinds = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]
    split = ["--train-split", "36"]
    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    submit = ["serve-learn", "submit", "synthetic_l1", "--runs", str(runs), *split]
    assert mw(*submit, "--tag", "baseline").returncode == 0
    wait_for(runs, "baseline", {"completed"})
    baseline = results(runs, "baseline")
    check_accounts(runs, "baseline")
    rng = random.Random(20261130)
    for round_number in range(20):
        tag = f"k{round_number}"
        submitted = mw(*submit, "--tag", tag)
        assert submitted.returncode == 0, submitted.stderr
        journal = runs / tag / "journal"
        target = rng.randint(0, 40)  # episodes ended before the kill (36 served + tests)
        deadline = time.monotonic() + 60
        ended = 0
        while ended < target:
            assert time.monotonic() < deadline, f"round {round_number}: {ended} ended"
            time.sleep(rng.uniform(0, 0.05))
            if journal.is_dir():
                entries = read_journal(journal, kinds)
                ended = sum(isinstance(e.rec, EpisodeEnded) for e in entries)
                if any(e.rec.__class__.__name__ == "ServeLearnEnded" for e in entries):
                    break
        pid = int(DaemonPaths(runs).pid.read_text())
        os.kill(pid, signal.SIGKILL)
        in_flight = set()
        if journal.is_dir():
            entries = read_journal(journal, kinds)
            started = {e.rec.task_id for e in entries if isinstance(e.rec, EpisodeStarted)}
            done = {e.rec.task_id for e in entries if isinstance(e.rec, EpisodeEnded)}
            in_flight = started - done
        restarted = mw("daemon", "start", "--runs", str(runs))
        assert restarted.returncode == 0, restarted.stderr  # finds the campaign and resumes it
        final = wait_for(runs, tag, {"completed"})
        assert final["progress"]["cases_served"] == 36, (round_number, final)
        records = read_journal(journal, kinds)
        counts = Counter(e.rec.task_id for e in records if isinstance(e.rec, EpisodeEnded))
        assert set(counts.values()) == {1}, (round_number, counts)
        outcome = results(runs, tag)
        assert outcome.keys() == baseline.keys()
        unknown = {key for key, value in outcome.items() if value[0] == "unknown"}
        assert {task for task, _ in unknown} <= in_flight, round_number
        print(f"round {round_number}: killed after {ended} ended, {len(unknown)} unknown")
        # A serving episode in block b runs on v(b), and v(b) learns from blocks < b. An
        # unknown episode leaves its block's evidence short, so the versions after it may
        # differ from the uninterrupted run's; every version before it is the same, and
        # so is every episode that ran on one of those.
        short = min((value[2] for (_, phase), value in outcome.items()
                     if phase == "serving" and value[0] == "unknown"), default=10**6)  # fmt: skip
        ours, theirs = learned(runs, tag), learned(runs, "baseline")
        assert all(ours[v] == theirs[v] for v in ours if v <= short), round_number
        same = {k for k in baseline if k not in unknown and outcome[k][2] <= short}
        differ = {k for k in same if outcome[k] != baseline[k]}
        assert not differ, (round_number, [(k, outcome[k], baseline[k]) for k in sorted(differ)])
        check_accounts(runs, tag)
    assert mw("daemon", "stop", "--runs", str(runs)).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("delay", KILL_DELAYS)
def test_a_daemon_killed_just_after_a_submit_starts_the_campaign_on_restart(
    runs: Path, delay: float
) -> None:
    """Killed before the campaign's journal held its start, it was left stranded (4 of 4)."""
    from collections import Counter

    from mw_actors.journal import read_journal
    from mw_actors.metering import BUDGET_RECORDS
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS, EpisodeEnded

    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    submitted = synthetic_campaign("submit", runs, "early", 12)
    assert submitted.returncode == 0, submitted.stderr
    time.sleep(delay)
    os.kill(int(DaemonPaths(runs).pid.read_text()), signal.SIGKILL)
    restarted = mw("daemon", "start", "--runs", str(runs))
    assert restarted.returncode == 0, restarted.stderr
    final = wait_for(runs, "early", {"completed"})
    assert final["progress"]["cases_served"] == 12, final
    entries = read_journal(runs / "early" / "journal", [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS])
    counts = Counter(e.rec.task_id for e in entries if isinstance(e.rec, EpisodeEnded))
    assert set(counts.values()) == {1}, counts
    check_accounts(runs, "early")
    assert mw("daemon", "stop", "--runs", str(runs)).returncode == 0


def test_cancel_then_resume_over_the_control_socket(runs: Path) -> None:
    import anyio

    from mw_actors.daemon import Cancel, Resume

    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    submitted = synthetic_campaign("submit", runs, "c", 48)
    assert submitted.returncode == 0, submitted.stderr

    async def control() -> tuple[Any, Any]:
        async with connect(runs) as connection:
            while True:
                current = await connection.request(Status(tag="c"))
                if (current.get("progress") or {}).get("cases_served", 0) >= 12:
                    break
                await anyio.sleep(0.05)
            cancelled = await connection.request(Cancel(tag="c"))
            resumed = await connection.request(Resume(tag="c"))
            return cancelled, resumed

    cancelled, resumed = anyio.run(control)
    assert cancelled["state"] == "cancelled"
    assert resumed["state"] == "running"
    final = wait_for(runs, "c", {"completed"})
    assert final["progress"]["cases_served"] == 48


@pytest.mark.anyio
async def test_a_submitted_spec_is_decoded_whole_and_a_bad_field_is_refused_by_name(
    runs: Path,
) -> None:
    from mw_actors.daemon import ListCampaigns, Submit

    daemon = Daemon(runs, DaemonOptions())
    bad = {
        "a field nobody knows": ({"scenario": "synthetic_l1", "concurency": 8}, "concurency"),
        "a mistyped field": ({"scenario": "synthetic_l1", "concurrency": "8"}, "concurrency"),
        "a bad latency": ({"scenario": "synthetic_l1", "latency": {"tps": 5}}, "tps"),
        "a per-token price": (
            {
                "scenario": "synthetic_l1",
                "prices": {
                    "schema_version": 1,
                    "date": "2026-11-30",
                    "models": {
                        "m": {
                            "input_per_mtok": "0.0000001",
                            "cached_input_per_mtok": "0",
                            "output_per_mtok": "0.4",
                            "max_output_tokens": 10,
                        }
                    },
                },
            },
            "per token",
        ),
        "no scenario": ({"method": "blind"}, "scenario"),
        "a scenario that is a path": ({"scenario": "../../etc", "dataset": "/x"}, "scenario"),
        "a synthetic path": ({"scenario": "synthetic_/../../x"}, "scenario"),
        "a dataset without the scenario": (
            {"scenario": "synthetic_l9", "dataset": "/nonexistent"},
            "has no scenario",
        ),
    }
    with anyio.fail_after(60):  # a spec wrongly taken would start a campaign, not end here
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.serve)
            async with connect(runs) as control:
                for why, (spec, named) in bad.items():
                    with pytest.raises(MwError, match=named) as refused:
                        await control.request(Submit(kind="serve-learn", tag="bad", spec=spec))
                    assert "\n" not in str(refused.value), why
                assert refused.value.hint, why  # what to do about it
                assert await control.request(ListCampaigns()) == []  # nothing was registered
            daemon.stop()
    assert not (runs / "bad").exists()


@pytest.mark.anyio
async def test_a_registered_campaign_without_a_run_is_started_afresh(runs: Path) -> None:
    """A daemon killed between registering a campaign and its first record leaves an entry.

    It was listed as failed and never run (a submit stranded by a kill); the restarted
    daemon now starts it.
    """
    from mw_actors.daemon import DaemonPaths, ListCampaigns, Status

    DaemonPaths(runs).registry.mkdir(parents=True)
    spec = {"scenario": "synthetic_l1", "train_split": 12}
    entry = {"kind": "serve-learn", "tag": "lost", "spec": spec}
    (DaemonPaths(runs).registry / "lost.json").write_text(json.dumps(entry))
    daemon = Daemon(runs, DaemonOptions())
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.serve)
            async with connect(runs) as control:
                (listed,) = await control.request(ListCampaigns())
                assert listed["tag"] == "lost" and listed["state"] != "failed", listed
                while (await control.request(Status(tag="lost")))["state"] != "completed":
                    await anyio.sleep(0.2)
            daemon.stop()
    assert (runs / "lost" / "journal").is_dir()
