"""The daemon as a process: start it detached, stop it, ask it, read status without it.

``bin/`` says how the daemon is run (the command, its environment); this
module spawns it, waits until it answers on the socket the clients use, and
stops it. Every function returns what happened and prints nothing, so a
caller on any thread (the demo's, a test's) gets its own answer.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from mw_errors import ConfigError, DaemonError, MwError

from ..kinds import KINDS
from ._client import DaemonPaths, connect, daemon_running
from ._daemon import Daemon
from ._protocol import Shutdown, Status
from ._status import campaign_status

__all__ = [
    "Detached",
    "ask",
    "campaign_tags",
    "daemon_pid",
    "serve_in_foreground",
    "start_detached",
    "status_line",
    "statuses",
    "stop_detached",
]

_STOP_SECONDS = 90  # a Shutdown cancels every campaign, which writes its terminal records


@dataclass(frozen=True)
class Detached:
    """A daemon that was started: its pid and where it listens and logs."""

    pid: int
    socket: Path
    log: Path

    def describe(self) -> str:
        return f"mw daemon: pid {self.pid}, socket {self.socket}, log {self.log}"


def daemon_pid(runs: Path) -> str:
    """The pid the running daemon of ``runs`` wrote down ("?" if none is written)."""
    path = DaemonPaths(runs).pid
    return path.read_text().strip() if path.exists() else "?"


def start_detached(
    runs: Path, command: Sequence[str], env: Mapping[str, str], timeout: float = 60
) -> Detached:
    """Run ``command`` (the daemon, in the foreground) detached, until it answers.

    It runs in a new session with ``runs`` as its working directory, its output
    appended to the daemon's log. A daemon that exits, or does not listen within
    ``timeout`` seconds, is stopped before the error is raised: never one left
    running after a reported failure.

    Raises:
        ConfigError: a daemon already runs for ``runs``, or this one did not start.
    """
    paths = DaemonPaths(runs)
    if daemon_running(runs):
        raise ConfigError(
            f"a daemon already runs for {runs} (pid {daemon_pid(runs)})",
            hint=f"use it, or stop it with `mw daemon stop --runs {runs}`",
        )
    paths.home.mkdir(parents=True, mode=0o700, exist_ok=True)
    with open(paths.log, "ab") as log:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=runs,
            env=dict(env),
        )
    deadline = time.monotonic() + timeout
    while not daemon_running(runs):
        failed = None
        if process.poll() is not None:
            said = last_error(paths.log.read_text(errors="replace"))
            failed = f"the daemon did not start: {said}"
        elif time.monotonic() > deadline:
            failed = f"the daemon did not listen on {paths.socket} within {timeout:g} s"
        if failed is not None:
            _end(process)
            raise ConfigError(failed, hint=f"see {paths.log}")
        time.sleep(0.05)
    return Detached(process.pid, paths.socket, paths.log)


_RAISED = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b.*")


def last_error(log: str) -> str:
    """What a process that failed says last of why: the last exception its log shows.

    An exception group's traceback ends in a line of its frame (``+-----``), not in
    what was raised: the last line that names an exception (``OSError: ...``) is
    taken, else the last line that says anything.
    """
    lines = [line.strip(" |+-") for line in log.strip().splitlines()]
    said = [line for line in lines if line]
    raised = [line for line in said if _RAISED.match(line)]
    return (raised or said or ["?"])[-1]


def _end(process: subprocess.Popen[bytes]) -> None:
    """Stop a daemon process that failed to start: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop_detached(runs: Path) -> str | None:
    """Stop the daemon of ``runs`` and wait until its process is gone; its pid, or None.

    Raises:
        ConfigError: it did not stop within 90 s.
    """
    if not daemon_running(runs):
        return None
    pid = daemon_pid(runs)
    ask(runs, [Shutdown()])
    deadline = time.monotonic() + _STOP_SECONDS
    while daemon_running(runs) or _alive(pid):
        if time.monotonic() > deadline:
            raise ConfigError(f"the daemon (pid {pid}) did not stop within {_STOP_SECONDS} s")
        time.sleep(0.05)
    return pid


def _alive(pid: str) -> bool:
    """Whether ``pid`` runs (a zombie, whose parent is gone, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


STATUS_SECONDS = 3.0  # how long `mw status` waits for the daemon before reading journals


def ask(runs: Path, requests: Sequence[Any], *, timeout: float = 300.0) -> list[Any]:
    """The daemon's answers to ``requests``, asked in turn on one connection (blocking).

    Raises:
        MwError: the daemon refused one, is not there, or did not answer in ``timeout``
            seconds (a DaemonError).
    """

    async def asking() -> list[Any]:
        try:
            with anyio.fail_after(timeout):
                async with connect(runs, timeout=timeout) as connection:
                    return [await connection.request(request) for request in requests]
        except TimeoutError:
            raise DaemonError(
                f"the daemon for {runs} did not answer within {timeout:g} s",
                hint="it may be busy; its campaigns go on",
            ) from None

    return anyio.run(asking)


def statuses(runs: Path, tags: Sequence[str]) -> list[dict[str, Any]]:
    """Each campaign's status: from the daemon when one runs, else from the journals.

    The daemon adds what only it knows: live mailbox depths, cancellations. If it
    goes away, or does not know a campaign, the journals answer.

    Raises:
        ConfigError: a run directory holds no campaign.
    """
    if tags and daemon_running(runs):
        requests = [Status(tag=tag) for tag in tags]
        # A busy daemon answers late: where every journal exists, the journals answer
        # at once (without the daemon's extras); a campaign the daemon is still
        # starting has none yet, and only the daemon can say so.
        journaled = all((runs / tag / "journal").is_dir() for tag in tags)
        try:
            asked = ask(runs, requests, timeout=STATUS_SECONDS if journaled else 60.0)
            return [dict(a) for a in asked]
        except MwError:
            pass
    return [msgspec.to_builtins(campaign_status(runs / tag)) for tag in tags]


def status_line(status: Mapping[str, Any]) -> str:
    """A campaign's status (as :func:`statuses` gives it), as ``mw status`` prints it."""
    p = status.get("progress") or {}  # a campaign the daemon is just starting has none yet
    kind = KINDS.get(status["kind"])
    done = kind.progress_line(p) if kind is not None else "progress unknown"
    spend = ", ".join(f"{meter} ${usd}" for meter, usd in status.get("spend_usd", {}).items())
    return (
        f"{status['tag']}: {status['kind']}, {status['state']}; {done}; "
        f"spend {spend or '-'} of ${status.get('allocation_usd', '?')}"
    )


def campaign_tags(runs: Path) -> list[str]:
    """The campaigns under ``runs`` (directories with a journal), oldest change first."""
    if not runs.is_dir():
        return []
    found = [p for p in runs.iterdir() if (p / "journal").is_dir()]
    return [p.name for p in sorted(found, key=lambda p: (p.stat().st_mtime, p.name))]


def serve_in_foreground(daemon: Daemon) -> None:
    """The daemon's process: serve until a ``Shutdown``, SIGTERM or SIGINT.

    SIGUSR1 logs every task and where it waits (asyncio), for a daemon that seems stuck.
    """

    async def signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as sigs:
            async for signum in sigs:
                if signum == signal.SIGUSR1:
                    _log_tasks()
                else:
                    daemon.stop()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(signals)
            await daemon.serve()  # returns once stopped: by Shutdown or a signal
            tg.cancel_scope.cancel()

    anyio.run(main)


def _log_tasks() -> None:
    import asyncio

    import structlog

    tasks = []
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=1)
        where = f"{frames[0].f_code.co_filename}:{frames[0].f_lineno}" if frames else "?"
        tasks.append(f"{task.get_name()} at {where}")
    structlog.get_logger("mw.daemon").warning("task_tree", tasks=sorted(tasks))
