"""``mw attach``: a live view that never disturbs the campaign or the daemon."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import mw as run_mw
from tests.processes import synthetic_campaign

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


def mw(*args: str) -> subprocess.CompletedProcess[str]:
    return run_mw(*args, env={"COLUMNS": "100"}, timeout=150)


@pytest.fixture
def runs() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mwa-"))
    yield path
    mw("daemon", "stop", "--runs", str(path))
    shutil.rmtree(path, ignore_errors=True)


def test_attach_once_shows_progress_actors_and_spend(runs: Path) -> None:
    ran = synthetic_campaign("run", runs, "a", 24)
    assert ran.returncode == 0, ran.stderr
    view = mw("attach", "a", "--runs", str(runs), "--once")
    assert view.returncode == 0, view.stderr
    for expected in (
        "a  (serve-learn, completed)",
        "window 0",
        "24/24",
        "blocks learned",
        "2/2",
        "root/campaign/learner",
        "host",
        "a: completed",
        "time left",
        "so far: hidden",  # the scores so far, and each window's as its tests land
        "window 0       v2     12",
        "campaign ended: completed",  # a finished campaign's last events, from its journal
    ):
        assert expected in view.stdout, view.stdout
    assert "(no events yet)" not in view.stdout


def test_the_time_left_is_estimated_from_the_blocks_served() -> None:
    from mw_actors.journal import Entry
    from mw_actors.serve_learn._kind import time_left as _time_left
    from mw_actors.serve_learn.records import EpisodeEnded, ServeLearnStarted

    started = ServeLearnStarted(tag="t", scenario="s", method="m", model="x", serving_total=48,
                              blocks=4, test_versions={}, allocation_usd="1")  # fmt: skip

    def served(i: int, t: float) -> Entry:
        rec = EpisodeEnded(task_id=f"s{i}", phase="serving", window=0, timestamp=i,
                           category="hidden", checkpoint=0, status="finished",
                           reward=1.0)  # fmt: skip
        return Entry(seq=i + 2, t=t, dur="evidence", rec=rec)

    entries = [Entry(seq=1, t=1000.0, dur="evidence", rec=started)]
    assert _time_left(entries, started) == "- (after the first block)"
    entries += [served(i, 1000.0 + 10 * (i + 1)) for i in range(18)]  # a block per 120 s
    assert _time_left(entries, started) == (
        "about 5m 00s of serving (from 1 finished block)"  # 30 cases left: 2.5 blocks
    )
    entries += [served(i, 1200.0 + i) for i in range(18, 48)]
    assert _time_left(entries, started) == "serving done; the last tests run"


def test_an_attach_killed_mid_view_never_disturbs_the_daemon(runs: Path) -> None:
    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    submitted = synthetic_campaign("submit", runs, "b", 36)
    assert submitted.returncode == 0, submitted.stderr
    for _ in range(3):  # attach, then vanish without a word
        viewer = subprocess.Popen(
            [sys.executable, "-m", "bin.mw", "attach", "b", "--runs", str(runs)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        viewer.send_signal(signal.SIGKILL)
        viewer.wait()
    follow = mw("attach", "b", "--runs", str(runs), "--until-done")
    assert follow.returncode == 0, follow.stderr
    assert "b: completed" in follow.stdout
    status = json.loads(mw("status", "b", "--runs", str(runs), "--json").stdout)
    assert status["state"] == "completed" and status["progress"]["cases_served"] == 36


def test_a_campaign_that_runs_before_its_start_record_shows_as_starting(tmp_path: Path) -> None:
    """Its checks and services take seconds; a view in that moment waits, it does not fail."""
    from collections import deque

    from mw_actors._lock import campaign_lock
    from mw_actors.daemon import campaign_status
    from mw_actors.daemon._attach import render
    from mw_errors import CampaignStarting, ConfigError

    run = tmp_path / "early"
    (run / "journal").mkdir(parents=True)
    with pytest.raises(ConfigError, match="never recorded a campaign's start"):
        campaign_status(run)  # nobody runs it: a journal that never started
    with campaign_lock(run):
        with pytest.raises(CampaignStarting):
            campaign_status(run)
        frame, state = render(run, deque())
    assert state == "running"
    assert "starting" in str(frame.renderables[0])
