"""``mw probe RUN_DIR``: a run's knowledge, played for $0 on each window's test version.

One real banking_l1 run (mwm-local, three blocks, window 0 tested on v3) is
made once for the module; the probe reads it, never writes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mw_actors.serve_learn import _probe_run
from mw_actors.serve_learn._slb import slb_available
from tests.processes import ROOT, mw

DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the real banking_l1 export
pytestmark = pytest.mark.skipif(not slb_available(), reason="servelearnbench is not installed")
RUN = ("--dataset", str(DATASET), "--train-split", "36")
LOCAL = {"MW_MODEL": "local/scripted"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    done = mw("serve-learn", "run", "banking_l1", "--method", "mwm-local", *RUN,
              "--runs", str(runs), "--tag", "m", env=LOCAL, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return runs


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_probe_prints_the_contracts_object_and_writes_nothing(runs: Path) -> None:
    before = _files(runs / "m")
    done = mw("probe", str(runs / "m"), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert list(report) == [
        "method", "scenario", "hidden", "fully_specified", "windows", "skipped"]  # fmt: skip
    assert (report["method"], report["scenario"]) == ("mwm-local", "banking_l1")
    [window] = report["windows"]
    assert list(window) == ["window", "version", "hidden", "fully_specified", "tests"]
    assert (window["window"], window["version"], window["tests"]) == (0, 3, 41)
    assert 0 <= report["hidden"] <= 100 and 0 <= report["fully_specified"] <= 100
    assert report["hidden"] == window["hidden"] and report["skipped"] == []
    assert _files(runs / "m") == before  # read only
    table = mw("probe", str(runs / "m"))
    assert table.returncode == 0, table.stderr
    own = json.loads(mw("score", "--json", str(
        runs / "m" / "task" / "results" / "banking_l1_mwm-local.jsonl")).stdout)[0]  # fmt: skip
    assert f"| 0 | v3 | 41 | {report['hidden']:.1f} | {report['fully_specified']:.1f} | " \
        f"{own['hidden']:.1f} | {own['fully_specified']:.1f} |" in table.stdout  # fmt: skip


def _oracle(text: str, answers: dict[str, str]) -> list[str]:
    return [signature for case, signature in answers.items() if case in text][:1]


def test_knowledge_of_the_right_action_scores_100_and_none_scores_0_with_reasons(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's scores are the verifier's on the window's tests: a method that ranks the
    ground truth first scores 100; one that has learned nothing scores 0, every test named."""
    from mw_actors.serve_learn._slb import SlbScenario

    bundle = SlbScenario("banking_l1").bundle
    answers = {}
    for task in bundle["test_set"](0):
        action = task.actions[0]
        shown = ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                          for k, v in sorted(action.kwargs.items()) if k != "case_id")  # fmt: skip
        answers[task.z["case_id"]] = f"{action.name}({shown})"

    knowing = dict(_probe_run.PROBED_METHODS, **{"mwm-local": lambda v, c: lambda t: _oracle(
        t, answers)})  # fmt: skip
    monkeypatch.setattr(_probe_run, "PROBED_METHODS", knowing)
    report, run = _probe_run.probe_run(runs / "m")
    assert (report.hidden, report.fully_specified, report.skipped) == (100.0, 100.0, [])
    assert run.windows[0].tests == 41  # the run's own, beside
    blank = dict(_probe_run.PROBED_METHODS, **{"mwm-local": lambda v, c: None})
    monkeypatch.setattr(_probe_run, "PROBED_METHODS", blank)
    report, _ = _probe_run.probe_run(runs / "m")
    assert (report.hidden, report.fully_specified) == (0.0, 0.0)
    assert len(report.skipped) == 41
    assert {s.reason for s in report.skipped} == {"the method has learned nothing by this version"}


@pytest.mark.slow
def test_a_running_campaign_is_probed_on_the_checkpoints_it_has(tmp_path: Path) -> None:
    """Probed while it trains: a window whose version is not learned yet is skipped, named;
    the campaign, read only, runs on and ends as it would have."""
    errors = tmp_path / "stderr"
    with errors.open("w") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "bin.mw", "serve-learn", "run", "banking_l1", "--method",
             "mwm-local", *RUN, "--runs", str(tmp_path), "--tag", "live"],
            cwd=ROOT, env={**os.environ, **LOCAL}, stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
    try:
        steps = tmp_path / "live" / "live" / "steps.jsonl"
        deadline = time.monotonic() + 240  # a hang guard, not a timing assertion
        while not (steps.is_file() and steps.read_text().strip()) and child.poll() is None:
            assert time.monotonic() < deadline, "the campaign learned no block"
            time.sleep(0.1)
        done = mw("probe", str(tmp_path / "live"), "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        if report["windows"]:  # it had learned v3 by the time the probe read it
            assert [w["version"] for w in report["windows"]] == [3]
        else:
            assert len(report["skipped"]) == 41
            assert {s["reason"] for s in report["skipped"]} == {
                "its checkpoint v3 is not learned yet"}  # fmt: skip
        assert child.wait(timeout=300) == 0, errors.read_text()
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait()
    after = json.loads(mw("probe", str(tmp_path / "live"), "--json").stdout)
    assert [w["version"] for w in after["windows"]] == [3] and after["skipped"] == []


@pytest.mark.slow
def test_an_slb_rag_run_is_probed_by_its_nearest_past_success(tmp_path: Path) -> None:
    done = mw("serve-learn", "run", "banking_l1", "--method", "slb:rag", *RUN,
              "--runs", str(tmp_path), "--tag", "r", env=LOCAL, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = mw("probe", str(tmp_path / "r"), "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["method"] == "slb:rag" and report["skipped"] == []
    assert [(w["version"], w["tests"]) for w in report["windows"]] == [(3, 41)]
    assert report["hidden"] is not None and report["hidden"] > 0  # it knows something


@pytest.mark.parametrize(
    ("method", "said"),
    [("blind", "method 'blind' ranks no actions"), ("slb:oracle", "method 'slb:oracle' ranks")],
)
def test_a_method_that_ranks_nothing_is_refused_in_one_line(
    method: str, said: str, tmp_path: Path
) -> None:
    done = mw("serve-learn", "run", "banking_l1", "--method", method, *RUN,
              "--runs", str(tmp_path), "--tag", "b", env=LOCAL, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = mw("probe", str(tmp_path / "b"))
    assert done.returncode == 2 and said in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1


def test_what_the_probe_cannot_read_is_refused_in_one_line(runs: Path, tmp_path: Path) -> None:
    for path, said in [
        (tmp_path / "none", "holds no campaign (no journal/)"),
        (runs, "holds no campaign (no journal/)"),
    ]:
        done = mw("probe", str(path))
        assert done.returncode == 2 and said in done.stderr, done.stderr
    done = mw("probe", str(runs / "m"), "--dataset", str(tmp_path / "gone"))
    assert done.returncode == 2 and "is not there" in done.stderr and "--dataset" in done.stderr
    synthetic = mw("serve-learn", "run", "synthetic_l1", "--runs", str(tmp_path), "--tag", "s",
                   "--train-split", "12", timeout=300)  # fmt: skip
    assert synthetic.returncode == 0, synthetic.stderr
    done = mw("probe", str(tmp_path / "s"))
    assert done.returncode == 2 and "mw's synthetic one" in done.stderr
