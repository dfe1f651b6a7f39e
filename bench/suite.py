"""The test suite's wall-clock: idle, and with every core busy beside it.

    python bench/suite.py [--workers 3] [--baseline] [--busy-only | --idle-only]

Runs the suite as `make test` does (`pytest -n WORKERS --dist loadfile`), once on an
idle machine and once beside one busy loop per core (`stress-ng --cpu N` where it is
installed, else as many Python loops), and prints each wall-clock and result beside
the goals (15 min idle; passes when busy). ``--baseline``: the suite on one worker too
(how `make test` ran it before), in the same run. Lint and set-up are not timed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_IDLE = 15 * 60
_SUMMARY = re.compile(r"=+ (.*) in [\d.]+s")


def _busy(cores: int) -> subprocess.Popen[bytes]:
    """One busy loop per core, until stopped."""
    if shutil.which("stress-ng"):
        command = ["stress-ng", "--cpu", str(cores), "--quiet"]
    else:
        loops = (
            "import os\nfor _ in range(%d - 1):\n    if os.fork() == 0: break\nwhile True: pass\n"
        )
        command = [sys.executable, "-c", loops % cores]
    return subprocess.Popen(command, start_new_session=True)


def _suite(workers: int) -> tuple[float, int, str]:
    """(seconds, exit status, pytest's summary line) of one run of the suite."""
    command = [sys.executable, "-m", "pytest", "-q"]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadfile"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    found = _SUMMARY.findall(done.stdout)
    return seconds, done.returncode, found[-1] if found else done.stdout[-300:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="one worker too, in this run")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--idle-only", action="store_true")
    which.add_argument("--busy-only", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 2
    rows: list[tuple[str, float, int, str, str]] = []
    if args.baseline:
        seconds, status, said = _suite(1)
        rows.append(("one worker, idle (before)", seconds, status, said, "-"))
    if not args.busy_only:
        seconds, status, said = _suite(args.workers)
        goal = f"<= {GOAL_IDLE // 60} min"
        rows.append((f"{args.workers} workers, idle", seconds, status, said, goal))
    if not args.idle_only:
        busy = _busy(cores)
        try:
            seconds, status, said = _suite(args.workers)
        finally:
            os.killpg(busy.pid, 15)
            busy.wait()
        rows.append(
            (f"{args.workers} workers, {cores} cores busy", seconds, status, said, "passes")
        )
    print(f"{'suite':34} {'wall':>9}  {'result':40} goal")
    for name, seconds, status, said, goal in rows:
        verdict = said if status == 0 else f"FAILED ({said})"
        print(f"{name:34} {seconds / 60:7.1f} m  {verdict[:40]:40} {goal}")


if __name__ == "__main__":
    main()
