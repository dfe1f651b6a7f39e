"""A run killed mid-trial leaves that trial without a terminal record: the report says unknown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mw_actors.editing import build_report

from .conftest import ROOT, repin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_kill_9_mid_trial_reads_as_unknown(fixture_config: Path, tmp_path: Path) -> None:
    script = fixture_config.parent / "script.py"
    script.write_text("import time\nopen('editing', 'w').close()\ntime.sleep(60)\n")
    repin(fixture_config, script)
    run = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bin.wsm",
            "benchmark",
            "run",
            "--config",
            str(fixture_config),
            "--output",
            str(run),
            "--local-trusted",
        ],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = run / "trials" / "completion.scripted.0000" / "scratch" / "editing"
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert process.poll() is None, "the run ended before the scripted trial began"
        assert time.monotonic() < deadline, "the scripted trial never started"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()

    report = build_report(run)
    outcomes = {t.trial_id: t.outcome for t in report.trials}
    assert outcomes == {
        "completion.baseline.0000": "completed",
        "completion.scripted.0000": "unknown",
        "completion.agent.0000": "unknown",
    }
    assert report.finished is False
    assert report.checks.scripted_worse_than_baseline is None  # unknown is never success
