"""A grid's leaderboard, status and page, rebuilt from its cells' files (no provider call).

The grid's kind (``kinds.GridKind``) reads each cell and makes the leaderboard's
columns and rows: a serve-and-learn grid's has ServeLearnBench's
``leaderboard.csv`` columns, an editing grid's a row per (student, arm) and
each task's losses over the seeds. Here they become a CSV, a Markdown table, a
page and a status, the same way for every kind.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import msgspec

import meters

from .._cells import ENDED
from .._svg import html_table
from ._grid_file import DEFAULT_KIND, grid_kind

__all__ = [
    "Leaderboard",
    "describe_run",
    "describe_status",
    "grid_status",
    "leaderboard",
    "leaderboard_csv",
    "leaderboard_html",
    "leaderboard_markdown",
    "verify_cells",
]


class Leaderboard:
    """The table: ``columns``, then its rows (dicts of strings), as the grid's kind makes them."""

    def __init__(self, columns: list[str], rows: list[dict[str, str]]) -> None:
        self.columns, self.rows = columns, rows


def _kind(outcomes: Sequence[Any]) -> str:
    """The kind of grid whose cells ``outcomes`` are (each outcome's type says it)."""
    return outcomes[0].kind if outcomes else DEFAULT_KIND


def leaderboard(outcomes: Sequence[Any]) -> Leaderboard:
    """The leaderboard of ``outcomes`` (a grid's cells), as their kind makes it."""
    return Leaderboard(*grid_kind(_kind(outcomes)).leaderboard(outcomes))


def leaderboard_csv(outcomes: Sequence[Any]) -> str:
    """The leaderboard as ``leaderboard.csv``: a header line, then a row per (model, method)."""
    board = leaderboard(outcomes)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=board.columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(board.rows)
    return out.getvalue()


def leaderboard_markdown(outcomes: Sequence[Any]) -> str:
    """The leaderboard as a Markdown table: names left-aligned, figures right-aligned."""
    board = leaderboard(outcomes)
    names = grid_kind(_kind(outcomes)).names
    lines = [
        "| " + " | ".join(board.columns) + " |",
        "|" + "|".join("---" if i < names else "---:" for i in range(len(board.columns))) + "|",
    ]
    lines += ["| " + " | ".join(row[c] or "-" for c in board.columns) + " |" for row in board.rows]
    return "\n".join(lines) + "\n"


def leaderboard_html(outcomes: Sequence[Any], *, title: str) -> str:
    """A self-contained page: the table, then what the grid's kind shows of its cells.

    A serve-and-learn grid's: each cell's state, progress, spend and learning curve;
    an editing grid's: its cells, and its rows' task losses as bars.
    """
    board = leaderboard(outcomes)
    table = html_table(board.columns, [[r[c] for c in board.columns] for r in board.rows])
    detail = grid_kind(_kind(outcomes)).html(outcomes, board.columns, board.rows)
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
        "td:first-child,td:nth-child(2),th{text-align:left}"
        "figure{display:inline-block;margin:0 1.5em 1.5em 0}figcaption{font-size:.85em}"
        ".state,.none{color:#777}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        f"{table}{detail}</body></html>\n"
    )


def grid_status(
    tag: str, outcomes: Sequence[Any], allocation: Decimal, *, running: bool
) -> dict[str, Any]:
    """``mw grid status --json``: the grid's state, each cell, the spend against the budget."""
    states = {o.state for o in outcomes}
    state = (
        "running"
        if running
        else "completed"
        if states <= set(ENDED)
        else "pending"
        if states == {"pending"}
        else "interrupted"
    )
    spend = sum((Decimal(o.cost_usd) for o in outcomes), Decimal(0))
    status = {
        "tag": tag,
        "state": state,
        "cells": [msgspec.to_builtins(o) for o in outcomes],  # each outcome's fields
        "spend_usd": meters.usd(spend),
        "allocation_usd": meters.usd(allocation),
    }
    if _kind(outcomes) != DEFAULT_KIND:  # a serve-and-learn grid's status never said its kind
        status["kind"] = _kind(outcomes)  # what its cells' fields are
    return status


def describe_status(status: dict[str, Any]) -> str:
    """``mw grid status``'s lines: the grid's state and spend, then one line per cell."""
    kind = grid_kind(status.get("kind", DEFAULT_KIND))
    lines = [
        f"grid {status['tag']}: {status['state']}; spend ${status['spend_usd']} of "
        f"${status['allocation_usd']}"
    ]
    lines += [f"  {cell['tag']}: {kind.status_line(cell)}" for cell in status["cells"]]
    return "\n".join(lines)


def verify_cells(cells: Any, outcomes: Sequence[Any]) -> None:
    """Before a report: the ended cells' evidence checked by their kind.

    Raises:
        IntegrityError: evidence changed after it was recorded (an editing cell's
            checkpoint, receipt or grade).
    """
    grid_kind(_kind(outcomes)).verify(cells, outcomes)


def describe_run(outcomes: Sequence[Any], leaderboard_path: Any) -> tuple[str, bool]:
    """What ``mw grid run`` prints at its end, and whether every cell ended."""
    ended = sum(o.state in ENDED for o in outcomes)
    text = f"grid: {ended} of {len(outcomes)} cells ended\nleaderboard: {leaderboard_path}"
    return text, ended == len(outcomes)
