"""The latency of a status round-trip to the daemon while a campaign runs.

    python bench/daemon.py [--requests N]

Beside it: the same status read straight from the run directory, no daemon.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mw_actors.daemon import Status, Submit, campaign_status, connect  # noqa: E402


def mw(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "bin.mw", *args], cwd=ROOT, check=True, capture_output=True
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def measure(runs: Path, requests: int) -> tuple[list[float], list[float], list[float], str]:
    async with connect(runs) as control:
        spec = {"scenario": "synthetic_l1", "method": "mwm-local", "concurrency": 12}
        await control.request(Submit(kind="serve-learn", tag="bench", spec=spec))
        while (await control.request(Status(tag="bench"))).get("progress") is None:
            await anyio.sleep(0.05)
        held = []
        for _ in range(requests):
            t0 = time.perf_counter()
            await control.request(Status(tag="bench"))
            held.append(time.perf_counter() - t0)
        fresh = []
        for _ in range(requests // 5):
            t0 = time.perf_counter()
            async with connect(runs) as other:
                await other.request(Status(tag="bench"))
            fresh.append(time.perf_counter() - t0)
        direct = []
        for _ in range(requests // 5):
            t0 = time.perf_counter()
            campaign_status(runs / "bench")
            direct.append(time.perf_counter() - t0)
        state = (await control.request(Status(tag="bench")))["state"]
    return held, fresh, direct, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mwb-") as temp:
        runs = Path(temp)
        mw("daemon", "start", "--runs", str(runs))
        try:
            held, fresh, direct, state = anyio.run(measure, runs, args.requests)
        finally:
            mw("daemon", "stop", "--runs", str(runs))
    print(f"status while a campaign runs (it was {state} at the end)\n")
    print(f"| {'what':<44} | {'p50':>9} | {'p99':>9} | {'n':>5} |")
    print(f"|{'-' * 46}|{'-' * 11}|{'-' * 11}|{'-' * 7}|")
    for label, values in (
        ("daemon, one control connection", held),
        ("daemon, a new connection + handshake each", fresh),
        ("baseline: read the run directory, no daemon", direct),
    ):
        print(
            f"| {label:<44} | {1e3 * statistics.median(values):7.2f}ms | "
            f"{1e3 * pct(values, 0.99):7.2f}ms | {len(values):>5} |"
        )


if __name__ == "__main__":
    main()
