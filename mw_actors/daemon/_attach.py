"""``mw attach``: a live terminal view of one campaign, built with rich.

It shows the campaign's progress bars (per window and per block, or per
trial), the actor tree with restarts, spend by meter against the allocation,
and recent events. It reads the campaign's journal (and the daemon's events
when one runs); it holds no lock and sends nothing, so detaching (Ctrl-C) or
vanishing never disturbs the campaign.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from mw_errors import CampaignStarting, MwError

from .._core import read_journal
from ..editing.records import EditingStarted
from ..grid import GridPlace, attach_grid
from ..serve_learn import window_scores
from ..serve_learn.records import (
    BlockLearned,
    EpisodeEnded,
    ServeLearnEnded,
    ServeLearnStarted,
    WindowTested,
)
from ._client import connect, daemon_running, subscribe
from ._protocol import Status
from ._status import CAMPAIGN_RECORDS, campaign_status

__all__ = ["attach", "attach_campaign", "render"]


def _bar(done: int, total: int) -> Table:
    row = Table.grid(padding=(0, 1))
    row.add_row(ProgressBar(total=max(total, 1), completed=done, width=30), f"{done}/{total}")
    return row


def render(
    run_dir: Path, events: deque[str], depths: dict[str, int] | None = None
) -> tuple[Group, str]:
    """One frame of the view, and the campaign's state; the journal is read once.

    A campaign that runs but has not journaled its start yet (its checks and
    services take a moment) is shown as starting.
    """
    entries = read_journal(run_dir / "journal", CAMPAIGN_RECORDS)
    try:
        status = campaign_status(run_dir, entries)
    except CampaignStarting:
        return Group(Text(f"{run_dir.name}  (starting)", style="bold")), "running"
    records = [e.rec for e in entries]
    title = Text(f"{status.tag}  ({status.kind}, {status.state})", style="bold")
    progress = Table(title="progress", show_header=False, box=None)
    serve = next((r for r in records if isinstance(r, ServeLearnStarted)), None)
    edit = next((r for r in records if isinstance(r, EditingStarted)), None)
    if serve is not None:
        served: dict[int, int] = {}
        for r in records:
            if isinstance(r, EpisodeEnded) and r.phase == "serving":
                served[r.window] = served.get(r.window, 0) + 1
        tested = status.progress["windows_tested"]
        for window, size in sorted(serve.window_sizes.items(), key=lambda kv: int(kv[0])):
            mark = "tested" if int(window) < tested else ""
            progress.add_row(f"window {window}", _bar(served.get(int(window), 0), size), mark)
        progress.add_row(
            "blocks learned", _bar(status.progress["blocks_learned"], serve.blocks), ""
        )
        progress.add_row("time left", Text(_time_left(entries, serve)), "")
    elif edit is not None:
        progress.add_row("trials", _bar(status.progress["trials_done"], len(edit.trials)), "")
    tree = Table(title="actors", show_header=True, box=None)
    tree.add_column("actor")
    tree.add_column("runs", justify="right")
    tree.add_column("restarts", justify="right")
    tree.add_column("last exit")
    tree.add_column("mailbox", justify="right")
    for name, actor in status.actors.items():
        depth = (depths or {}).get(name)
        tree.add_row(
            name,
            str(actor.runs),
            str(actor.restarts),
            actor.last_exit or "running",
            "-" if depth is None else str(depth),
        )
    spend = Table(title="spend", show_header=True, box=None)
    spend.add_column("meter")
    spend.add_column("USD", justify="right")
    spend.add_column("of allocation", justify="right")
    allocation = Decimal(status.allocation_usd or "0")
    for meter, usd in status.spend_usd.items():
        share = f"{100 * Decimal(usd) / allocation:.1f}%" if allocation else "-"
        spend.add_row(meter, usd, share)
    # Without a daemon's events (a campaign run by hand, or one that ended), the
    # journal's own milestones are the recent events.
    recent = Text("\n".join(events or _milestones(entries)) or "(no events yet)")
    parts: list[Any] = [title, progress]
    if serve is not None:
        parts += _scores(records)
    parts += [
        tree,
        spend,
        Panel(recent, title=f"recent events (allocation ${status.allocation_usd})"),
    ]
    return Group(*parts), status.state


def _mean(rewards: list[float]) -> str:
    return f"{100 * sum(rewards) / len(rewards):.1f}" if rewards else "-"


def _scores(records: list[Any]) -> list[Any]:
    """Each window's test scores as its episodes land, and the scores so far."""
    windows = window_scores(records)
    if not windows:
        return [Text("tests: none ended yet")]
    table = Table(title="tests", show_header=True, box=None)
    for column in ("window", "version", "tests", "hidden", "full", ""):
        table.add_column(column, justify="left" if column in ("window", "") else "right")
    for w in windows:
        table.add_row(
            f"window {w.window}",
            "-" if w.version is None else f"v{w.version}",
            str(w.tests),
            "-" if w.hidden is None else f"{w.hidden:.1f}",
            "-" if w.fully_specified is None else f"{w.fully_specified:.1f}",
            "tested" if w.version is not None else "testing",
        )
    tests = [r for r in records if isinstance(r, EpisodeEnded) and r.phase == "test"]
    hidden = [r.reward for r in tests if r.category == "hidden"]
    full = [r.reward for r in tests if r.category == "fully_specified"]
    so_far = f"so far: hidden {_mean(hidden)}, fully specified {_mean(full)} ({len(tests)} tests)"
    return [table, Text(so_far)]


def _time_left(entries: list[Any], serve: ServeLearnStarted) -> str:
    """An estimate of the serving time left, from the blocks served so far."""
    start = next(e.t for e in entries if isinstance(e.rec, ServeLearnStarted))
    ends = [e.t for e in entries if isinstance(e.rec, EpisodeEnded) and e.rec.phase == "serving"]
    if any(isinstance(e.rec, ServeLearnEnded) for e in entries):
        return "ended"
    if len(ends) >= serve.serving_total:
        return "serving done; the last tests run"
    blocks = len(ends) // 12
    if blocks == 0:
        return "- (after the first block)"
    per_block = (ends[blocks * 12 - 1] - start) / blocks
    left = per_block * (serve.serving_total - len(ends)) / 12
    minutes, seconds = divmod(int(left), 60)
    finished = f"{blocks} finished block" + ("s" if blocks > 1 else "")
    return f"about {minutes}m {seconds:02d}s of serving (from {finished})"


def _milestones(entries: list[Any], n: int = 8) -> list[str]:
    """The journal's last milestones, as event lines: learns, tests, odd ends, the end."""
    lines = []
    for e in entries:
        r, at = e.rec, time.strftime("%H:%M:%S", time.localtime(e.t))
        if isinstance(r, BlockLearned):
            lines.append(f"{at} block {r.block} learned: v{r.version} ({r.cases} cases)")
        elif isinstance(r, WindowTested):
            lines.append(f"{at} window {r.window} tested on v{r.version} ({r.episodes} tests)")
        elif isinstance(r, EpisodeEnded) and r.status in ("unknown", "budget_blocked"):
            lines.append(f"{at} {r.phase} episode {r.task_id} ended {r.status}")
        elif isinstance(r, ServeLearnEnded):
            lines.append(f"{at} campaign ended: {r.state}")
    return lines[-n:]


async def attach(
    run_dir: Path,
    *,
    console: Console | None = None,
    events: Any = None,
    once: bool = False,
    until_done: bool = False,
    refresh: float = 0.5,
    depths: Callable[[], Awaitable[dict[str, int]]] | None = None,
) -> str:
    """Show the view until detached (or once, or until the campaign ends); return its state.

    ``depths`` asks the daemon for the actors' live mailbox depths, once per frame.
    """
    console = console or Console()
    recent: deque[str] = deque(maxlen=8)
    if once:
        frame, state = render(run_dir, recent)
        console.print(frame)
        return state
    async with anyio.create_task_group() as tg:
        if events is not None:

            async def follow() -> None:
                async for event in events:
                    lag = f" (missed {event.lagged})" if event.lagged else ""
                    recent.append(f"{event.tag}: {event.what} {event.detail}{lag}")

            tg.start_soon(follow)
        frame, state = render(run_dir, recent, depths and await depths())
        with Live(frame, console=console, refresh_per_second=4) as live:
            while not (until_done and state != "running"):
                await anyio.sleep(refresh)
                frame, state = render(run_dir, recent, depths and await depths())
                live.update(frame)
        tg.cancel_scope.cancel()
    return state


async def attach_campaign(
    runs: Path, tag: str, *, once: bool = False, until_done: bool = False
) -> str:
    """:func:`attach` to campaign ``tag``, with the daemon's events and depths when one runs.

    Without a daemon (or with ``once``) the view is the journal's alone. A grid's tag
    shows the grid: its cells as a table, and its spend against its allocation.
    """
    run_dir = runs / tag
    if GridPlace(runs, tag).spec.is_file():
        return await attach_grid(runs, tag, once=once, until_done=until_done)
    if once or not daemon_running(runs):
        return await attach(run_dir, once=once, until_done=until_done)
    async with subscribe(runs) as events, connect(runs) as control:

        async def depths() -> dict[str, int]:
            """Live mailbox depths, from the daemon running the campaign."""
            try:
                status = await control.request(Status(tag=tag))
            except MwError:
                return {}
            actors = status.get("actors") or {}
            return {
                name: actor["mailbox_depth"]
                for name, actor in actors.items()
                if actor.get("mailbox_depth") is not None
            }

        return await attach(run_dir, events=events, until_done=until_done, depths=depths)
