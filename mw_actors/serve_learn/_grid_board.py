"""A serve-and-learn cell as its run directory tells it, and a grid of them as a leaderboard.

Read from disk only (journals, results, ledgers), so a report or a status
needs no provider and no driver.

The leaderboard has ServeLearnBench's ``leaderboard.csv`` columns: ``model``,
``method``, one column per scenario and category (``banking_H_L1``,
``banking_F_L1``, ...; ``<scenario>_H`` and ``<scenario>_F`` for a scenario of
mw's own), ``avg_h``, ``avg_f`` and ``api_cost_usd``. Averages follow the
benchmark's rule: Avg. H over the nine Hidden scores, Avg. F over the six
Retail and Banking Fully Specified scores, blank unless all are present. A
cell whose campaign has no end record reads ``unknown``, never a score. Cost
is every ledger line of the row's cells: host, learner and judge.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import msgspec

import meters

from .._campaign_kind import Bar, Section
from .._cells import ENDED, CellState, run_state
from .._core import read_journal
from .._svg import Series, html_table, line_chart
from ._methods import make_method
from ._run_report import WindowScores, window_scores
from ._score import OFFICIAL_SCENARIOS, score_file
from ._spec import CAMPAIGN_RECORDS, RunDir
from .records import EpisodeEnded, ServeLearnEnded, ServeLearnStarted

__all__ = [
    "LEDGERS",
    "Cell",
    "CellOutcome",
    "cell_lines",
    "cells_html",
    "cells_section",
    "curve_svg",
    "leaderboard_rows",
    "read_cell",
    "setting_column",
    "status_line",
]

# Every meter's ledger in a serve-and-learn run directory: host, learner, judge.
LEDGERS = ("ledger.jsonl", "learner/ledger.jsonl", "judge/ledger.jsonl")


class Cell(msgspec.Struct, frozen=True):
    """One campaign of a serve-and-learn grid (``._grid`` derives them from its file)."""

    tag: str
    scenario: str
    method: str
    model: str
    learner_model: str


class CellOutcome(msgspec.Struct, frozen=True, kw_only=True):
    kind: ClassVar[str] = "serve-learn"  # the grid kind whose cells these are
    tag: str
    scenario: str
    method: str
    model: str
    state: CellState
    hidden: float | None
    fully_specified: float | None
    cost_usd: str  # host + learner + judge, from the wire ledgers
    served: int  # serving episodes ended so far
    # 100 x the mean reward of the test episodes ended so far, by category: progress
    # while a cell runs, never its score (which exists only once the campaign ended)
    hidden_so_far: float | None
    fully_specified_so_far: float | None
    tested: int  # test episodes ended so far
    serving_total: int | None  # the cell's serving cases (None before it started)
    windows: list[WindowScores] = []  # the learning curve: each window tested so far


def _mean_of(values: list[float]) -> float | None:
    return 100 * sum(values) / len(values) if values else None


def cell_lines(root: Path) -> list[meters.LedgerLine]:
    """Every ledger line the cell's meters wrote so far."""
    lines: list[meters.LedgerLine] = []
    for name in LEDGERS:
        path = root / name
        if path.is_file():
            lines.extend(meters.read_ledger(path))
    return lines


def read_cell(cells: Path, cell: Cell) -> CellOutcome:
    """``cell`` as its run directory under ``cells`` stands now."""
    run = RunDir(cells, cell.tag, cell.scenario, make_method(cell.method).name)
    started: ServeLearnStarted | None = None
    ended: ServeLearnEnded | None = None
    served = tested = 0
    rewards: dict[str, list[float]] = {"hidden": [], "fully_specified": []}
    records: list[object] = []
    if run.journal.is_dir():
        for entry in read_journal(run.journal, CAMPAIGN_RECORDS):
            rec = entry.rec
            records.append(rec)
            if isinstance(rec, EpisodeEnded):
                served += rec.phase == "serving"
                tested += rec.phase == "test"
                if rec.phase == "test" and rec.category in rewards:
                    rewards[rec.category].append(rec.reward)
            elif isinstance(rec, ServeLearnStarted):
                started = rec
            elif isinstance(rec, ServeLearnEnded):
                ended = rec
    state = run_state(run.root, run.journal, None if ended is None else ended.state)
    scored = state in ENDED and run.results.is_file()
    score = score_file(run.results) if scored else None
    cost = sum((Decimal(line.cost_usd) for line in cell_lines(run.root)), Decimal(0))
    return CellOutcome(
        tag=cell.tag,
        scenario=cell.scenario,
        method=cell.method,
        model=cell.model,
        state=state,
        hidden=None if score is None else score.hidden,
        fully_specified=None if score is None else score.fully_specified,
        cost_usd=meters.usd(cost),
        served=served,
        hidden_so_far=_mean_of(rewards["hidden"]),
        fully_specified_so_far=_mean_of(rewards["fully_specified"]),
        tested=tested,
        serving_total=None if started is None else started.serving_total,
        windows=window_scores(records),
    )


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


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def leaderboard_rows(
    outcomes: Sequence[CellOutcome],
) -> tuple[list[str], list[dict[str, str]]]:
    """The leaderboard: rows in the grid's order of models, then methods."""
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
    return columns, rows


def _value(cells: dict[str, CellOutcome], scenario: str, category: str) -> float | None:
    cell = cells.get(scenario)
    if cell is None or cell.state not in ENDED:
        return None
    value: float | None = getattr(cell, category)
    return value


def _mean(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    return _score(sum(present) / len(values)) if len(present) == len(values) else ""


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


def cells_html(outcomes: Sequence[CellOutcome]) -> str:
    """The report page's cells (state, progress, spend) and each cell's learning curve."""
    detail = html_table(
        ["cell", "state", "served", "tested", "cost (USD)"],
        [
            [
                o.tag,
                o.state,
                f"{o.served}/{o.serving_total if o.serving_total is not None else '?'}",
                str(o.tested),
                o.cost_usd,
            ]
            for o in outcomes
        ],
    )
    curves = "".join(
        f"<figure><figcaption>{html.escape(o.scenario)} · {html.escape(o.method)} · "
        f"{html.escape(o.model)} <span class='state'>({html.escape(o.state)})</span>"
        f"</figcaption>{curve_svg(o)}</figure>"
        for o in outcomes
    )
    return (
        f"<h2>Cells</h2>{detail}<h2>Learning curves</h2><p>each tested window's score, on the "
        f"checkpoint from its boundary (hover a point for its tests)</p>{curves}"
    )


def _so_far(final: float | None, so_far: float | None) -> str:
    if final is not None:
        return f"{final:.1f}"
    return "-" if so_far is None else f"~{so_far:.1f}"


def cells_section(cells: Sequence[Mapping[str, Any]]) -> Section:
    """``mw attach GRID``'s table: state, serving, tests, scores (``~``: so far), spend."""
    return Section(
        title="",
        columns=("cell", "state", "served", "tested", "hidden", "full", "USD"),
        names=2,
        rows=[
            (
                c["tag"],
                c["state"],
                Bar("served", c["served"], c["serving_total"] or 0),
                str(c["tested"]),
                _so_far(c["hidden"], c["hidden_so_far"]),
                _so_far(c["fully_specified"], c["fully_specified_so_far"]),
                c["cost_usd"],
            )
            for c in cells
        ],
    )


def status_line(cell: Mapping[str, Any]) -> str:
    """A cell in ``mw grid status``: state, progress, scores, spend."""
    return (
        f"{cell['state']}, {cell['served']}/{cell['serving_total']} served, {cell['tested']} "
        f"tested, hidden {cell['hidden']}, fully specified {cell['fully_specified']}, "
        f"${cell['cost_usd']}"
    )
