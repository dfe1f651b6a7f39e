"""The daemon: its control socket, its guards, and campaigns that survive it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mw_actors.daemon import (
    Daemon,
    DaemonOptions,
    DaemonPaths,
    ListCampaigns,
    Status,
    connect,
    subscribe,
)
from mw_errors import ConfigError, DaemonError
from tests.processes import mw

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def runs() -> Iterator[Path]:
    # Unix socket paths are short (108 bytes): keep the runs directory near /.
    path = Path(tempfile.mkdtemp(prefix="mwd-"))
    yield path
    subprocess.run(
        [sys.executable, "-m", "bin.mw", "daemon", "stop", "--runs", str(path)],
        cwd=ROOT,
        capture_output=True,
        check=False,
        timeout=120,
    )
    shutil.rmtree(path, ignore_errors=True)


def status(runs: Path, tag: str) -> dict[str, Any]:
    done = mw("status", tag, "--runs", str(runs), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def wait_for(runs: Path, tag: str, states: set[str], limit: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        current = status(runs, tag)
        if current["state"] in states:
            return current
        assert time.monotonic() < deadline, json.dumps(current)
        time.sleep(0.2)


def test_start_submit_status_stop(runs: Path) -> None:
    started = mw("daemon", "start", "--runs", str(runs))
    assert started.returncode == 0, started.stderr
    again = mw("daemon", "start", "--runs", str(runs))
    assert again.returncode == 2 and "a daemon already runs" in again.stderr
    home = DaemonPaths(runs).home
    assert home.stat().st_mode & 0o777 == 0o700
    assert DaemonPaths(runs).socket.stat().st_mode & 0o777 == 0o600
    submitted = mw(
        "serve-learn",
        "submit",
        "synthetic_l1",
        "--runs",
        str(runs),
        "--tag",
        "s",
        "--train-split",
        "24",
    )
    assert submitted.returncode == 0, submitted.stderr
    # While it runs, the daemon reports each actor's mailbox depth, live.
    deadline = time.monotonic() + 60
    while True:
        current = status(runs, "s")
        actors = current.get("actors", {}).values()
        if any(actor.get("mailbox_depth") is not None for actor in actors):
            break
        assert current["state"] == "running" and time.monotonic() < deadline, current
        time.sleep(0.1)
    assert "root/campaign/learner" in current["actors"], current["actors"]
    final = wait_for(runs, "s", {"completed", "failed"})
    assert final["state"] == "completed" and final["progress"]["blocks_learned"] == 2
    assert all(a["mailbox_depth"] is None for a in final["actors"].values())  # from the journal
    listed = mw("daemon", "status", "--runs", str(runs))
    assert "s: serve-learn, completed" in listed.stdout
    stopped = mw("daemon", "stop", "--runs", str(runs))
    assert stopped.returncode == 0, stopped.stderr
    assert not DaemonPaths(runs).socket.exists() and not DaemonPaths(runs).pid.exists()
    assert status(runs, "s")["state"] == "completed"  # without the daemon: from the journal


def test_a_stale_socket_is_cleaned_up(runs: Path) -> None:
    paths = DaemonPaths(runs)
    paths.home.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(paths.socket))
    stale.close()  # the file stays; nobody listens
    started = mw("daemon", "start", "--runs", str(runs))
    assert started.returncode == 0, started.stderr
    assert mw("daemon", "status", "--runs", str(runs)).returncode == 0


def test_another_uid_is_refused(runs: Path) -> None:
    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to connect as another user")
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({str(DaemonPaths(runs).socket)!r})\n"
        "except OSError as e:\n    print('refused', type(e).__name__); sys.exit(0)\n"
        "print('connected')\n"
    )
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.stdout.strip() == "refused PermissionError", done.stderr


@pytest.mark.anyio
async def test_the_peer_uid_is_checked_at_the_socket(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions(allowed_uid=os.getuid() + 4242))
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        with pytest.raises(DaemonError, match=f"uid {os.getuid()} may not use this daemon"):
            async with connect(runs):
                pass
        daemon.stop()


@pytest.mark.anyio
async def test_a_second_daemon_on_the_same_runs_is_refused(runs: Path) -> None:
    first = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(first.serve)
        with pytest.raises(ConfigError, match="a daemon already runs"):
            await Daemon(runs, DaemonOptions()).serve()
        first.stop()


@pytest.mark.anyio
async def test_abrupt_clients_and_slow_readers_never_disturb_the_daemon(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        # A subscriber that never reads: publishing stays instant, old events are dropped.
        async with subscribe(runs) as events:
            await anyio.sleep(0.05)
            started = time.perf_counter()
            for i in range(5000):
                daemon.publish("t", "tick", i=i)
            assert time.perf_counter() - started < 2.0
            lagged = 0
            for _ in range(5000):
                event = await events.__anext__()
                if event.lagged:
                    lagged = event.lagged
                    break
            assert lagged > 0  # the reader is told how much it missed
        # A client that vanishes mid-frame (RST), then one that behaves.
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(str(DaemonPaths(runs).socket))
        raw.send(b'\x00\x00\x10\x00{"type":')
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.close()
        async with connect(runs) as connection:
            assert await connection.request(ListCampaigns()) == []
            with pytest.raises(Exception, match="no campaign 'nope'"):
                await connection.request(Status(tag="nope"))
        daemon.stop()


@pytest.mark.slow
def test_kill_9_of_the_daemon_then_restart_resumes_the_campaign(runs: Path) -> None:
    from collections import Counter

    from mw_actors import BUDGET_RECORDS, read_journal
    from mw_actors.serve_learn import SERVE_LEARN_RECORDS, EpisodeEnded

    kinds = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS]

    for round_number in range(3):
        tag = f"k{round_number}"
        assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
        submitted = mw(
            "serve-learn",
            "submit",
            "synthetic_l1",
            "--runs",
            str(runs),
            "--tag",
            tag,
            "--train-split",
            "36",
        )
        assert submitted.returncode == 0, submitted.stderr
        journal = runs / tag / "journal"
        deadline = time.monotonic() + 60
        ended: list[Any] = []
        while len(ended) < 5 + 6 * round_number:  # mid-campaign, episodes in flight
            assert time.monotonic() < deadline, f"round {round_number}: {len(ended)} ended"
            time.sleep(0.05)
            if journal.is_dir():
                entries = read_journal(journal, kinds)
                ended = [e for e in entries if isinstance(e.rec, EpisodeEnded)]
        pid = int(DaemonPaths(runs).pid.read_text())
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        assert mw("daemon", "start", "--runs", str(runs)).returncode == 0  # recovers
        final = wait_for(runs, tag, {"completed"})
        assert final["progress"]["cases_served"] == 36
        records = read_journal(journal, kinds)
        counts = Counter(e.rec.task_id for e in records if isinstance(e.rec, EpisodeEnded))
        assert max(counts.values()) == 1
        assert mw("daemon", "stop", "--runs", str(runs)).returncode == 0


def test_cancel_then_resume_over_the_control_socket(runs: Path) -> None:
    import anyio

    from mw_actors.daemon import Cancel, Resume

    assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
    submitted = mw(
        "serve-learn",
        "submit",
        "synthetic_l1",
        "--runs",
        str(runs),
        "--tag",
        "c",
        "--train-split",
        "48",
    )
    assert submitted.returncode == 0, submitted.stderr

    async def control() -> tuple[Any, Any]:
        async with connect(runs) as connection:
            while True:
                current = await connection.request(Status(tag="c"))
                if (current.get("progress") or {}).get("cases_served", 0) >= 12:
                    break
                await anyio.sleep(0.05)
            cancelled = await connection.request(Cancel(tag="c"))
            resumed = await connection.request(Resume(tag="c"))
            return cancelled, resumed

    cancelled, resumed = anyio.run(control)
    assert cancelled["state"] == "cancelled"
    assert resumed["state"] == "running"
    final = wait_for(runs, "c", {"completed"})
    assert final["progress"]["cases_served"] == 48
