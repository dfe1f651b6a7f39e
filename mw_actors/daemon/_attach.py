"""``mw attach``: a live terminal view of one campaign, built with rich.

It shows the campaign's progress bars (per window and per block, or per
trial), the actor tree with restarts, spend by meter against the allocation,
and recent events. It reads the campaign's journal (and the daemon's events
when one runs); it holds no lock and sends nothing, so detaching (Ctrl-C) or
vanishing never disturbs the campaign.
"""

from __future__ import annotations

from collections import deque
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

from .._core._journal import read_journal, rebuild
from .._core._views import SupervisionView
from .._reserver import BUDGET_RECORDS
from ..editing._records import EDITING_RECORDS
from ..editing._records import CampaignStarted as EditingStarted
from ..serve_learn._records import SERVE_LEARN_RECORDS, EpisodeEnded
from ..serve_learn._records import CampaignStarted as ServeLearnStarted
from ._status import campaign_status

__all__ = ["attach", "render"]

_RECORDS = [*BUDGET_RECORDS, *SERVE_LEARN_RECORDS, *EDITING_RECORDS]


def _bar(done: int, total: int) -> Table:
    row = Table.grid(padding=(0, 1))
    row.add_row(ProgressBar(total=max(total, 1), completed=done, width=30), f"{done}/{total}")
    return row


def render(run_dir: Path, events: deque[str]) -> Group:
    """One frame of the view."""
    status = campaign_status(run_dir)
    entries = read_journal(run_dir / "journal", _RECORDS)
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
        tested = status.progress.windows_tested
        for window, size in sorted(serve.window_sizes.items(), key=lambda kv: int(kv[0])):
            mark = "tested" if int(window) < tested else ""
            progress.add_row(f"window {window}", _bar(served.get(int(window), 0), size), mark)
        progress.add_row("blocks learned", _bar(status.progress.blocks_learned, serve.blocks), "")
    elif edit is not None:
        progress.add_row("trials", _bar(status.progress.trials_done, len(edit.trials)), "")
    tree = Table(title="actors", show_header=True, box=None)
    tree.add_column("actor")
    tree.add_column("runs", justify="right")
    tree.add_column("restarts", justify="right")
    tree.add_column("last exit")
    for name, view in sorted(rebuild(SupervisionView(), entries).items()):
        tree.add_row(name, str(view.runs), str(view.restarts), str(view.last_exit or "running"))
    spend = Table(title="spend", show_header=True, box=None)
    spend.add_column("meter")
    spend.add_column("USD", justify="right")
    spend.add_column("of allocation", justify="right")
    allocation = Decimal(status.allocation_usd or "0")
    for meter, usd in status.spend_usd.items():
        share = f"{100 * Decimal(usd) / allocation:.1f}%" if allocation else "-"
        spend.add_row(meter, usd, share)
    recent = Text("\n".join(events) or "(no events yet)")
    return Group(
        title,
        progress,
        tree,
        spend,
        Panel(recent, title=f"recent events (allocation ${status.allocation_usd})"),
    )


async def attach(
    run_dir: Path,
    *,
    console: Console | None = None,
    events: Any = None,
    once: bool = False,
    until_done: bool = False,
    refresh: float = 0.5,
) -> str:
    """Show the view until detached (or once, or until the campaign ends); return its state."""
    console = console or Console()
    recent: deque[str] = deque(maxlen=8)
    if once:
        console.print(render(run_dir, recent))
        return campaign_status(run_dir).state
    async with anyio.create_task_group() as tg:
        if events is not None:

            async def follow() -> None:
                async for event in events:
                    lag = f" (missed {event.lagged})" if event.lagged else ""
                    recent.append(f"{event.tag}: {event.what} {event.detail}{lag}")

            tg.start_soon(follow)
        with Live(render(run_dir, recent), console=console, refresh_per_second=4) as live:
            while True:
                await anyio.sleep(refresh)
                live.update(render(run_dir, recent))
                state = campaign_status(run_dir).state
                if until_done and state != "running":
                    break
        tg.cancel_scope.cancel()
    return campaign_status(run_dir).state
