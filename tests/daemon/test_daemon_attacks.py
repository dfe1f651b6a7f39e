"""The daemon against a hostile control socket: no frame ends it, no tag escapes its runs.

Tables in ``tests/scenarios/daemon_frames.py``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mw_actors.daemon import Daemon, DaemonOptions, DaemonPaths, ListCampaigns, Status, Submit
from mw_actors.daemon import connect as connect_daemon
from mw_actors.editing import CampaignOptions
from tests.processes import mw, runnable_by_others

from ..scenarios.daemon_frames import BAD_TAGS, KILLERS, frame, fuzz_frames

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def runs() -> Iterator[Path]:
    # Unix socket paths are short (108 bytes): keep the runs directory near /.
    base = Path(tempfile.mkdtemp(prefix="mwa-"))
    yield base / "runs"
    shutil.rmtree(base, ignore_errors=True)


async def exchange(runs: Path, frames: list[bytes], *, hello: bool = True) -> list[dict[str, Any]]:
    """Send ``frames`` (after the handshake) on one raw connection; the replies, as JSON."""
    replies: list[dict[str, Any]] = []
    async with await anyio.connect_unix(str(DaemonPaths(runs).socket)) as stream:
        buffer = b""

        async def reply() -> dict[str, Any] | None:
            nonlocal buffer
            while True:
                if len(buffer) >= 4:
                    size = int.from_bytes(buffer[:4], "big")
                    if len(buffer) >= 4 + size:
                        body, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                        answer: dict[str, Any] = json.loads(body)
                        return answer
                try:
                    buffer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return None

        with anyio.fail_after(20):
            if hello:
                await stream.send(frame(b'{"type": "Hello", "version": 1, "role": "control"}'))
                assert (await reply() or {}).get("type") == "Welcome"
            for data in frames:
                try:
                    await stream.send(data)
                except (anyio.BrokenResourceError, OSError):
                    break
                answer = await reply()
                if answer is None:
                    break
                replies.append(answer)
    return replies


@pytest.mark.anyio
async def test_no_request_ends_the_daemon_and_no_tag_escapes(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions(kinds={"editing": CampaignOptions()}))
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        for why, message, named in KILLERS:
            (reply,) = await exchange(runs, [frame(json.dumps(message).encode())])
            assert reply["type"] == "Failed", why
            assert named in reply["message"] or named in reply.get("hint", ""), (why, reply)
            assert "\n" not in reply["message"], why
        async with connect_daemon(runs) as control:
            assert await control.request(ListCampaigns()) == []  # alive, nothing registered
        daemon.stop()
    outside = sorted(p.name for p in runs.parent.iterdir())
    assert outside == ["runs"], outside  # ../escaped and /absolute made nothing
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(("mw-", "."))) == []


@pytest.mark.anyio
@pytest.mark.parametrize("role", ["control", "hello"])
async def test_a_frame_begun_and_never_finished_is_hung_up_on(runs: Path, role: str) -> None:
    """Half of an 8 MB frame, then nothing: 60 such connections held 500 MB, forever."""
    daemon = Daemon(runs, DaemonOptions(frame_seconds=0.5))
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with await anyio.connect_unix(str(DaemonPaths(runs).socket)) as stream:
            if role == "control":
                await stream.send(frame(b'{"type": "Hello", "version": 1, "role": "control"}'))
                await stream.receive()  # Welcome
            await stream.send((8 << 20).to_bytes(4, "big") + b"x" * (1 << 20))
            with anyio.fail_after(10):  # hung up on: the daemon holds nothing of it
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    while True:
                        await stream.receive()
        async with connect_daemon(runs) as control:
            assert await control.request(ListCampaigns()) == []  # and it serves the others
        daemon.stop()


def test_status_under_a_daemon_that_does_not_answer_reads_the_journal(runs: Path) -> None:
    """A daemon too busy to answer gave a raw TimeoutError traceback after 10 s."""
    import socket
    import time

    from tests.processes import synthetic_campaign

    assert synthetic_campaign("run", runs, "quiet", 12).returncode == 0
    paths = DaemonPaths(runs)
    paths.home.mkdir(exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        stuck.bind(str(paths.socket))
        stuck.listen(8)  # accepts connections, and never answers one
        started = time.monotonic()
        done = mw("status", "quiet", "--runs", str(runs), "--json")
        waited = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "completed"
    assert "Traceback" not in done.stderr
    print(f"answered from the journal after {waited:.1f} s")


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_fuzzed_control_socket_leaves_a_running_campaign_to_complete(
    runs: Path, seed: int
) -> None:
    """1,200 connections of random and structured frames while a campaign runs."""
    rng = random.Random(seed)
    daemon = Daemon(runs, DaemonOptions(kinds={"editing": CampaignOptions()}))
    failed = answered = hung_up = 0
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with connect_daemon(runs) as control:
            spec = {"scenario": "synthetic_l1", "train_split": 24}
            await control.request(Submit(kind="serve-learn", tag="live", spec=spec))
            for i in range(1200):
                frames = fuzz_frames(rng, "live")
                if i % 10 == 0:  # the handshake itself, fuzzed
                    replies = await exchange(runs, frames[:1], hello=False)
                else:
                    replies = await exchange(runs, frames)
                answered += len(replies)
                failed += sum(r["type"] in ("Failed", "Refused") for r in replies)
                hung_up += len(replies) < len(frames)
            assert await control.request(ListCampaigns())  # the daemon still answers
            with anyio.fail_after(240):
                while (await control.request(Status(tag="live")))["state"] == "running":
                    await anyio.sleep(0.2)
            final = await control.request(Status(tag="live"))
        daemon.stop()
    print(f"fuzz: {answered} replies, {failed} refusals, {hung_up} connections hung up")
    assert final["state"] == "completed", final
    assert final["progress"]["blocks_learned"] == 2
    # Nothing hostile succeeded: no campaign but the live one, registered or on disk.
    assert [p.name for p in DaemonPaths(runs).registry.iterdir()] == ["live.json"]
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith((".", "mw-"))) == ["live"]


@pytest.mark.parametrize("tag", BAD_TAGS[:5])
def test_a_bad_tag_is_one_line_at_every_entry_point(tmp_path: Path, tag: str) -> None:
    runs = tmp_path / "runs"
    for argv in (
        ["serve-learn", "run", "synthetic_l1", "--runs", str(runs), "--tag", tag],
        ["serve-learn", "test", "synthetic_l1", "--runs", str(runs), "--tag", tag],
        ["status", tag, "--runs", str(runs)],
        ["attach", tag, "--runs", str(runs), "--once"],
    ):
        if "\0" in tag:
            continue  # no process can be given a NUL in an argument; the daemon test has it
        done = mw(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.count("\n") == 1 and "is not a run name" in done.stderr, done.stderr
    assert not runs.exists() or list(runs.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["runs"])


def test_a_user_the_runs_refuse_gets_one_line(tmp_path: Path) -> None:
    """Another user's runs directory: ``mw status`` says so, without a traceback."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as another user")
    runs = tmp_path / "runs"
    (runs / "c" / "journal").mkdir(parents=True)
    runs.chmod(0o700)
    tmp_path.chmod(0o755)
    for argv in (["status", "--runs", str(runs)], ["status", "c", "--runs", str(runs)]):
        with runnable_by_others():
            done = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 sys.executable, "-m", "bin.mw", *argv],
                cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("mw: error[permission_denied]: ") and "hint:" in line, line


def test_a_closed_pipe_is_not_a_traceback() -> None:
    done = subprocess.run(
        f"{sys.executable} -m bin.mw serve-learn plan synthetic_l1 | head -c 1",
        shell=True, cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.anyio
async def test_a_registry_entry_that_cannot_be_read_is_listed_failed_of_no_kind(
    runs: Path,
) -> None:
    """Its kind is unknown: it was listed as a serve-and-learn campaign, with that kind's spend."""
    paths = DaemonPaths(runs)
    paths.registry.mkdir(parents=True)
    (paths.registry / "torn.json").write_text('{"kind": "nap", "ta')  # a torn write
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with connect_daemon(runs) as control:
            (listed,) = await control.request(ListCampaigns())
        daemon.stop()
    assert (listed["tag"], listed["kind"], listed["state"]) == ("torn", "unknown", "failed")
    assert listed["spend_usd"] == {} and listed["progress"] == {}
