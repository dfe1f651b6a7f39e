"""The budget reserver's throughput, with group commit and without, in one run.

    python bench/reserver.py [--seconds S] [--clients 1,8,64]

A journaled ``BudgetReserver`` on this machine's disk, and N clients that each
reserve and settle in a loop (a meter's two calls per request) for S seconds.
Every grant is durable when it is answered. Beside it, the baseline: the same
reserver answering one request per fsync (what it did before group commit).
Figures: reservations/s, fsyncs per reservation, and p50 / p99 of reserve ->
answered (durable). Goal (issue 31): >= 20,000 reservations/s with 64 clients
reserving at once, p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import meters  # noqa: E402
import mw_actors as mw  # noqa: E402
import mw_actors.metering  # noqa: E402


class OneAtATime(mw.metering.BudgetReserver):
    """The baseline: one request per batch, so one fsync per reservation and settle."""

    async def run(self, ctx: mw.ActorContext) -> None:
        while True:
            try:
                (envelope,) = await ctx.receive_waiting(1)
            except anyio.EndOfStream:
                return
            answer = self._decide(envelope.message)
            if ctx.journal is not None:
                await ctx.journal.sync()
            if envelope.reply is not None:
                envelope.reply.set(answer)


async def measure(kind: type[Any], clients: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=ROOT) as name:
        records = mw.metering.BUDGET_RECORDS
        async with (
            mw.journal.open_journal(Path(name), record_types=records) as journal,
            mw.open_runtime(journal=journal, record_types=records) as rt,
        ):
            spec = mw.ChildSpec(id="reserver", start=lambda: kind(Decimal("1e12")))
            client = mw.metering.ReserverClient(await rt.spawn(spec))
            waits: list[float] = []
            done = 0
            stop = time.perf_counter() + seconds
            fsyncs_before = journal.statistics().fsyncs

            async def loop(holder: str) -> None:
                nonlocal done
                while time.perf_counter() < stop:
                    began = time.perf_counter()
                    granted = await client.reserve(Decimal("0.01"), holder)
                    waits.append(time.perf_counter() - began)
                    assert isinstance(granted, meters.Granted)
                    await client.settle(granted.id, Decimal("0.005"))
                    done += 1

            began = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for number in range(clients):
                    tg.start_soon(loop, f"meter:{number}")
            elapsed = time.perf_counter() - began
            fsyncs = journal.statistics().fsyncs - fsyncs_before
    waits.sort()
    return {
        "per_second": done / elapsed,
        "fsyncs_each": fsyncs / max(done, 1),
        "p50_ms": 1e3 * statistics.median(waits),
        "p99_ms": 1e3 * waits[int(0.99 * (len(waits) - 1))],
    }


async def main(seconds: float, clients: list[int]) -> None:
    print(f"reserve + settle loops, {seconds:g} s each; every grant durable when answered\n")
    print("| clients | reserver | reservations/s | fsyncs each | reserve p50 | reserve p99 |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in clients:
        for label, kind in (("one at a time", OneAtATime),
                            ("group commit", mw.metering.BudgetReserver)):  # fmt: skip
            f = await measure(kind, n, seconds)
            print(f"| {n} | {label} | {f['per_second']:,.0f} | {f['fsyncs_each']:.2f} | "
                  f"{f['p50_ms']:.2f} ms | {f['p99_ms']:.2f} ms |")  # fmt: skip
    print("\ngoal: >= 20,000 reservations/s with 64 clients, p99 <= 5 ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,8,64")
    args = parser.parse_args()
    anyio.run(main, args.seconds, [int(c) for c in args.clients.split(",")])
