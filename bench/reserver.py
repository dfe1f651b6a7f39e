"""The budget reserver's throughput, with group commit and without, in one run.

    python bench/reserver.py [--seconds S] [--clients 1,8,64]

A journaled ``BudgetReserver`` on this machine's disk, and N clients that each
reserve and settle in a loop (a meter's two calls per request) for S seconds.
Every grant is durable when it is answered. Beside it, the baseline: the same
reserver answering one request per fsync (what it did before group commit).
Figures: reservations/s, fsyncs per reservation, and p50 / p99 of reserve ->
answered (durable). Goal (issue 31): >= 20,000 reservations/s with 64 clients
reserving at once, p99 <= 5 ms.

``--ray``: the same loops as a grid's cells on Ray make them, through the grid's
relay actor to the driver's pump and its journaled reserver: N clients split over
two Ray actors (the cluster's 2 CPUs), each call a ``RelayBudget`` call as a cell's
meter makes it. Beside it, the baseline: the pump asking the reserver one call after
another (what it did before it asked a batch together).
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
from mw_actors import grid as grid_ray  # noqa: E402


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
            fsyncs_before = journal.statistics().fsyncs
            began = time.perf_counter()
            done, waits = await reserve_loops(client, clients, seconds, "meter")
            elapsed = time.perf_counter() - began
            fsyncs = journal.statistics().fsyncs - fsyncs_before
    return figures(done, elapsed, fsyncs, waits)


async def reserve_loops(
    budget: Any, clients: int, seconds: float, holder: str
) -> tuple[int, list[float]]:
    """``clients`` loops reserving and settling for ``seconds``: how many, and each wait."""
    waits: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def loop(number: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            began = time.perf_counter()
            granted = await budget.reserve(Decimal("0.01"), f"{holder}:{number}")
            waits.append(time.perf_counter() - began)
            assert isinstance(granted, meters.Granted)
            await budget.settle(granted.id, Decimal("0.005"))
            done += 1

    async with anyio.create_task_group() as tg:
        for number in range(clients):
            tg.start_soon(loop, number)
    return done, waits


def figures(done: int, elapsed: float, fsyncs: int, waits: list[float]) -> dict[str, float]:
    waits = sorted(waits)
    return {
        "per_second": done / elapsed,
        "fsyncs_each": fsyncs / max(done, 1),
        "p50_ms": 1e3 * statistics.median(waits),
        "p99_ms": 1e3 * waits[int(0.99 * (len(waits) - 1))],
    }


class Callers:
    """A Ray actor: ``clients`` loops, each a cell's meter reserving through the relay."""

    async def run(
        self, relay: Any, clients: int, seconds: float, echo: bool = False
    ) -> tuple[int, list[float]]:
        """Ray runs it on the actor's event loop (an async actor)."""
        budget = (EchoBudget if echo else grid_ray.RelayBudget)(relay)
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, clients)
        return await reserve_loops(budget, clients, seconds, "cell")


class Echo:
    """The floor of a relay: an async actor that answers each call at once."""

    async def ask(self, request: Any) -> Any:
        return request


class EchoBudget(grid_ray.RelayBudget):
    """A cell's calls to :class:`Echo`: Ray's own cost per call, no reserver behind it."""

    async def reserve(self, amount: Any, holder: str) -> Any:
        await self._ask("reserve", amount, holder)
        return meters.Granted(id="-", amount=format(amount, "f"))


class OneByOnePump(grid_ray.RayExecutor):
    """The baseline pump: each call asked of the reserver after the one before is answered."""

    async def _answer_batch(
        self, relay: Any, budget: meters.Reserver, batch: list[tuple[int, tuple[Any, ...]]]
    ) -> None:
        for number, request in batch:
            await self._answer(relay, budget, number, request)


async def from_cells(
    target: Any, clients: int, seconds: float, echo: bool = False
) -> tuple[int, float, list[float]]:
    """``clients`` loops calling ``target`` from two Ray actors: how many, in how long, waits."""
    ray = grid_ray.import_ray()
    actors = [ray.remote(num_cpus=1)(Callers).remote() for _ in range(2)]
    shares = [clients // 2 + clients % 2, clients // 2]
    began = time.perf_counter()
    pairs = zip(actors, shares, strict=True)
    refs = [a.run.remote(target, n, seconds, echo) for a, n in pairs if n]
    results = await anyio.to_thread.run_sync(ray.get, refs)
    elapsed = time.perf_counter() - began
    for actor in actors:
        ray.kill(actor)
    return sum(n for n, _ in results), elapsed, [w for _, ws in results for w in ws]


async def measure_ray(pump: type[Any], clients: int, seconds: float) -> dict[str, float]:
    ray = grid_ray.import_ray()
    executor = pump()
    relay = ray.remote(grid_ray.BudgetRelay).options(max_concurrency=1000).remote()
    with tempfile.TemporaryDirectory(dir=ROOT) as name:
        records = mw.metering.BUDGET_RECORDS
        async with (
            mw.journal.open_journal(Path(name), record_types=records) as journal,
            mw.open_runtime(journal=journal, record_types=records) as rt,
        ):
            spec = mw.ChildSpec(
                id="reserver", start=lambda: mw.metering.BudgetReserver(Decimal("1e12"))
            )
            client = mw.metering.ReserverClient(await rt.spawn(spec))
            fsyncs_before = journal.statistics().fsyncs
            async with anyio.create_task_group() as tg:
                tg.start_soon(executor._pump, relay, client)
                done, elapsed, waits = await from_cells(relay, clients, seconds)
                tg.cancel_scope.cancel()
            fsyncs = journal.statistics().fsyncs - fsyncs_before
    ray.kill(relay)
    return figures(done, elapsed, fsyncs, waits)


async def measure_echo(clients: int, seconds: float) -> dict[str, float]:
    """Ray's floor: the same callers' loops against an actor that answers at once."""
    ray = grid_ray.import_ray()
    echo = ray.remote(Echo).options(max_concurrency=1000).remote()
    done, elapsed, waits = await from_cells(echo, clients, seconds, echo=True)
    ray.kill(echo)
    return figures(done, elapsed, 0, waits)


async def main_ray(seconds: float, clients: list[int]) -> None:
    ray = grid_ray.import_ray()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"through the grid's relay on Ray (2 CPUs), {seconds:g} s each\n")
    print("| clients | pump | reservations/s | fsyncs each | reserve p50 | reserve p99 |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in clients:
        for label, pump in (
            ("one by one", OneByOnePump),
            ("a batch together", grid_ray.RayExecutor),
            ("none: Ray's floor", None),
        ):
            if pump is None:
                f = await measure_echo(n, seconds)
            else:
                f = await measure_ray(pump, n, seconds)
            print(f"| {n} | {label} | {f['per_second']:,.0f} | {f['fsyncs_each']:.2f} | "
                  f"{f['p50_ms']:.2f} ms | {f['p99_ms']:.2f} ms |")  # fmt: skip
    ray.shutdown()
    print("\ngoal: >= 20,000 reservations/s with 64 cells reserving at once")
    print("Ray's floor: each reserve and settle one actor call to an actor that answers at once")


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
    parser.add_argument("--ray", action="store_true", help="through a grid's relay on Ray")
    args = parser.parse_args()
    numbers = [int(c) for c in args.clients.split(",")]
    anyio.run(main_ray if args.ray else main, args.seconds, numbers)
