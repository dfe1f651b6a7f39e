"""The seeds' launcher: examples/servelearnbench/mwm/launch.sh, run as a real script."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mw_actors.serve_learn import score_file

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "examples" / "servelearnbench" / "mwm" / "launch.sh"
DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the real banking_l1 export


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


def _free_pair() -> int:
    """A port whose successor is free too (WM_PORT, and WM_PORT+1 for the learner's meter)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no free pair of ports")


def _until_ended(tag: str, runs: Path, log: Path, within: float = 400) -> dict[str, object]:
    """``mw status TAG --json`` once the campaign is no longer running (a hang guard)."""
    deadline = time.monotonic() + within
    while True:
        status = subprocess.run(
            [sys.executable, "-m", "bin.mw", "status", tag, "--runs", str(runs), "--json"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if status.returncode == 0:
            found: dict[str, object] = json.loads(status.stdout)
            if found["state"] != "running":
                return found
        assert time.monotonic() < deadline, log.read_text() if log.exists() else status.stderr
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["synthetic_l1", "banking_l1"])
def test_the_seeds_page_to_the_letter_gives_every_row_of_its_outputs_table(
    scenario: str, tmp_path: Path
) -> None:
    """As the seeds' page runs it, offline: the variables, launch.sh SCENARIO, launch.sh
    SCENARIO test, then `slb score`. The default config runs MWM (a learner session per
    block of 12), and the run directory holds every row of DESIGN.md's table."""
    runs, tag = tmp_path / "runs", f"{scenario}-seed"
    env = _env(runs, MW_TAG=tag, WM_PORT=str(_free_pair()), MW_MODEL="local/scripted",
               MW_TRAIN_SPLIT="24")  # fmt: skip
    if scenario != "synthetic_l1":
        env["MW_DATASET"] = str(DATASET)
    done = launch(scenario, env=env)
    assert done.returncode == 0, done.stderr
    assert "started in the background" in done.stdout
    status = _until_ended(tag, runs, runs / f"{tag}.launch.log")
    assert status["state"] == "completed", status
    root = runs / tag
    # run.log: the setting stamp first, then the training output.
    log = [json.loads(line) for line in (root / "run.log").read_text().splitlines()]
    setting = log[0]["setting"]
    assert (setting["method"], setting["model"], setting["learner_model"]) == (
        "mwm", "local/scripted", "local/scripted")  # fmt: skip
    assert setting["host_meter"].endswith(f":{env['WM_PORT']}")
    assert log[-1]["finished"]["state"] == "completed"
    # <tag>/steps.jsonl: one record per learner block.
    steps = [json.loads(line) for line in (root / tag / "steps.jsonl").read_text().splitlines()]
    assert [(s["block"], s["version"]) for s in steps] == [(0, 1), (1, 2)]
    assert all(s["learner_tokens"] > 0 for s in steps)
    # <tag>/checkout/: the adapter and the final card (the last block's version).
    checkout = root / tag / "checkout"
    index = json.loads((checkout / "index.json").read_text())
    final = checkout / "versions" / index["2"]
    assert (checkout / "adapter.safetensors").read_bytes() == (
        final / "adapter.safetensors").read_bytes()  # fmt: skip
    assert (checkout / "card.md").read_text() == (final / "card.md").read_text()
    assert (checkout / "card.md").read_text().startswith("# World model v2")
    # task/results/<scenario>_mwm.jsonl, which `slb score` accepts.
    results = root / "task" / "results" / f"{scenario}_mwm.jsonl"
    header, *rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert header["config"]["method"] == "mwm"
    # task/evidence/: each serving episode's evidence.
    serving = [r["task_id"] for r in rows if r["phase"] == "serving"]
    assert len(serving) == 24
    assert all((root / "task" / "evidence" / f"{t}.json").exists() for t in serving)
    # test.log: each window's tests and score.
    assert (root / "test.log").read_text().startswith("window 0 on v2: ")
    slb = Path(sys.executable).parent / "slb"
    scored = subprocess.run([str(slb), "score", str(results)], capture_output=True, text=True,
                            check=False)  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    mine = score_file(results)
    if scenario == "banking_l1":  # the benchmark's own table, its B1 column
        assert f"{mine.hidden:.1f}/{mine.fully_specified:.1f}" in scored.stdout, scored.stdout
    # wire_ledger.json and meta_wire_ledger.json: host and learner provider accounting.
    host = json.loads((root / "wire_ledger.json").read_text())
    learner = json.loads((root / "meta_wire_ledger.json").read_text())
    assert host["requests"] > 0 and learner["requests"] == len(steps) * 4, learner
    # Manual test mode, beside the finished training.
    manual = launch(scenario, "test", env=env)
    assert manual.returncode == 0, manual.stderr
    assert "window 0: tested now" in manual.stdout
    assert (root / "manual" / "task" / "results" / f"{scenario}_mwm.jsonl").exists()


@pytest.mark.timeout(150)
def test_with_a_daemon_running_the_launcher_submits_to_it(tmp_path: Path) -> None:
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
        status = _until_ended("viad", runs, runs / "viad" / "run.log", within=100)
        assert status["state"] == "completed", status
        assert not (runs / "viad.launch.log").exists()  # it ran in the daemon, not in nohup
    finally:
        subprocess.run(
            [*mw, "daemon", "stop", "--runs", str(runs)], cwd=ROOT, capture_output=True, check=False
        )
