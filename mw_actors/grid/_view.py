"""A grid as ``mw attach GRID_TAG`` shows it: a table of cells, and the grid's spend.

Each cell's state, its serving progress, its tests, its score (once it ended;
the mean so far, marked ``~``, while it runs) and its spend; under it, the
grid's spend against its allocation. Read from the files alone, like status.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ._report import grid_status
from ._run import GridPlace, grid_outcomes, grid_running, read_grid

__all__ = [
    "attach_grid",
    "grid_frame",
    "grid_outcomes_now",
    "grid_status_now",
    "render_grid",
]


def _score(final: float | None, so_far: float | None) -> str:
    if final is not None:
        return f"{final:.1f}"
    return "-" if so_far is None else f"~{so_far:.1f}"


def _progress(done: int, total: int | None) -> Table:
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=max(total or 0, 1), completed=done, width=20), f"{done}/{total or '?'}"
    )
    return bar


def _edit_cells(status: dict[str, Any]) -> Table:
    """An editing grid's cells: state, trials ended, each task's loss, spend."""
    cells = Table(show_header=True, box=None)
    tasks = list(dict.fromkeys(t for c in status["cells"] for t in c["tasks"]))
    columns = [("cell", "left"), ("state", "left"), ("trials", "left")]
    columns += [(f"{t} loss", "right") for t in tasks] + [("USD", "right")]
    for column, justify in columns:
        cells.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for c in status["cells"]:
        losses = [c["tasks"].get(t, {}).get("task_loss") for t in tasks]
        cells.add_row(
            c["tag"],
            c["state"] + (f" ({c['attempts']} set aside)" if c["attempts"] else ""),
            _progress(c["trials_ended"], c["trials"]),
            *("-" if v is None else f"{v:.4f}" for v in losses),
            c["cost_usd"],
        )
    return cells


def render_grid(status: dict[str, Any]) -> Group:
    """One frame of the view, from :func:`grid_status`'s dict."""
    title = Text(f"grid {status['tag']}  ({status['state']})", style="bold")
    cells = _edit_cells(status) if status.get("kind") == "editing" else _run_cells(status)
    allocation = Decimal(status["allocation_usd"])
    spent = Decimal(status["spend_usd"])
    share = f" ({100 * spent / allocation:.1f}%)" if allocation else ""
    spend = Text(f"spend ${status['spend_usd']} of ${status['allocation_usd']}{share}")
    return Group(title, cells, spend)


def _run_cells(status: dict[str, Any]) -> Table:
    """A serve-and-learn grid's cells: state, serving, tests, scores so far, spend."""
    cells = Table(show_header=True, box=None)
    for column, justify in (
        ("cell", "left"),
        ("state", "left"),
        ("served", "left"),
        ("tested", "right"),
        ("hidden", "right"),
        ("full", "right"),
        ("USD", "right"),
    ):
        cells.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for c in status["cells"]:
        cells.add_row(
            c["tag"],
            c["state"],
            _progress(c["served"], c["serving_total"]),
            str(c["tested"]),
            _score(c["hidden"], c["hidden_so_far"]),
            _score(c["fully_specified"], c["fully_specified_so_far"]),
            c["cost_usd"],
        )
    return cells


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
