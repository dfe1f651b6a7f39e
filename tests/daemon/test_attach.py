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
    ):
        assert expected in view.stdout, view.stdout


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
