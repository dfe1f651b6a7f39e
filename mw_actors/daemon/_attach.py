"""``mw attach``: a live terminal view of one campaign, built with rich.

It shows the campaign's progress bars (per window and per block, or per
trial), the actor tree with restarts, spend by meter against the allocation,
and recent events. It reads the campaign's journal (and the daemon's events
when one runs); it holds no lock and sends nothing, so detaching (Ctrl-C) or
vanishing never disturbs the campaign.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mw_errors import CampaignStarting, MwError

from .._core import read_journal
from .._sections import progress_bar, section_table
from ..grid import GridPlace, attach_grid
from ..kinds import KINDS, View, campaign_records
from ._client import connect, daemon_running, subscribe
from ._protocol import Status
from ._status import campaign_status

__all__ = ["attach", "attach_campaign", "render"]


def render(
    run_dir: Path, events: deque[str], depths: dict[str, int] | None = None
) -> tuple[Group, str]:
    """One frame of the view, and the campaign's state; the journal is read once.

    A campaign that runs but has not journaled its start yet (its checks and
    services take a moment) is shown as starting.
    """
    entries = read_journal(run_dir / "journal", campaign_records())
    try:
        status = campaign_status(run_dir, entries)
    except CampaignStarting:
        return Group(Text(f"{run_dir.name}  (starting)", style="bold")), "running"
    title = Text(f"{status.tag}  ({status.kind}, {status.state})", style="bold")
    kind = KINDS.get(status.kind)
    view = kind.view(entries, status.progress) if kind is not None else View()
    progress = Table(title="progress", show_header=False, box=None)
    for bar in view.bars:
        progress.add_row(bar.label, progress_bar(bar.done, bar.total), bar.note)
    for label, text in view.lines:
        progress.add_row(label, Text(text), "")
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
    recent = Text("\n".join(events or view.milestones) or "(no events yet)")
    parts: list[Any] = [title, progress, *(section_table(s) for s in view.sections)]
    parts += [
        tree,
        spend,
        Panel(recent, title=f"recent events (allocation ${status.allocation_usd})"),
    ]
    return Group(*parts), status.state


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
