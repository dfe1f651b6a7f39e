"""A kind's :class:`~mw_actors._campaign_kind.Section`, drawn for ``mw attach``.

A run's view and a grid's draw their sections the same way.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ._campaign_kind import Bar, Section

__all__ = ["progress_bar", "section_table"]


def progress_bar(done: int, total: int, *, width: int = 30, text: str | None = None) -> Table:
    """A progress bar and ``text`` beside it (default ``done/total``)."""
    row = Table.grid(padding=(0, 1))
    shown = f"{done}/{total}" if text is None else text
    row.add_row(ProgressBar(total=max(total, 1), completed=done, width=width), shown)
    return row


def _cell(cell: str | Bar) -> Any:
    """A section's cell: its text, or a bar (a total of 0 is not known yet: ``?``)."""
    if not isinstance(cell, Bar):
        return cell
    return progress_bar(cell.done, cell.total, width=20, text=f"{cell.done}/{cell.total or '?'}")


def section_table(section: Section, *, fold: bool = False) -> Any:
    """The section's table, with the line under it (only the line, when it has no rows).

    ``fold``: a cell too long for its column wraps (else it is cut short).
    """
    if not section.rows:
        return Text(section.footer)
    table = Table(title=section.title or None, show_header=True, box=None)
    for number, column in enumerate(section.columns):
        bars = any(isinstance(row[number], Bar) for row in section.rows)
        left = number < section.names or not column or bars
        table.add_column(
            column, justify="left" if left else "right", overflow="fold" if fold else "ellipsis"
        )
    for row in section.rows:
        table.add_row(*(_cell(c) for c in row))
    return Group(table, Text(section.footer)) if section.footer else table
