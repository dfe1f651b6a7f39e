"""The OTP supervisor matrix, on asyncio and trio, on virtual time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

import mw_actors as mw

from .helpers import Probe, assert_one_terminal_per_run, exits, settle, views, wait_for, worker

pytestmark = pytest.mark.anyio

BIG = mw.SupervisorSpec(intensity=100, period=5)


# -- restart type x exit kind -------------------------------------------------------

EXIT_KINDS: dict[str, Any] = {
    "normal": "normal",
    "shutdown": "shutdown",
    "shutdown_reason": ("shutdown", "done"),
    "error": "crash",
}
RESTARTED = {
    ("permanent", "normal"): True,
    ("permanent", "shutdown"): True,
    ("permanent", "shutdown_reason"): True,
    ("permanent", "error"): True,
    ("transient", "normal"): False,
    ("transient", "shutdown"): False,
    ("transient", "shutdown_reason"): False,
    ("transient", "error"): True,
    ("temporary", "normal"): False,
    ("temporary", "shutdown"): False,
    ("temporary", "shutdown_reason"): False,
    ("temporary", "error"): False,
}


@pytest.mark.parametrize(("restart", "exit_kind"), sorted(RESTARTED))
async def test_restart_type_by_exit_kind(tmp_path: Path, restart: str, exit_kind: str) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path, root=BIG, clock=mw.VirtualClock()) as rt:
        ref = await rt.spawn(worker(probe, restart=restart))
        await ref.tell(EXIT_KINDS[exit_kind])
        await wait_for(lambda: probe.of("init") != [("root/w", 1)] or not ref.alive)
        await settle()
        children = {c.id: c for c in await rt.root.which_children()}
        if RESTARTED[(restart, exit_kind)]:
            assert children["w"].alive and children["w"].runs == 2
            assert await ref.ask("still there") == "still there"
        else:
            assert probe.of("init") == [("root/w", 1)]
            assert ("w" in children) is (restart == "transient")
            with pytest.raises(mw.ActorExited):
                await ref.ask("anyone?")
    expected = {"normal": "normal", "shutdown": "shutdown", "shutdown_reason": "shutdown(done)"}
    first = exits(tmp_path, "root/w")[0]
    assert first == expected.get(exit_kind, first)
    assert first.startswith("error(") == (exit_kind == "error")
    assert_one_terminal_per_run(tmp_path)


# -- strategies ------------------------------------------------------------------------


def _three(probe: Probe, strategy: str) -> mw.SupervisorSpec:
    return mw.SupervisorSpec(
        strategy=strategy,
        intensity=10,
        children=[worker(probe, "a"), worker(probe, "b"), worker(probe, "c")],
    )


@pytest.mark.parametrize(
    ("strategy", "runs", "stopped_in_order"),
    [
        ("one_for_one", {"a": 1, "b": 2, "c": 1}, []),
        ("one_for_all", {"a": 2, "b": 2, "c": 2}, ["root/c", "root/a"]),
        ("rest_for_one", {"a": 1, "b": 2, "c": 2}, ["root/c"]),
    ],
)
async def test_strategies(
    tmp_path: Path, strategy: str, runs: dict[str, int], stopped_in_order: list[str]
) -> None:
    probe = Probe()
    async with mw.open_runtime(journal=tmp_path, root=_three(probe, strategy)) as rt:
        children = {c.id: c for c in await rt.root.which_children()}
        assert all(c.alive for c in children.values())
        probe.events.clear()
        assert children["b"].runs == 1
        await (await _ref(rt, "b")).tell("crash")
        await wait_for(lambda: len(probe.of("init")) == sum(runs.values()) - 3)
        await settle()
        got = {c.id: c.runs for c in await rt.root.which_children()}
        assert got == runs
        stopped = [a for a, w, _ in probe.events if w.startswith("terminate:shutdown")]
        assert stopped == stopped_in_order
        restarted = [a for a, _ in probe.of("init")]
        assert restarted == sorted(restarted)  # restarted in start order
    assert_one_terminal_per_run(tmp_path)


async def _ref(rt: mw.Runtime, child_id: str) -> mw.ActorRef[Any]:
    return await rt.root.child(child_id)


async def test_simple_one_for_one_dynamic_children(tmp_path: Path) -> None:
    probe = Probe()
    spec = mw.SupervisorSpec(
        strategy="simple_one_for_one",
        intensity=10,
        children=[
            mw.ChildSpec(id="job", start=lambda tag: _Tagged(probe, tag), restart="transient")
        ],
    )
    async with mw.open_runtime(journal=tmp_path) as rt:
        await rt.spawn(mw.supervisor("pool", spec))
        pool = await rt.root.child_supervisor("pool")
        refs = [await pool.start_child(None, f"t{i}") for i in range(3)]
        assert [await r.ask("who") for r in refs] == ["t0", "t1", "t2"]
        await refs[1].tell("crash")
        await wait_for(lambda: len(probe.of("init")) == 4)
        assert await refs[1].ask("who") == "t1"  # same args, same mailbox, new run
        await refs[2].tell("normal")  # transient: not restarted, removed
        await wait_for(lambda: not refs[2].alive)
        await settle()
        info = await pool.which_children()
        assert [(c.id, c.runs) for c in info] == [("job.0", 1), ("job.1", 2)]
        with pytest.raises(mw.ConfigError):
            await pool.start_child(worker(probe))
    assert_one_terminal_per_run(tmp_path)


class _Tagged(mw.Actor[Any]):
    def __init__(self, probe: Probe, tag: str) -> None:
        self.probe, self.tag = probe, tag

    async def init(self, ctx: mw.ActorContext) -> object:
        self.probe.log(ctx.name, "init", ctx.attempt)
        return None

    async def handle(self, message: Any) -> object:
        if message == "crash":
            raise RuntimeError("crash")
        if message == "normal":
            raise mw.Exit(mw.ExitNormal())
        return self.tag


# -- escalation and intensity ---------------------------------------------------------------


async def test_escalation_to_parent(tmp_path: Path) -> None:
    probe = Probe()
    inner = mw.SupervisorSpec(intensity=1, period=10, children=[worker(probe, "w")])
    clock = mw.VirtualClock()
    with capture_logs() as logs:
        async with mw.open_runtime(journal=tmp_path, root=BIG, clock=clock) as rt:
            await rt.spawn(mw.supervisor("inner", inner))
            w = await (await rt.root.child_supervisor("inner")).child("w")
            for _ in range(2):
                await w.tell("crash")
                await settle()
            await wait_for(lambda: len(probe.of("init")) == 3)
            info = {c.id: c for c in await rt.root.which_children()}
            assert info["inner"].runs == 2 and info["inner"].alive
    kinds = [type(e.rec).__name__ for e in mw.journal.read_journal(tmp_path)]
    assert kinds.count("SupervisorGiveUp") == 1
    assert kinds.count("SupervisorEscalate") == 1
    assert exits(tmp_path, "root/inner")[0] == (
        "error(RestartIntensityExceeded: more than 1 restarts in 10 s)"
    )
    levels = [
        e["log_level"] for e in logs if e["event"] in ("child_restarting", "supervisor_gave_up")
    ]
    assert levels == ["info", "critical", "info"]  # inner restarts w, gives up; root restarts inner
    assert_one_terminal_per_run(tmp_path)


async def test_root_give_up_fails_the_runtime(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(intensity=0, children=[worker(probe, "w")])
    body_cancelled = False
    with pytest.raises(mw.RestartIntensityExceeded):
        async with mw.open_runtime(journal=tmp_path, root=root) as rt:
            await (await _ref(rt, "w")).tell("crash")
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                body_cancelled = True
                raise
    assert body_cancelled
    assert_one_terminal_per_run(tmp_path)


async def test_restart_window_slides_on_virtual_time(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    root = mw.SupervisorSpec(intensity=3, period=5, children=[worker(probe, "w")])
    async with mw.open_runtime(journal=tmp_path, root=root, clock=clock) as rt:
        w = await _ref(rt, "w")
        for _ in range(10):  # one crash every 2 s: never more than 3 in 5 s
            await w.tell("crash")
            await settle()
            await clock.advance(2)
        assert clock.monotonic() == 20
        await clock.advance(5)  # the last restart (t=18) leaves the window
        for _ in range(3):  # three quick ones still fit...
            await w.tell("crash")
            await settle()
        info = (await rt.root.which_children())[0]
        assert info.runs == 14
    with pytest.raises(mw.RestartIntensityExceeded):
        async with mw.open_runtime(journal=tmp_path / "2", root=root, clock=clock) as rt:
            w = await _ref(rt, "w")
            for _ in range(4):  # ...but four within the window do not
                await w.tell("crash")
                await settle()
            await anyio.sleep_forever()


async def test_backoff_delays_are_exact_on_virtual_time(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    backoff = mw.Backoff(initial=1, factor=2, maximum=8, jitter=0, reset_after=100)
    root = mw.SupervisorSpec(intensity=100, period=1000, backoff=backoff)
    async with mw.open_runtime(journal=tmp_path, root=root, clock=clock) as rt:
        await rt.spawn(
            worker(probe, "w", plan=["ok", "fail", "fail", "fail", "fail", "fail", "ok"])
        )
        await (await _ref(rt, "w")).tell("crash")
        await settle()
        await clock.advance(60)
        assert (await rt.root.which_children())[0].alive
    spawns = [
        e.t - clock.wall() + clock.monotonic()
        for e in mw.journal.read_journal(tmp_path)
        if isinstance(e.rec, mw.journal.ActorSpawn) and e.rec.actor == "root/w"
    ]
    assert spawns == [0, 1, 3, 7, 15, 23, 31]


async def test_retry_later_instead_of_giving_up(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    root = mw.SupervisorSpec(intensity=2, period=10, on_exhausted=mw.RetryLater(delay=60))
    async with mw.open_runtime(journal=tmp_path, root=root, clock=clock) as rt:
        await rt.spawn(worker(probe, "w", plan=["ok", "fail", "fail", "ok"]))
        await (await _ref(rt, "w")).tell("crash")
        await settle()
        assert len(probe.of("init")) == 3  # runs 2 and 3 failed at once; the third restart waits
        await clock.advance(59)
        assert len(probe.of("init")) == 3
        await clock.advance(1)
        assert len(probe.of("init")) == 4
        assert (await rt.root.which_children())[0].alive
    kinds = [type(e.rec).__name__ for e in mw.journal.read_journal(tmp_path)]
    assert "SupervisorRetryLater" in kinds and "SupervisorGiveUp" not in kinds


# -- group restarts, shutdown, cleanup ----------------------------------------------------------


async def test_second_child_fails_during_group_restart(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(
        strategy="one_for_all",
        intensity=5,
        children=[worker(probe, "a"), worker(probe, "b", plan=["ok", "fail", "ok"])],
    )
    async with mw.open_runtime(journal=tmp_path, root=root) as rt:
        await (await _ref(rt, "a")).tell("crash")
        await wait_for(lambda: len(probe.of("init")) == 6)
        await settle()
        info = {c.id: (c.alive, c.runs) for c in await rt.root.which_children()}
        assert info == {"a": (True, 3), "b": (True, 3)}
    restarts = [
        e.rec
        for e in mw.journal.read_journal(tmp_path)
        if isinstance(e.rec, mw.journal.SupervisorRestart)
    ]
    assert [(r.trigger, r.children) for r in restarts] == [
        ("root/a", ["a", "b"]),
        ("root/b", ["a", "b"]),
    ]
    assert_one_terminal_per_run(tmp_path)


async def test_child_crashing_while_group_stops_it_is_not_restarted_twice(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(
        strategy="one_for_all",
        intensity=5,
        children=[worker(probe, "a"), worker(probe, "b", crash_terminate=True)],
    )
    async with mw.open_runtime(journal=tmp_path, root=root) as rt:
        await (await _ref(rt, "a")).tell("crash")
        await wait_for(lambda: len(probe.of("init")) == 4)
        await settle()
        info = {c.id: c.runs for c in await rt.root.which_children()}
        assert info == {"a": 2, "b": 2}
    assert exits(tmp_path, "root/b")[0].startswith("error(RuntimeError: cleanup fails")
    assert_one_terminal_per_run(tmp_path)


async def test_shutdown_while_stuck_in_a_failing_restart_loop(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    root = mw.SupervisorSpec(
        intensity=1,
        period=1,
        on_exhausted=mw.RetryLater(delay=3600),
        backoff=mw.Backoff(initial=5, jitter=0),
    )
    async with mw.open_runtime(journal=tmp_path, root=root, clock=clock) as rt:
        await rt.spawn(worker(probe, "w", plan=["ok", "fail"]))
        await (await _ref(rt, "w")).tell("crash")
        for _ in range(5):
            await clock.advance(10)
        assert len(probe.of("init")) >= 3
    # Closing did not wait for the pending restart timer: time stood still.
    assert clock.monotonic() == 50
    state = assert_one_terminal_per_run(tmp_path)
    assert state["root"].last_exit == "shutdown"


async def test_hung_cleanup_is_killed_after_shutdown_timeout(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    root = mw.SupervisorSpec(
        children=[
            worker(probe, "quick", shutdown=1),
            worker(probe, "stuck", hang_terminate=True, shutdown=7),
            worker(probe, "brutal", shutdown=mw.BRUTAL_KILL),
        ]
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.autojump)
        async with mw.open_runtime(journal=tmp_path, root=root, clock=clock):
            pass
        tg.cancel_scope.cancel()
    assert clock.monotonic() == 7
    assert exits(tmp_path, "root/stuck") == ["killed"]
    assert exits(tmp_path, "root/quick") == ["shutdown"]
    assert exits(tmp_path, "root/brutal") == ["killed"]
    # reverse start order: brutal first, stuck, then quick
    order = [
        r.actor for r in mw.journal.replay(mw.journal.read_journal(tmp_path), mw.journal.ActorExit)
    ]
    assert order == ["root/brutal", "root/stuck", "root/quick", "root"]
    assert ("root/brutal", "terminate:killed", 1) not in probe.events


# -- significant children ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["any_significant", "all_significant"])
async def test_significant_children(tmp_path: Path, mode: str) -> None:
    probe = Probe()
    inner = mw.SupervisorSpec(
        auto_shutdown=mode,
        children=[
            worker(probe, "s1", restart="transient", significant=True),
            worker(probe, "s2", restart="temporary", significant=True),
            worker(probe, "p"),
        ],
    )
    root = mw.SupervisorSpec(children=[mw.supervisor("inner", inner, restart="transient")])
    async with mw.open_runtime(journal=tmp_path, root=root) as rt:
        inner_actor = await _ref(rt, "inner")
        inner_ref = mw.SupervisorRef(inner_actor)
        s1 = await inner_ref.child("s1")
        if mode == "any_significant":
            await inner_ref.terminate_child("s2")  # ordered by the supervisor: does not count
            await settle()
            assert inner_actor.alive
        await s1.tell("normal")
        await wait_for(lambda: mode == "all_significant" or not inner_actor.alive)
        await settle()
        assert inner_actor.alive is (mode == "all_significant")
    if mode == "any_significant":
        assert exits(tmp_path, "root/inner")[0] == "shutdown"
        assert exits(tmp_path, "root/inner/p") == ["shutdown"]
    assert_one_terminal_per_run(tmp_path)


async def test_all_significant_shuts_down_when_the_last_one_exits(tmp_path: Path) -> None:
    probe = Probe()
    inner = mw.SupervisorSpec(
        auto_shutdown="all_significant",
        children=[
            worker(probe, "s1", restart="transient", significant=True),
            worker(probe, "s2", restart="transient", significant=True),
        ],
    )
    root = mw.SupervisorSpec(children=[mw.supervisor("inner", inner, restart="transient")])
    async with mw.open_runtime(journal=tmp_path, root=root) as rt:
        inner = await rt.root.child_supervisor("inner")
        s1, s2 = await inner.child("s1"), await inner.child("s2")
        await s1.tell("normal")
        await settle()
        assert inner.ref.alive
        await s2.tell("normal")
        await wait_for(lambda: not inner.ref.alive)
    assert exits(tmp_path, "root/inner") == ["shutdown"]


# -- readiness ---------------------------------------------------------------------------------


async def test_ignore_and_start_timeout(tmp_path: Path) -> None:
    probe = Probe()
    clock = mw.VirtualClock()
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.autojump)
        async with mw.open_runtime(journal=tmp_path, clock=clock) as rt:
            ignored = await rt.spawn(worker(probe, "i", plan=["ignore"]))
            assert not ignored.alive
            with pytest.raises(mw.StartFailed, match="not ready within 3"):
                await rt.spawn(worker(probe, "h", plan=["hang"], start_timeout=3))
            assert clock.monotonic() == 3
            with pytest.raises(mw.StartFailed, match="init of attempt 1 fails"):
                await rt.spawn(worker(probe, "f", plan=["fail"]))
            assert [c.id for c in await rt.root.which_children()] == ["i"]
        tg.cancel_scope.cancel()
    assert exits(tmp_path, "root/i") == ["ignored"]
    assert exits(tmp_path, "root/h")[0].startswith("error(StartFailed")
    assert_one_terminal_per_run(tmp_path)


async def test_root_child_failing_at_start_fails_open_runtime(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(children=[worker(probe, "a"), worker(probe, "b", plan=["fail"])])
    with pytest.raises(mw.StartFailed, match="root/b"):
        async with mw.open_runtime(journal=tmp_path, root=root):
            pytest.fail("the body must not run")
    state = assert_one_terminal_per_run(tmp_path)
    assert state["root/a"].last_exit == "shutdown"


async def test_exit_records_are_logged_with_rising_severity(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(intensity=5, children=[worker(probe, "w")])
    with capture_logs() as logs:
        async with mw.open_runtime(root=root) as rt:
            w = await _ref(rt, "w")
            for _ in range(4):
                await w.tell("crash")
                await settle()
    levels = [e["log_level"] for e in logs if e["event"] == "child_restarting"]
    assert levels == ["info", "warning", "error", "error"]


async def test_views_rebuild_the_tree_from_the_journal(tmp_path: Path) -> None:
    probe = Probe()
    root = mw.SupervisorSpec(children=[worker(probe, "w")])
    async with mw.open_runtime(journal=tmp_path, root=root) as rt:
        await (await _ref(rt, "w")).tell("crash")
        await wait_for(lambda: len(probe.of("init")) == 2)
    state = views(tmp_path)
    assert (state["root/w"].runs, state["root/w"].restarts) == (2, 1)
    assert state["root/w"].last_exit == "shutdown"
