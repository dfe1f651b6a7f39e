"""``mw demo``: a small supervised run that shows restarts and terminal records.

It starts a tree under a journal, feeds work to a worker that crashes twice,
runs real subprocess jobs (one fails once), then reads the journal back and
prints what every actor run did. The campaigns of later issues extend it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mw_errors import ActorExited

from ._core._actor import Actor, ActorContext
from ._core._journal import read_journal, rebuild, replay
from ._core._process import ProcessActor
from ._core._records import Record
from ._core._runtime import open_runtime
from ._core._spec import Backoff, ChildSpec, SupervisorSpec
from ._core._supervisor import supervisor
from ._core._views import SupervisionView

__all__ = ["DemoEvidence", "run_demo"]

CRASH_ON = frozenset({3, 7})
ITEMS = 10


class DemoEvidence(Record, tag="demo.evidence", frozen=True):
    """One processed work item: acknowledged only once it is on disk."""

    item: int
    worker: str
    attempt: int
    value: int


class _Squarer(Actor[int]):
    """Squares numbers; crashes the first time it meets an item in CRASH_ON."""

    def __init__(self, crashed: set[int]) -> None:
        self.crashed = crashed

    async def init(self, ctx: ActorContext) -> object:
        self.ctx = ctx
        return None

    async def handle(self, item: int) -> object:
        if item in CRASH_ON and item not in self.crashed:
            self.crashed.add(item)
            raise RuntimeError(f"demo crash on item {item}")
        journal = self.ctx.runtime.journal
        assert journal is not None
        record = DemoEvidence(
            item=item, worker=self.ctx.name, attempt=self.ctx.attempt, value=item * item
        )
        return await journal.append(record)


def _job_spec(workdir: Path) -> ChildSpec:
    # Job "flaky" exits 3 the first time (no marker yet) and succeeds when restarted.
    def start(name: str) -> Actor[Any]:
        marker = workdir / f"{name}.ran-once"
        script = f"test -e {marker} || {{ touch {marker}; exit 3; }}; sleep 0.1"
        return ProcessActor(["sh", "-c", script if name == "flaky" else "sleep 0.1"], grace=1)

    return ChildSpec(id="job", start=start, restart="transient", shutdown=2)


async def _demo(run_dir: Path, say: Callable[[str], None]) -> int:
    journal_dir = run_dir / "journal"
    crashed: set[int] = set()
    root = SupervisorSpec(
        strategy="one_for_one",
        intensity=5,
        period=5,
        backoff=Backoff(initial=0.05, maximum=0.5, jitter=0.1, reset_after=1),
        children=[
            ChildSpec(id="squarer", start=lambda: _Squarer(crashed)),
            supervisor(
                "jobs",
                SupervisorSpec(strategy="simple_one_for_one", children=[_job_spec(run_dir)]),
            ),
        ],
    )
    async with open_runtime(journal=journal_dir, root=root, record_types=[DemoEvidence]) as rt:
        squarer = await rt.root.child("squarer")
        for item in range(ITEMS):
            while True:
                try:
                    seq = await squarer.ask(item, timeout=10)
                except ActorExited as exc:
                    say(f"  item {item}: {exc.actor} crashed ({exc.reason}); sent again")
                    continue
                say(f"  item {item}: squared, journaled as record {seq} (fsynced)")
                break
        jobs = await rt.root.child_supervisor("jobs")
        refs = [await jobs.start_child(None, name) for name in ("steady", "flaky", "quick")]
        while any(ref.alive for ref in refs) or len(await jobs.which_children()) > 0:
            await anyio.sleep(0.05)
        say("  3 subprocess jobs finished under root/jobs (simple_one_for_one)")
    return _report(journal_dir, say)


def _report(journal_dir: Path, say: Callable[[str], None]) -> int:
    entries = read_journal(journal_dir, [DemoEvidence])
    views = rebuild(SupervisionView(), entries)
    say("")
    say(f"  {'actor':<22} {'runs':>4} {'restarts':>8}  last exit")
    for name in sorted(views):
        view = views[name]
        say(f"  {name:<22} {view.runs:>4} {view.restarts:>8}  {view.last_exit}")
    runs = sum(len(v.terminal_per_run) for v in views.values())
    terminals = sum(sum(v.terminal_per_run.values()) for v in views.values())
    one_each = all(count == 1 for v in views.values() for count in v.terminal_per_run.values())
    evidence = sorted(r.item for r in replay(entries, DemoEvidence))
    say("")
    say(f"  journal: {journal_dir} ({len(entries)} records, CRC-checked on read)")
    say(f"  actor runs: {runs}; terminal records: {terminals}; one per run: {one_each}")
    say(f"  evidence records: {len(evidence)} of {ITEMS} items, each acknowledged after fsync")
    return 0 if one_each and evidence == list(range(ITEMS)) else 1


def run_demo(
    runs_dir: Path, *, backend: str = "asyncio", say: Callable[[str], None] = print
) -> int:
    """Run the demo under ``runs_dir`` on ``backend``; return the process exit status."""
    run_dir = runs_dir / time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    say("mw demo: a supervised actor tree over a durable journal")
    say(f"  run directory: {run_dir}")
    return anyio.run(_demo, run_dir, say, backend=backend)
