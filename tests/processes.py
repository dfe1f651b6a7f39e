"""The project's commands as real processes, for tests: one-shot runs and servers."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import HANG_GUARD_SCALE

ROOT = Path(__file__).resolve().parents[1]


def mw(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, module: str = "bin.mw"
) -> subprocess.CompletedProcess[str]:
    """Run ``mw ARGS`` from the repository root; ``env`` adds to this process's environment.

    ``module`` runs another entry point (``bin.wsm``) the same way.
    """
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout * HANG_GUARD_SCALE,  # a hang guard: a busy machine is slower
        env={**os.environ, **(env or {})},
        check=False,
    )


@contextmanager
def runnable_by_others() -> Iterator[None]:
    """Let another uid run this interpreter and read the project, for the test's duration.

    A pyenv Python under a private /root loads its libpython from there; each
    directory above the interpreter and the project that others cannot search gets
    o+x (search, not read) until the block ends.
    """
    opened: list[tuple[Path, int]] = []
    for place in (Path(sys.base_prefix), Path(sys.prefix), ROOT):
        for directory in reversed(place.resolve().parents):
            mode = stat.S_IMODE(directory.stat().st_mode)
            if not mode & stat.S_IXOTH and directory not in dict(opened):
                directory.chmod(mode | stat.S_IXOTH)
                opened.append((directory, mode))
    try:
        yield
    finally:
        for directory, mode in reversed(opened):
            directory.chmod(mode)


def synthetic_campaign(
    command: str, runs: Path, tag: str, train_split: int
) -> subprocess.CompletedProcess[str]:
    """``mw serve-learn run|submit synthetic_l1`` for campaign ``tag`` under ``runs``."""
    return mw(
        "serve-learn", command, "synthetic_l1", "--runs", str(runs), "--tag", tag,
        "--train-split", str(train_split),
    )  # fmt: skip


def start_server(
    *args: str, env: dict[str, str] | None = None, module: str = "bin.mw"
) -> tuple[subprocess.Popen[str], str]:
    """Start ``mw ARGS`` (a provider or a meter); return it and its URL once it says it listens.

    ``module`` runs another entry point with the same flags (a test's planted fault).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on http://127.0.0.1:"):
        process.kill()
        _, stderr = process.communicate(timeout=20)
        raise AssertionError(f"mw {' '.join(args)} did not start: {line or stderr}")
    return process, line.removeprefix("listening on ")


def stop_server(process: subprocess.Popen[str]) -> None:
    """SIGTERM, and check it stopped cleanly (exit 0)."""
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)  # also closes the pipes
    assert process.returncode == 0, stderr


def episodes_ended(journal: Path) -> int:
    """How many episodes a campaign journal, perhaps being written now, has ended so far."""
    from mw_actors.journal import read_journal
    from mw_actors.metering import BUDGET_RECORDS
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS
    from mw_actors.serve_learn.records import EpisodeEnded

    try:
        entries = read_journal(journal, [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS])
    except Exception:  # not there yet, or a line half written
        return 0
    return sum(isinstance(e.rec, EpisodeEnded) for e in entries)


def grid_driver(grid: Path, runs: Path) -> subprocess.Popen[bytes]:
    """``mw grid run GRID --runs RUNS`` in a session of its own (to kill with killpg)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bin.mw", "grid", "run", str(grid), "--runs", str(runs)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
