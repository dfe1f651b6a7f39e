"""Subprocess children: exit codes, SIGTERM then SIGKILL of the whole group, no zombies."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import mw_actors as mw

from .helpers import exits, wait_for

pytestmark = pytest.mark.anyio

# A leader that ignores SIGTERM and a grandchild that ignores it too; both write their pids.
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # still in the process table: a zombie counts as not gone
    return False


def _proc(argv: list[str], **kwargs: Any) -> mw.ChildSpec:
    spec_keys = {"restart", "shutdown"}
    spec = {k: kwargs.pop(k) for k in list(kwargs) if k in spec_keys}
    return mw.ChildSpec(id="p", start=lambda: mw.ProcessActor(argv, **kwargs), **spec)


async def test_stop_escalates_to_sigkill_of_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    async with mw.open_runtime(journal=tmp_path / "j") as rt:
        await rt.spawn(_proc([sys.executable, "-c", STUBBORN, str(pids)], grace=0.3, shutdown=5))
        await wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, limit=10000)
        leader, grandchild = map(int, pids.read_text().split())
    assert _gone(leader), "the leader was not reaped"
    await wait_for(lambda: _gone(grandchild))  # init reaps the SIGKILLed orphan
    assert exits(tmp_path / "j", "root/p") == ["shutdown"]


async def test_exit_codes_become_exit_reasons(tmp_path: Path) -> None:
    async with mw.open_runtime(journal=tmp_path) as rt:
        ok = await rt.spawn(
            mw.ChildSpec(id="ok", start=lambda: mw.ProcessActor(["true"]), restart="transient")
        )
        bad = await rt.spawn(
            mw.ChildSpec(id="bad", start=lambda: mw.ProcessActor(["false"]), restart="temporary")
        )
        await wait_for(lambda: not ok.alive and not bad.alive)
    assert exits(tmp_path, "root/ok") == ["normal"]
    assert exits(tmp_path, "root/bad") == ["error(ProcessExit: false: exit status 1)"]


async def test_brutal_kill_sigkills_at_once(tmp_path: Path) -> None:
    clock = mw.VirtualClock()  # no time passes: the kill does not wait for a grace period
    pids = tmp_path / "pids"
    async with mw.open_runtime(journal=tmp_path / "j", clock=clock) as rt:
        await rt.spawn(
            _proc([sys.executable, "-c", STUBBORN, str(pids)], grace=60, shutdown=mw.BRUTAL_KILL)
        )
        await wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, limit=10000)
        leader, grandchild = map(int, pids.read_text().split())
    assert clock.monotonic() == 0
    assert _gone(leader)
    await wait_for(lambda: _gone(grandchild))
    assert exits(tmp_path / "j", "root/p") == ["killed"]


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ENOMEM])
async def test_spawn_failure_is_a_start_failure(tmp_path: Path, code: int) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code))

    async with mw.open_runtime(journal=tmp_path) as rt:
        with pytest.raises(mw.StartFailed, match=os.strerror(code)):
            await rt.spawn(
                mw.ChildSpec(id="p", start=lambda: mw.ProcessActor(["true"], spawn=refuse))
            )
    assert f"[Errno {code}]" in exits(tmp_path, "root/p")[0]


async def test_killed_by_signal_is_reported(tmp_path: Path) -> None:
    async with mw.open_runtime(journal=tmp_path) as rt:
        ref = await rt.spawn(
            mw.ChildSpec(
                id="p",
                start=lambda: mw.ProcessActor(["sh", "-c", "kill -KILL $$"]),
                restart="temporary",
            )
        )
        await wait_for(lambda: not ref.alive)
    assert exits(tmp_path, "root/p") == ["error(ProcessExit: sh: killed by SIGKILL)"]
