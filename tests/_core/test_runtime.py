"""The embedded runtime: inside the caller's asyncio or trio program, no globals, no signals."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mw_actors as mw

from .helpers import Probe, assert_one_terminal_per_run, worker

pytestmark = pytest.mark.anyio


async def test_no_signal_handlers_unless_asked(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    async with mw.open_runtime(journal=tmp_path):
        assert signal.getsignal(signal.SIGTERM) is before


async def test_body_errors_propagate_unwrapped_and_the_tree_stops(tmp_path: Path) -> None:
    probe = Probe()
    with pytest.raises(KeyError, match="from the body"):
        async with mw.open_runtime(journal=tmp_path) as rt:
            await rt.spawn(worker(probe, "w"))
            raise KeyError("from the body")
    state = assert_one_terminal_per_run(tmp_path)
    assert state["root/w"].last_exit == "shutdown"


async def test_outer_cancellation_still_stops_the_tree_in_order(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(children=[worker(probe, "a"), worker(probe, "b")])
    with anyio.CancelScope() as outer:
        async with mw.open_runtime(journal=tmp_path, root=root):
            outer.cancel()
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    order = [
        r.actor for r in mw.journal.replay(mw.journal.read_journal(tmp_path), mw.journal.ActorExit)
    ]
    assert order == ["root/b", "root/a", "root"]


async def test_spawn_after_close_is_refused(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path) as rt:
        pass
    with pytest.raises(mw.ActorExited):
        await rt.spawn(worker(probe, "late"))


async def test_run_ids_stay_unique_across_reopened_journals(tmp_path: Path) -> None:
    probe = Probe()
    for _ in range(2):
        async with mw.open_runtime(journal=tmp_path) as rt:
            await rt.spawn(worker(probe, "w"))
    spawns = list(mw.journal.replay(mw.journal.read_journal(tmp_path), mw.journal.ActorSpawn))
    runs = [s.run for s in spawns]
    assert len(runs) == len(set(runs)) == 4
    assert_one_terminal_per_run(tmp_path)


async def test_signal_handling_when_asked(tmp_path: Path) -> None:
    import os

    probe = Probe()
    async with mw.open_runtime(journal=tmp_path, handle_signals=True) as rt:
        await rt.spawn(worker(probe, "w"))
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep_forever()  # cancelled by the signal: a graceful stop
    assert assert_one_terminal_per_run(tmp_path)["root/w"].last_exit == "shutdown"


async def test_without_a_journal(tmp_path: Path) -> None:
    probe = Probe()
    async with mw.open_runtime() as rt:
        ref = await rt.spawn(worker(probe, "w"))
        assert await ref.ask("x") == "x"
        stats: Any = await rt.root.statistics()
        assert (stats.children, stats.alive) == (1, 1)


async def test_runs_a_dead_process_left_open_get_their_terminal_record(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    async with mw.journal.open_journal(journal) as j:  # as if the process died mid-run
        await j.append(mw.journal.ActorSpawn(actor="root/worker", run=7, supervisor="root"))
    async with mw.open_runtime(journal=journal):
        pass
    entries = mw.journal.read_journal(journal)
    views = mw.journal.rebuild(mw.journal.SupervisionView(), entries)
    assert views["root/worker"].open_runs == []
    (lost,) = [e.rec for e in entries if isinstance(e.rec, mw.journal.ActorExit) and e.rec.run == 7]
    assert isinstance(lost.reason, mw.ExitLost)
    assert_one_terminal_per_run(journal)


class Gate(mw.Actor[Any]):
    """Handles one message at a time, each only once the gate opens."""

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def handle(self, message: Any) -> object:
        await self.gate.wait()
        return None


async def test_mailboxes_are_seen_live_and_observers_see_each_runtime() -> None:
    seen: list[mw.Runtime] = []
    gate = anyio.Event()
    with mw.observe_runtimes(seen.append):
        async with mw.open_runtime() as rt:
            assert seen == [rt]
            ref = await rt.spawn(mw.ChildSpec(id="gate", start=lambda: Gate(gate)))
            for n in range(4):
                await ref.tell(n)
            await anyio.sleep(0.05)  # the first is being handled, three wait
            assert rt.mailboxes()["root/gate"].depth == 3
            gate.set()
            await ref.ask("last")
            boxes = rt.mailboxes()
            assert boxes["root/gate"].depth == 0 and boxes["root/gate"].processed == 5
            await rt.root.terminate_child("gate")
            assert "root/gate" in rt.mailboxes()  # stopped, not removed: it may restart
    async with mw.open_runtime():
        assert len(seen) == 1  # outside the context, nobody is told


class SlowStart(mw.Actor[Any]):
    async def init(self, ctx: mw.ActorContext) -> object:
        await anyio.sleep(0.3)
        return None

    async def handle(self, message: Any) -> object:
        return None


_CANCELLED_WHILE_STARTING = """
import sys, anyio
sys.path.insert(0, {root!r})
import mw_actors as mw
from tests._core.test_runtime import SlowStart

async def main():
    root = mw.SupervisorSpec(children=[mw.ChildSpec(id="slow", start=SlowStart)])
    with anyio.move_on_after(0.05) as outer:  # fires while the child's init runs
        async with mw.open_runtime(journal={journal!r}, root=root):
            print("the body ran")
    print("stopped", outer.cancelled_caught)

anyio.run(main, backend={backend!r})
"""


def test_a_caller_cancelled_while_the_tree_starts_still_stops_it(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The tree runs shielded and stops only when asked: a cancellation that came before
    the body began must still ask it (it once left the tree running, and the caller hung).
    In a subprocess, so that the old hang fails here instead of hanging the suite."""
    import subprocess
    import sys

    script = _CANCELLED_WHILE_STARTING.format(
        root=str(Path(__file__).parents[2]), journal=str(tmp_path), backend=anyio_backend
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "stopped True", done.stderr[-2000:]
    state = assert_one_terminal_per_run(tmp_path)
    assert state["root/slow"].last_exit == "shutdown"
