"""Benchmarks of the actor kernel, each figure printed beside its baseline from the same run.

    python bench/actors.py [--quick]

Figures, each beside its baseline, and the goal:
- tell throughput: a bare anyio memory object stream; >= 50%.
- ask round-trip p50: a bare request/reply over a stream; <= 2x.
- durable journal records/s: one write+fsync per record; >= 50,000/s with 64 writers.
- journal p99 acknowledgement with 64 writers: <= 5 ms.
- start+stop dynamic children: 1,000 children; 10x the children in <= 15x the time.

Figures are medians of a few repeats; this machine is shared, so read them as
ratios, never as assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mw_actors as mw

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))


class Evidence(mw.journal.Record, tag="bench.evidence", frozen=True):
    writer: int
    index: int


def median_of(repeats: int, fn: Callable[[], Awaitable[float]]) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        return statistics.median([await fn() for _ in range(repeats)])

    return run


# -- tell throughput -------------------------------------------------------------------


async def bare_tell(n: int) -> float:
    send, recv = anyio.create_memory_object_stream[int](1000)
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            async with recv:
                async for _ in recv:
                    pass

        tg.start_soon(consume)
        async with send:
            for i in range(n):
                await send.send(i)
    return n / (time.perf_counter() - start)


class _Sink(mw.Actor[int]):
    async def handle(self, message: int) -> object:
        return message


async def mw_tell(n: int) -> float:
    async with mw.open_runtime() as rt:
        ref = await rt.spawn(mw.ChildSpec(id="sink", start=_Sink))
        start = time.perf_counter()
        for i in range(n):
            await ref.tell(i)
        await ref.ask(-1)  # everything before it has been handled
        return n / (time.perf_counter() - start)


# -- ask round trip ------------------------------------------------------------------------


async def bare_ask(n: int) -> float:
    send, recv = anyio.create_memory_object_stream[tuple[int, list[Any], anyio.Event]](1000)
    latencies = []
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            async with recv:
                async for value, box, done in recv:
                    box.append(value)
                    done.set()

        tg.start_soon(serve)
        async with send:
            for i in range(n):
                t0 = time.perf_counter()
                box: list[Any] = []
                done = anyio.Event()
                await send.send((i, box, done))
                await done.wait()
                latencies.append(time.perf_counter() - t0)
    return statistics.median(latencies)


async def mw_ask(n: int) -> float:
    latencies = []
    async with mw.open_runtime() as rt:
        ref = await rt.spawn(mw.ChildSpec(id="sink", start=_Sink))
        for i in range(n):
            t0 = time.perf_counter()
            await ref.ask(i)
            latencies.append(time.perf_counter() - t0)
    return statistics.median(latencies)


# -- journal ----------------------------------------------------------------------------


def fsync_per_record(directory: Path, n: int) -> float:
    path = directory / "baseline.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = b'{"crc":"00000000","seq":1,"t":0.0,"dur":"evidence","rec":{"kind":"x"}}\n'
    start = time.perf_counter()
    for _ in range(n):
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return n / elapsed


async def journal_rate(directory: Path, writers: int, per_writer: int) -> tuple[float, float]:
    latencies: list[float] = []
    async with mw.journal.open_journal(directory, record_types=[Evidence]) as journal:

        async def write(w: int) -> None:
            for i in range(per_writer):
                t0 = time.perf_counter()
                await journal.append(Evidence(writer=w, index=i))
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(write, w)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return writers * per_writer / elapsed, latencies[int(len(latencies) * 0.99)]


# -- dynamic children ---------------------------------------------------------------------


class _Idle(mw.Actor[Any]):
    def __init__(self, _index: int) -> None:
        pass


async def start_stop_children(n: int) -> float:
    spec = mw.SupervisorSpec(
        strategy="simple_one_for_one",
        children=[mw.ChildSpec(id="c", start=_Idle, restart="temporary", mailbox_capacity=4)],
    )
    start = time.perf_counter()
    async with mw.open_runtime() as rt:
        await rt.spawn(mw.supervisor("pool", spec))
        pool = await rt.root.child_supervisor("pool")
        for i in range(n):
            await pool.start_child(None, i)
    return time.perf_counter() - start


# -- main --------------------------------------------------------------------------------


def row(what: str, value: str, baseline: str, ratio: str, goal: str) -> None:
    print(f"| {what:<38} | {value:>14} | {baseline:>14} | {ratio:>8} | {goal:<22} |")


async def bench(backend: str, quick: bool) -> None:
    n = 20_000 if quick else 100_000
    asks = 2_000 if quick else 10_000
    tell_bare = await median_of(3, lambda: bare_tell(n))()
    tell_mw = await median_of(3, lambda: mw_tell(n))()
    row(
        f"tell throughput ({backend})",
        f"{tell_mw:,.0f}/s",
        f"{tell_bare:,.0f}/s",
        f"{tell_mw / tell_bare:.0%}",
        ">= 50%",
    )
    ask_bare = await median_of(3, lambda: bare_ask(asks))()
    ask_mw = await median_of(3, lambda: mw_ask(asks))()
    row(
        f"ask round-trip p50 ({backend})",
        f"{ask_mw * 1e6:.1f} us",
        f"{ask_bare * 1e6:.1f} us",
        f"{ask_mw / ask_bare:.2f}x",
        "<= 2x",
    )
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        base = await anyio.to_thread.run_sync(fsync_per_record, Path(tmp), 500 if quick else 2000)
        for writers, per in ((1, 500 if quick else 2000), (64, 200 if quick else 1000)):
            rate, p99 = await journal_rate(Path(tmp) / f"j{writers}", writers, per)
            row(
                f"journal durable records/s, {writers} writer(s) ({backend})",
                f"{rate:,.0f}/s",
                f"{base:,.0f}/s",
                f"{rate / base:.1f}x",
                ">= 50,000/s" if writers == 64 else "-",
            )
            if writers == 64:
                row(
                    f"journal p99 ack, 64 writers ({backend})",
                    f"{p99 * 1e3:.2f} ms",
                    "-",
                    "-",
                    "<= 5 ms",
                )
    small = 1_000
    large = 10_000
    t_small = await median_of(3, lambda: start_stop_children(small))()
    t_large = await start_stop_children(large)
    row(
        f"start+stop 10,000 children ({backend})",
        f"{t_large:.2f} s",
        f"{t_small:.3f} s (1k)",
        f"{t_large / t_small:.1f}x",
        "<= 15x",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    args = parser.parse_args()
    row("figure", "mw", "baseline", "ratio", "goal")
    print(f"|{'-' * 40}|{'-' * 16}|{'-' * 16}|{'-' * 10}|{'-' * 24}|")
    for backend in ("asyncio", "trio") if args.backend == "both" else (args.backend,):
        anyio.run(bench, backend, args.quick, backend=backend)


if __name__ == "__main__":
    main()
