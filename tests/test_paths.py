"""Relative paths mean the caller's directory, wherever the command hands them on (issue 19)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mw_actors.serve_learn import read_journaled

ROOT = Path(__file__).resolve().parents[1]


def mw_in(cwd: Path, *args: str, module: str = "bin.mw") -> subprocess.CompletedProcess[str]:
    """``mw ARGS`` typed in ``cwd`` (mw found on the path, not in ``cwd``)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def daemons_for(runs: Path) -> list[int]:
    """Pids of every ``mw daemon run`` process serving ``runs``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"daemon" in argv and b"run" in argv and str(runs).encode() in argv:
            found.append(int(entry.name))
    return found


@pytest.fixture
def here() -> Iterator[Path]:
    # Unix socket paths are short (108 bytes): stay near /.
    path = Path(tempfile.mkdtemp(prefix="mwp-"))
    (path / "a").mkdir()
    (path / "b").mkdir()
    yield path
    for runs in (path / "a" / "rel" / "D", path / "a" / "T"):
        mw_in(path, "daemon", "stop", "--runs", str(runs))
    shutil.rmtree(path, ignore_errors=True)


def test_a_relative_runs_is_the_callers_for_every_daemon_command(here: Path) -> None:
    a, b = here / "a", here / "b"
    runs = a / "rel" / "D"
    started = mw_in(a, "daemon", "start", "--runs", "rel/D")
    assert started.returncode == 0, started.stderr
    assert str(runs / ".mw-daemon" / "control.sock") in started.stdout  # where it put it
    (pid,) = daemons_for(runs)
    assert Path(f"/proc/{pid}/cwd").resolve() == runs  # it works in its runs directory
    elsewhere = mw_in(b, "daemon", "status", "--runs", str(runs))
    assert elsewhere.returncode == 0 and f"serves {runs}" in elsewhere.stdout, elsewhere.stdout
    same = mw_in(a, "daemon", "status", "--runs", "rel/D")
    assert same.returncode == 0 and f"serves {runs}" in same.stdout, same.stdout
    assert mw_in(b, "status", "--runs", str(runs)).returncode == 0
    again = mw_in(a, "daemon", "start", "--runs", "rel/D")
    assert again.returncode == 2 and "a daemon already runs" in again.stderr  # at once
    stopped = mw_in(a, "daemon", "stop", "--runs", "rel/D")
    assert stopped.returncode == 0, stopped.stderr
    assert daemons_for(runs) == []
    assert sorted(p.name for p in here.iterdir()) == ["a", "b"]  # nothing written elsewhere
    assert list(b.iterdir()) == []


def test_a_daemon_that_does_not_listen_in_time_is_not_left_running(here: Path) -> None:
    runs = here / "a" / "T"
    failed = mw_in(here / "a", "daemon", "start", "--runs", "T", "--timeout", "0.001")
    assert failed.returncode == 2
    (line,) = failed.stderr.splitlines()
    assert str(runs / ".mw-daemon" / "control.sock") in line and "within 0.001 s" in line
    assert daemons_for(runs) == []


def test_a_relative_runs_for_a_campaign_lands_under_the_caller(here: Path) -> None:
    run = mw_in(here / "a", "serve-learn", "run", "synthetic_l1", "--runs", "R", "--tag", "t",
                "--train-split", "12")  # fmt: skip
    assert run.returncode == 0, run.stderr
    root = here / "a" / "R" / "t"
    started = read_journaled(root).started
    assert started is not None
    assert started.settings["dataset"] == str(here / "a" / "R" / ".datasets")  # absolute
    assert sorted(p.name for p in here.iterdir()) == ["a", "b"]


def test_a_relative_output_for_wsm_lands_under_the_caller(here: Path) -> None:
    from mw_actors.editing import write_fixture

    config = write_fixture(here / "a" / "inputs")
    assert config.is_file()
    run = mw_in(here / "a", "benchmark", "run", "--config", "inputs/config.json",
                "--output", "out", "--local-trusted", module="bin.wsm")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert (here / "a" / "out" / "journal").is_dir()
    report = mw_in(here / "b", "benchmark", "report", str(here / "a" / "out"), module="bin.wsm")
    assert json.loads(report.stdout) == json.loads(run.stdout)
