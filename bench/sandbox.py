"""Launch overhead of a sandboxed ``exec``, beside a bare subprocess, from one run.

    python bench/sandbox.py [--runs N]

Goal: bwrap adds <= 15 ms at p50, for ``/bin/true`` and for ``python -c pass``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandbox


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def bare(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await anyio.run_process(argv)
        times.append(time.perf_counter() - t0)
    return times


async def boxed(backend: str, argv: list[str], runs: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        config = sandbox.SandboxConfig(scratch=str(Path(tmp) / "s"))
        async with sandbox.open_sandbox(backend, config) as box:
            for _ in range(runs):
                t0 = time.perf_counter()
                result = await box.exec(argv)
                times.append(time.perf_counter() - t0)
                assert result.exit_code == 0, result.stderr
    return times


def row(*cells: str) -> None:
    widths = (18, 14, 9, 9, 9, 8)
    print("| " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + " |")


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


async def main(runs: int) -> None:
    row("command", "backend", "p50", "p99", "added p50", "goal")
    row(*("-" * w for w in (18, 14, 9, 9, 9, 8)))
    commands = (("/bin/true", ["/bin/true"]), ("python -c pass", [sys.executable, "-c", "pass"]))
    for label, argv in commands:
        base = await bare(argv, runs)
        base50 = statistics.median(base)
        row(label, "bare", ms(base50), ms(pct(base, 0.99)), "-", "")
        for backend in ("local-trusted", "bwrap"):
            times = await boxed(backend, argv, runs)
            p50 = statistics.median(times)
            goal = "<= 15 ms" if backend == "bwrap" else ""
            row(label, backend, ms(p50), ms(pct(times, 0.99)), ms(p50 - base50), goal)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    anyio.run(main, parser.parse_args().runs)
