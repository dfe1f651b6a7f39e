"""The grid's leaderboard and status, rebuilt from its cells' files (no provider call).

The leaderboard has ServeLearnBench's ``leaderboard.csv`` columns: ``model``,
``method``, one column per scenario and category (``banking_H_L1``,
``banking_F_L1``, ...; ``<scenario>_H`` and ``<scenario>_F`` for a scenario of
mw's own), ``avg_h``, ``avg_f`` and ``api_cost_usd``. Averages follow the
benchmark's rule: Avg. H over the nine Hidden scores, Avg. F over the six
Retail and Banking Fully Specified scores, blank unless all are present. A
cell whose campaign has no end record reads ``unknown``, never a score. Cost
is every ledger line of the row's cells: host, learner and judge.

An editing grid's leaderboard has a row per (student, arm) and each task's
losses over the seeds (see ._editing.edit_leaderboard).
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import msgspec

import meters

from .._svg import Bars, Series, bar_chart, line_chart
from ..serve_learn import OFFICIAL_SCENARIOS
from ._cell_state import ENDED
from ._editing import EditOutcome, edit_leaderboard
from ._serve_learn_cells import CellOutcome

__all__ = [
    "Leaderboard",
    "curve_svg",
    "describe_run",
    "describe_status",
    "grid_status",
    "leaderboard",
    "leaderboard_csv",
    "leaderboard_html",
    "leaderboard_markdown",
    "setting_column",
]

_OFFICIAL = re.compile(r"^(retail|banking|pitch)_l([123])$")


def setting_column(scenario: str, category: str) -> str:
    """The leaderboard's column for a scenario's category (``hidden``, ``fully_specified``)."""
    letter = "H" if category == "hidden" else "F"
    official = _OFFICIAL.match(scenario)
    if official:
        return f"{official.group(1)}_{letter}_L{official.group(2)}"
    return f"{scenario}_{letter}"


def _categories(scenario: str) -> tuple[str, ...]:
    # Every Pitch task is Hidden: the customer's taste is never documented.
    return ("hidden",) if scenario.startswith("pitch") else ("hidden", "fully_specified")


class Leaderboard:
    """The table: ``columns``, then one row (a dict of strings) per (model, method)."""

    def __init__(self, columns: list[str], rows: list[dict[str, str]]) -> None:
        self.columns, self.rows = columns, rows


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def leaderboard(outcomes: Sequence[CellOutcome | EditOutcome]) -> Leaderboard:
    """The leaderboard of ``outcomes``: rows in the grid's order of models, then methods.

    An editing grid's: rows (student, arm), each task's losses over the seeds.
    """
    if outcomes and isinstance(outcomes[0], EditOutcome):
        return Leaderboard(*edit_leaderboard([o for o in outcomes if isinstance(o, EditOutcome)]))
    return _serve_learn_board([o for o in outcomes if isinstance(o, CellOutcome)])


def _serve_learn_board(outcomes: Sequence[CellOutcome]) -> Leaderboard:
    scenarios = list(dict.fromkeys(o.scenario for o in outcomes))
    settings = [(s, c) for s in scenarios for c in _categories(s)]
    columns = [
        "model",
        "method",
        *(setting_column(s, c) for s, c in settings),
        "avg_h",
        "avg_f",
        "api_cost_usd",
    ]
    by_row: dict[tuple[str, str], dict[str, CellOutcome]] = {}
    models = list(dict.fromkeys(o.model for o in outcomes))
    for o in sorted(outcomes, key=lambda o: models.index(o.model)):  # stable: methods in order
        by_row.setdefault((o.model, o.method), {})[o.scenario] = o
    rows = []
    for (model, method), cells in by_row.items():
        row = {"model": model, "method": method}
        for scenario, category in settings:
            cell = cells.get(scenario)
            value = (
                ""
                if cell is None
                else "unknown"
                if cell.state not in ENDED
                else _score(getattr(cell, category))
            )
            row[setting_column(scenario, category)] = value
        hidden = [_value(cells, s, "hidden") for s in OFFICIAL_SCENARIOS]
        full = [_value(cells, s, "fully_specified") for s in OFFICIAL_SCENARIOS[:6]]
        row["avg_h"] = _mean(hidden)
        row["avg_f"] = _mean(full)
        cost = sum((Decimal(c.cost_usd) for c in cells.values()), Decimal(0))
        row["api_cost_usd"] = meters.usd(cost)
        rows.append(row)
    return Leaderboard(columns, rows)


def _value(cells: dict[str, CellOutcome], scenario: str, category: str) -> float | None:
    cell = cells.get(scenario)
    if cell is None or cell.state not in ENDED:
        return None
    value: float | None = getattr(cell, category)
    return value


def _mean(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    return _score(sum(present) / len(values)) if len(present) == len(values) else ""


def leaderboard_csv(outcomes: Sequence[CellOutcome | EditOutcome]) -> str:
    """The leaderboard as ``leaderboard.csv``: a header line, then a row per (model, method)."""
    board = leaderboard(outcomes)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=board.columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(board.rows)
    return out.getvalue()


_NAMES = ("model", "method", "student", "arm")  # a row's name columns (left-aligned)


def leaderboard_markdown(outcomes: Sequence[CellOutcome | EditOutcome]) -> str:
    board = leaderboard(outcomes)
    lines = [
        "| " + " | ".join(board.columns) + " |",
        "|" + "|".join("---" if c in _NAMES else "---:" for c in board.columns) + "|",
    ]
    lines += ["| " + " | ".join(row[c] or "-" for c in board.columns) + " |" for row in board.rows]
    return "\n".join(lines) + "\n"


_SERIES = (("hidden", "Hidden", "#c0392b"), ("fully_specified", "Fully Specified", "#2471a3"))


def curve_svg(cell: CellOutcome) -> str:
    """The cell's learning curve: each tested window's Hidden and Fully Specified score."""
    if not cell.windows:
        return "<p class='none'>no window tested yet</p>"
    series = []
    for field, label, _ in _SERIES:
        scored = [(w, getattr(w, field)) for w in cell.windows if getattr(w, field) is not None]
        series.append(
            Series(
                label,
                [(w.window, v) for w, v in scored],
                [f"window {w.window}: {label} {v:.1f} ({w.tests} tests)" for w, v in scored],
                dashed=field == "fully_specified",
            )
        )
    return line_chart(series, x_label="window", y_label="score", y_max=100, width=320, height=170)


def _cells(values: Sequence[str], tag: str) -> str:
    return "".join(f"<{tag}>{html.escape(v or '-')}</{tag}>" for v in values)


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    body = "".join(f"<tr>{_cells(row, 'td')}</tr>" for row in rows)
    return f"<table><thead><tr>{_cells(columns, 'th')}</tr></thead><tbody>{body}</tbody></table>"


def _losses_svg(board: Leaderboard) -> str:
    """Each (student, arm) row's mean task loss per task, as grouped bars."""
    tasks = [c.removesuffix("_task_loss") for c in board.columns if c.endswith("_task_loss")]
    groups = [f"{r['student']} · {r['arm']}" for r in board.rows]
    series = []
    for task in tasks:
        values = [_float(r[f"{task}_task_loss"]) for r in board.rows]
        series.append((task, values))
    tips = [
        [
            f"{r['student']} {r['arm']}: {task} loss {r[f'{task}_task_loss'] or '-'} "
            f"(sd {r[f'{task}_task_loss_sd'] or '-'}, {r['seeds']} seeds)"
            for r in board.rows
        ]
        for task in tasks
    ]
    return bar_chart(Bars(groups, series, tips), x_label="student · arm", y_label="task loss")


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def leaderboard_html(outcomes: Sequence[CellOutcome | EditOutcome], *, title: str) -> str:
    """A self-contained page: the table, and each cell's state, progress and spend.

    A serve-and-learn grid's adds each cell's learning curve; an editing grid's, its
    rows' task losses as bars.
    """
    board = leaderboard(outcomes)
    table = _table(board.columns, [[r[c] for c in board.columns] for r in board.rows])
    edits = [o for o in outcomes if isinstance(o, EditOutcome)]
    runs = [o for o in outcomes if isinstance(o, CellOutcome)]
    if edits:
        detail = _table(
            ["cell", "state", "trials ended", "attempts set aside", "cost (USD)"],
            [
                [o.tag, o.state, f"{o.trials_ended}/{o.trials}", str(o.attempts), o.cost_usd]
                for o in edits
            ],
        )
        figures = (
            "<h2>Task losses</h2><p>each row's mean private-partition loss over its seeds "
            f"(lower is better; hover a bar for its spread)</p>{_losses_svg(board)}"
        )
    else:
        detail = _table(
            ["cell", "state", "served", "tested", "cost (USD)"],
            [
                [
                    o.tag,
                    o.state,
                    f"{o.served}/{o.serving_total if o.serving_total is not None else '?'}",
                    str(o.tested),
                    o.cost_usd,
                ]
                for o in runs
            ],
        )
        curves = "".join(
            f"<figure><figcaption>{html.escape(o.scenario)} · {html.escape(o.method)} · "
            f"{html.escape(o.model)} <span class='state'>({html.escape(o.state)})</span>"
            f"</figcaption>{curve_svg(o)}</figure>"
            for o in runs
        )
        figures = (
            "<h2>Learning curves</h2><p>each tested window's score, on the checkpoint from its "
            f"boundary (hover a point for its tests)</p>{curves}"
        )
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
        f"{table}<h2>Cells</h2>{detail}{figures}</body></html>\n"
    )


def grid_status(
    tag: str,
    outcomes: Sequence[CellOutcome | EditOutcome],
    allocation: Decimal,
    *,
    running: bool,
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
    if any(isinstance(o, EditOutcome) for o in outcomes):
        status["kind"] = "editing"  # its cells' fields are an editing run's
    return status


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def describe_status(status: dict[str, Any]) -> str:
    """``mw grid status``'s lines: the grid's state and spend, then one line per cell."""
    lines = [
        f"grid {status['tag']}: {status['state']}; spend ${status['spend_usd']} of "
        f"${status['allocation_usd']}"
    ]
    for cell in status["cells"]:
        if "arm" in cell:  # an editing cell
            losses = ", ".join(
                f"{task} loss {_loss(v['task_loss'])} (regression {_loss(v['regression_loss'])})"
                for task, v in cell["tasks"].items()
            )
            aside = f", {cell['attempts']} attempts set aside" if cell["attempts"] else ""
            lines.append(
                f"  {cell['tag']}: {cell['state']}, {cell['trials_ended']}/{cell['trials']} "
                f"trials ended{aside}, {losses}, ${cell['cost_usd']}"
            )
            continue
        lines.append(
            f"  {cell['tag']}: {cell['state']}, {cell['served']}/{cell['serving_total']} "
            f"served, {cell['tested']} tested, hidden {cell['hidden']}, fully specified "
            f"{cell['fully_specified']}, ${cell['cost_usd']}"
        )
    return "\n".join(lines)


def describe_run(
    outcomes: Sequence[CellOutcome | EditOutcome], leaderboard_path: Any
) -> tuple[str, bool]:
    """What ``mw grid run`` prints at its end, and whether every cell ended."""
    ended = sum(o.state in ENDED for o in outcomes)
    text = f"grid: {ended} of {len(outcomes)} cells ended\nleaderboard: {leaderboard_path}"
    return text, ended == len(outcomes)
