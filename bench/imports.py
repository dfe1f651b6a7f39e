"""The cost of ``import mw_actors``, beside ``import trio`` and ``import structlog``, in one run.

    python bench/imports.py [--runs N]

Each import runs in a fresh interpreter (``python -X importtime -c "import X"``), and
its figure is the median of N runs of the top module's cumulative time, read from
``-X importtime`` (the interpreter's own start is not in it). Goal (issue 30):
``import mw_actors`` <= 130 ms on the reference machine, and neither rich nor
pygments loaded. The machine is shared: read the figures as ratios to ``import trio``.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys

MODULES = ("trio", "structlog", "mw_actors")
HEAVY = ("rich", "pygments", "structlog")


def import_ms(module: str) -> tuple[float, list[str]]:
    """One fresh interpreter's cumulative import time of ``module``, and what heavy it loaded."""
    probe = (
        f"import sys, {module}; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0.0
    for line in done.stderr.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[2].strip() == module:
            total = float(fields[1]) / 1000.0
    return total, ast.literal_eval(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    print(f"{'import':<12} {'median ms':>10} {'min ms':>8}  loaded")
    for module in MODULES:
        times, loaded = [], []
        for _ in range(runs):
            took, loaded = import_ms(module)
            times.append(took)
        print(f"{module:<12} {statistics.median(times):>10.1f} {min(times):>8.1f}  {loaded}")
    print("goal: import mw_actors <= 130 ms, loading neither rich nor pygments")


if __name__ == "__main__":
    main()
