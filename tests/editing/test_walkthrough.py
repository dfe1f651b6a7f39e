"""The README walkthrough of ``wsm benchmark``, exactly as written, as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, wsm

pytestmark = pytest.mark.timeout(300)


def test_walkthrough_as_written(tmp_path: Path) -> None:
    inputs, run = tmp_path / "wsm-benchmark-inputs", tmp_path / "wsm-benchmark-run"
    made = subprocess.run(
        [sys.executable, "scripts/benchmark_fixture.py", "--output", str(inputs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    config = str(inputs / "config.json")

    pre = wsm("benchmark", "preflight", "--config", config)
    assert pre.returncode == 0, pre.stderr.decode()
    text = pre.stdout.decode()
    assert "schedule: 3 trials" in text
    assert "external calls: 0" in text
    assert "worst-case new reservation: $0.04" in text

    ran = wsm("benchmark", "run", "--config", config, "--output", str(run), "--local-trusted")
    assert ran.returncode == 0, ran.stderr.decode()
    again = wsm("benchmark", "report", str(run))
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout == ran.stdout  # the `cmp` of the walkthrough

    report = json.loads(ran.stdout)
    assert report["labels"] == ["synthetic", "exploratory"]
    assert report["local_trusted"] is True and report["isolated"] is False
    assert [t["trial_id"] for t in report["trials"]] == [
        "completion.baseline.0000",
        "completion.scripted.0000",
        "completion.agent.0000",
    ]
    assert report["outcomes"] == {"completed": 3}
    arms = report["arms"]
    assert arms["scripted"]["mean_task_loss"] > arms["baseline"]["mean_task_loss"]
    assert abs(arms["agent"]["mean_task_loss"] - arms["baseline"]["mean_task_loss"]) <= 1e-6
    assert report["checks"] == {
        "tolerance": 1e-6,
        "scripted_worse_than_baseline": True,
        "agent_restores_baseline": True,
    }

    markdown = wsm("benchmark", "report", str(run), "--markdown")
    assert markdown.returncode == 0
    assert b"| completion.agent.0000 | completed |" in markdown.stdout

    regraded = wsm("benchmark", "regrade", str(run), "--trial-id", "completion.agent.0000")
    assert regraded.returncode == 0, regraded.stderr.decode()
    outcome = json.loads(regraded.stdout)
    assert outcome["comparison"]["matches"] is True
    assert outcome["comparison"]["cases"] == 32
    assert outcome["previous_sha256"] == report["trials"][2]["receipts"][0]["sha256"]


@pytest.mark.slow
def test_the_same_campaign_in_the_bwrap_sandbox(fixture_master: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    ran = wsm("benchmark", "run", "--config", str(fixture_master), "--output", str(run))
    assert ran.returncode == 0, ran.stderr.decode()
    report = json.loads(ran.stdout)
    assert report["backend"] == "bwrap" and report["isolated"] is True
    assert report["local_trusted"] is False
    assert {t["backend"] for t in report["trials"]} == {"bwrap"}
    assert report["checks"]["scripted_worse_than_baseline"] is True
    assert report["checks"]["agent_restores_baseline"] is True
    # The sandbox ran as the unprivileged sandbox user: scratch files belong to it.
    scratch = run / "trials" / "completion.scripted.0000" / "scratch"
    assert scratch.stat().st_uid == 65534
