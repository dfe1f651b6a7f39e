"""The daemon while a campaign runs: status round-trips, and events to attached clients.

    python bench/daemon.py [--requests N] [--clients N] [--rounds N]

1. The latency of a status round-trip; beside it, the same status read straight
   from the run directory, no daemon.
2. The events per second delivered to 10 attached clients (each reads every
   event of a campaign: one per journal record), and the campaign's wall-clock
   with them attached over its wall-clock with none (goal: <= 1.05). The
   campaigns alternate, solo and watched, and the medians are compared.
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

from mw_actors.daemon import (  # noqa: E402
    CAMPAIGN_RECORDS,
    Cancel,
    Status,
    Submit,
    campaign_status,
    connect,
    subscribe,
)
from mw_actors.journal import read_journal  # noqa: E402

WATCHED = {
    "scenario": "synthetic_l1",
    "concurrency": 12,
    "train_split": 144,
    "latency": {"first_token_seconds": 0.05, "tokens_per_second": 400},
}


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
        await control.request(Cancel(tag="bench"))  # the next figures need the machine to itself
        while (await control.request(Status(tag="bench")))["state"] == "running":
            await anyio.sleep(0.1)
    return held, fresh, direct, state


def wall_clock(runs: Path, tag: str) -> float:
    """From the campaign's start record to its end record, in its journal."""
    entries = read_journal(runs / tag / "journal", CAMPAIGN_RECORDS)
    kinds = [type(e.rec).__name__ for e in entries]
    start = entries[kinds.index("ServeLearnStarted")].t
    return entries[len(kinds) - 1 - kinds[::-1].index("ServeLearnEnded")].t - start


async def watched(runs: Path, clients: int, rounds: int) -> tuple[list[float], list[float], float]:
    """Alternate solo and watched campaigns; return both wall-clocks and events/s delivered."""
    solo: list[float] = []
    seen: list[float] = []
    delivered = 0
    watched_time = 0.0
    async with connect(runs) as control:
        for n in range(rounds):
            tag = f"solo{n}"
            await control.request(Submit(kind="serve-learn", tag=tag, spec=WATCHED))
            while (await control.request(Status(tag=tag)))["state"] == "running":
                await anyio.sleep(0.2)
            solo.append(wall_clock(runs, tag))
            tag = f"watched{n}"
            counts = [0] * clients

            async def client(i: int, tag: str, ready: anyio.Event, counts: list[int]) -> None:
                async with subscribe(runs) as events:
                    ready.set()
                    async for event in events:
                        if event.tag == tag:
                            counts[i] += 1
                            if event.what == "finished":
                                return

            async with anyio.create_task_group() as tg:
                for i in range(clients):
                    ready = anyio.Event()
                    tg.start_soon(client, i, tag, ready, counts)
                    await ready.wait()
                await control.request(Submit(kind="serve-learn", tag=tag, spec=WATCHED))
            seen.append(wall_clock(runs, tag))
            delivered += sum(counts)
            watched_time += seen[-1]
    return solo, seen, delivered / watched_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mwb-") as temp:
        runs = Path(temp)
        mw("daemon", "start", "--runs", str(runs))
        try:
            held, fresh, direct, state = anyio.run(measure, runs, args.requests)
            solo, seen, rate = anyio.run(watched, runs, args.clients, args.rounds)
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
    ratio = statistics.median(seen) / statistics.median(solo)
    print(f"\ncampaign ({WATCHED['train_split']} serving cases), {args.rounds} rounds each\n")
    print(f"| {'what':<44} | {'value':>22} | goal |")
    print(f"|{'-' * 46}|{'-' * 24}|------|")
    label = "wall-clock, no client attached (median)"
    print(f"| {label:<44} | {statistics.median(solo):20.2f} s |  |")
    label = f"wall-clock, {args.clients} clients attached (median)"
    print(f"| {label:<44} | {statistics.median(seen):20.2f} s |  |")
    print(f"| {'ratio':<44} | {ratio:22.3f} | <= 1.05 |")
    print(f"| {'events/s delivered, all clients together':<44} | {rate:22,.0f} |  |")


if __name__ == "__main__":
    main()
