"""A serve-and-learn cell as its run directory tells it: its state, its scores, its spend.

Read from disk only (journals, results, ledgers), so a report or a status
needs no provider and no driver. Its state is read as every cell's is
(``._cell_state``); an editing grid's cells are read in ``._editing``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec

import meters

from .._core import read_journal
from ..serve_learn import (
    CAMPAIGN_RECORDS,
    RunDir,
    WindowScores,
    make_method,
    score_file,
    window_scores,
)
from ..serve_learn.records import EpisodeEnded, ServeLearnEnded, ServeLearnStarted
from ._cell_state import ENDED, CellState, run_state
from ._spec import Cell

__all__ = ["LEDGERS", "CellOutcome", "cell_lines", "read_cell"]

# Every meter's ledger in a serve-and-learn run directory: host, learner, judge.
LEDGERS = ("ledger.jsonl", "learner/ledger.jsonl", "judge/ledger.jsonl")


class CellOutcome(msgspec.Struct, frozen=True, kw_only=True):
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


def _mean(values: list[float]) -> float | None:
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
        hidden_so_far=_mean(rewards["hidden"]),
        fully_specified_so_far=_mean(rewards["fully_specified"]),
        tested=tested,
        serving_total=None if started is None else started.serving_total,
        windows=window_scores(records),
    )
