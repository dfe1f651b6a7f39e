"""The seeds' launcher: examples/servelearnbench/mwm/launch.sh, run as a real script."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "examples" / "servelearnbench" / "mwm" / "launch.sh"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "FIREWORKS"))}
    return {**env, "MW_RUNS": str(tmp_path), "MW_FRAMEWORK_PYTHON": sys.executable, **extra}


def launch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LAUNCH), *args], env=env, capture_output=True, text=True, check=False
    )


def test_without_the_default_models_key_it_stops_and_says_what_to_do(tmp_path: Path) -> None:
    done = launch("synthetic_l1", env=_env(tmp_path))
    assert done.returncode == 2
    assert "FIREWORKS_API_KEY is not set" in done.stderr
    assert "MW_MODEL=local/scripted" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing started, no model switched


@pytest.mark.timeout(120)
def test_a_synthetic_scenario_trains_in_the_background_offline(tmp_path: Path) -> None:
    env = _env(tmp_path, MW_MODEL="local/scripted", MW_TRAIN_SPLIT="24", MW_TAG="bg")
    done = launch("synthetic_l1", env=env)
    assert done.returncode == 0, done.stderr
    assert "started in the background" in done.stdout
    results = tmp_path / "bg" / "task" / "results" / "synthetic_l1_mwm-local.jsonl"
    deadline = time.monotonic() + 100
    while not (results.exists() and (tmp_path / "bg" / "test.log").exists()):
        assert time.monotonic() < deadline, (tmp_path / "bg.launch.log").read_text()
        time.sleep(0.2)
    time.sleep(0.5)
    assert "window 0 on v2" in (tmp_path / "bg" / "test.log").read_text()
    manual = launch("synthetic_l1", "test", env=env)
    assert manual.returncode == 0, manual.stderr
    assert "window 0: tested now" in manual.stdout
    assert (
        tmp_path / "bg" / "manual" / "task" / "results" / "synthetic_l1_mwm-local.jsonl"
    ).exists()


@pytest.mark.timeout(150)
def test_with_a_daemon_running_the_launcher_submits_to_it(tmp_path: Path) -> None:
    import json
    import tempfile

    runs = Path(tempfile.mkdtemp(prefix="mwl-"))  # a short path for the daemon's socket
    mw = [sys.executable, "-m", "bin.mw"]
    try:
        started = subprocess.run(
            [*mw, "daemon", "start", "--runs", str(runs)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        env = _env(runs, MW_MODEL="local/scripted", MW_TRAIN_SPLIT="12", MW_TAG="viad")
        done = launch("synthetic_l1", env=env)
        assert done.returncode == 0, done.stderr
        assert "submitted viad to the daemon" in done.stdout
        deadline = time.monotonic() + 100
        while True:
            status = subprocess.run(
                [*mw, "status", "viad", "--runs", str(runs), "--json"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            if status.returncode == 0 and json.loads(status.stdout)["state"] == "completed":
                break
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(0.3)
        assert not (runs / "viad.launch.log").exists()  # it ran in the daemon, not in nohup
    finally:
        subprocess.run(
            [*mw, "daemon", "stop", "--runs", str(runs)], cwd=ROOT, capture_output=True, check=False
        )
