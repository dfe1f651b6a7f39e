"""A grid as ``mw attach GRID_TAG`` shows it: a table of cells, and the grid's spend.

The table is the grid's kind's (``GridKind.section``): a serve-and-learn cell's
state, serving progress, tests, score (once it ended; the mean so far, marked
``~``, while it runs) and spend; an editing cell's trials and task losses.
Under it, the grid's spend against its allocation. Read from the files alone,
like status.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from .._sections import section_table
from ._grid_file import DEFAULT_KIND, grid_kind
from ._report import grid_status
from ._run import GridPlace, grid_outcomes, grid_running, read_grid

__all__ = [
    "attach_grid",
    "grid_frame",
    "grid_outcomes_now",
    "grid_status_now",
    "render_grid",
]


def render_grid(status: dict[str, Any]) -> Group:
    """One frame of the view, from :func:`grid_status`'s dict."""
    title = Text(f"grid {status['tag']}  ({status['state']})", style="bold")
    section = grid_kind(status.get("kind", DEFAULT_KIND)).section(status["cells"])
    cells = section_table(section, fold=True)
    allocation = Decimal(status["allocation_usd"])
    spent = Decimal(status["spend_usd"])
    share = f" ({100 * spent / allocation:.1f}%)" if allocation else ""
    spend = Text(f"spend ${status['spend_usd']} of ${status['allocation_usd']}{share}")
    return Group(title, cells, spend)


def grid_outcomes_now(runs: Path, tag: str) -> list[Any]:
    """Every cell of the grid ``tag`` under ``runs``, as its files stand now.

    Raises:
        ConfigError: no grid ``tag`` under ``runs``.
    """
    return grid_outcomes(read_grid(runs, tag), GridPlace(runs, tag))


def grid_status_now(runs: Path, tag: str) -> dict[str, Any]:
    """:func:`grid_status` of the grid ``tag`` under ``runs``, now.

    Raises:
        ConfigError: no grid ``tag`` under ``runs``.
    """
    grid = read_grid(runs, tag)
    outcomes = grid_outcomes(grid, GridPlace(runs, tag))
    return grid_status(tag, outcomes, grid.allocation_usd, running=grid_running(runs, tag))


def grid_frame(runs: Path, tag: str) -> tuple[Group, str]:
    """The grid's frame now, and its state.

    Raises:
        ConfigError: no grid ``tag`` under ``runs``.
    """
    status = grid_status_now(runs, tag)
    return render_grid(status), status["state"]


async def attach_grid(
    runs: Path,
    tag: str,
    *,
    console: Console | None = None,
    once: bool = False,
    until_done: bool = False,
    refresh: float = 1.0,
) -> str:
    """Show the grid until detached (or once, or until no driver runs it); its state."""
    console = console or Console()
    frame, state = await anyio.to_thread.run_sync(grid_frame, runs, tag)
    if once:
        console.print(frame)
        return state
    with Live(frame, console=console, refresh_per_second=2) as live:
        while not (until_done and state != "running"):
            await anyio.sleep(refresh)
            frame, state = await anyio.to_thread.run_sync(grid_frame, runs, tag)
            live.update(frame)
    return state
