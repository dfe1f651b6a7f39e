"""Weight-editing grids: students x arms x seeds, each cell one ``wsm benchmark run``.

::

    tag: e1
    kind: editing
    config: wsm/config.json      # a wsm benchmark config: the cells' base
    arms: [baseline, scripted]   # optional: the config's arms
    seeds: [0, 1, 2]             # optional: [0]; each trial's WSM_SEED
    students: [students/tiny]    # optional: the config's student; snapshot directories
    allocation: 5                # USD, for the whole grid

A cell is the base config with one student, one arm and one seed (``WSM_SEED``
in the edit's environment): ``<grid>/configs/<cell>.json``, run by the editing
campaign exactly as ``wsm benchmark run --config`` runs it, into
``<grid>/cells/<cell>/``. Its tag is ``<grid>.<student>.<arm>.s<seed>``.

An editing run never continues. A cell a killed driver (or node) left without
its end record is set aside whole, to ``cells/.attempts/<cell>.<n>/``, and run
again as a new attempt: the grid's journal records it, its evidence stays, and
its spend still counts (its open reservation is written off at its envelope).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import msgspec

import meters
from mw_errors import ConfigError, IntegrityError

from .._campaign_kind import Bar, GridContext, Section
from .._cells import ENDED, CellState, run_state, slug, stable_tag
from .._core import read_journal
from .._reserver import BUDGET_RECORDS
from .._svg import Bars, bar_chart, html_table
from .._tags import check_tag
from ._campaign import CampaignOptions, run_campaign
from ._config import Loaded, Student, load_config, pin_student
from ._layout import RunLayout
from ._preflight import preflight
from ._report import build_report, load_receipt
from .records import EDITING_RECORDS, EditingEnded, EditingStarted, TrialEnded, TrialGraded

__all__ = [
    "EDITING_GRID",
    "EditCell",
    "EditGridSpec",
    "EditJob",
    "EditOutcome",
    "TaskLosses",
    "config_path",
    "edit_cell_lines",
    "read_edit_cell",
]

ATTEMPTS = ".attempts"  # under cells/: the interrupted attempts set aside
RECORDS = (*BUDGET_RECORDS, *EDITING_RECORDS)  # what an editing run's journal holds
POLICY_LEDGERS = "trials/*/policy/ledger/ledger.jsonl"


class EditCell(msgspec.Struct, frozen=True):
    """One editing run of the grid: a student, an arm, a seed."""

    tag: str
    student: str
    arm: str
    seed: int


class EditGridSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An editing grid, checked: its cells in a stable order, its inputs pinned."""

    kind: Literal["editing"] = "editing"
    tag: str
    cells: list[EditCell]
    allocation_usd: Decimal
    config: str  # the base wsm config (absolute)
    config_sha256: str
    students: dict[str, Student]  # name -> its snapshot, pinned (the path absolute)
    tasks: list[str]
    runs: str | None = None  # absolute
    max_parallel: int | None = None

    def identity(self) -> dict[str, Any]:
        """What a resume must find unchanged: the cells, the inputs, the allocation."""
        return {
            "cells": [c.tag for c in self.cells],
            "settings": {
                "config_sha256": self.config_sha256,
                "students": {n: s.payload_sha256 for n, s in self.students.items()},
            },
            "allocation_usd": str(self.allocation_usd),
        }


class _GridFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    tag: str
    allocation: str | int | float
    kind: Literal["editing"] = "editing"
    config: str | None = None  # a wsm benchmark config: the cells' base
    arms: list[str] | None = None
    seeds: list[int] | None = None
    students: list[str] | None = None
    runs: str | None = None
    max_parallel: int | None = None


def edit_grid(raw: Mapping[str, Any], source: str, base: Path, allocation: Decimal) -> EditGridSpec:
    """The editing grid ``raw`` names (its paths relative to ``base``), checked and pinned.

    Raises:
        ConfigError: a bad config, arm, seed or student.
    """
    try:
        file = msgspec.convert(raw, _GridFile)
    except msgspec.ValidationError as exc:
        raise ConfigError(
            f"{source} is not a grid: {exc}",
            hint="an editing grid's fields: tag, config, arms, seeds, students, allocation",
        ) from None
    grid = check_tag(file.tag)
    if file.config is None:
        raise ConfigError(
            f"{source}: an editing grid needs config: a wsm benchmark config",
            hint="`python scripts/benchmark_fixture.py --output DIR` writes one to start from",
        )
    loaded = load_config(base / file.config)
    arms = [a.name for a in loaded.config.arms]
    chosen = arms if file.arms is None else _distinct(file.arms, "arms")
    unknown = [a for a in chosen if a not in arms]
    if unknown:
        raise ConfigError(
            f"{source}: arm {unknown[0]!r} is not one of the config's arms {arms}",
            hint="name arms the config defines",
        )
    seeds = [0] if file.seeds is None else _distinct(file.seeds, "seeds")
    if any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**32 for s in seeds):
        raise ConfigError(
            f"{source}: seeds {seeds!r}: seeds are integers in 0..2**32-1", hint="fix seeds"
        )
    if file.students is None:  # the config's own, as it pinned it
        own = loaded.config.student
        directory = loaded.resolve(own.path)
        students = {directory.name: msgspec.structs.replace(own, path=str(directory))}
    else:
        directories = [(base / s).resolve() for s in _distinct(file.students, "students")]
        names = [d.name for d in directories]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"{source}: two students share the directory name {names}",
                hint="a student is named by its directory's name: give them distinct names",
            )
        students = {d.name: pin_student(d) for d in directories}  # pinned now, kept in grid.json
    cells = [
        EditCell(_cell_tag(grid, student, arm, seed), student, arm, seed)
        for student in students
        for arm in chosen
        for seed in seeds
    ]
    tags = [c.tag for c in cells]
    if len(set(tags)) != len(tags):  # "a b" and "a-b" are both the student a-b in a tag
        raise ConfigError(
            f"{source}: two cells get the same tag",
            hint="name the students' directories distinctly",
        )
    return EditGridSpec(
        tag=grid,
        cells=cells,
        allocation_usd=allocation,
        config=str(loaded.path),
        config_sha256=loaded.sha256,
        students=students,
        tasks=[d.task for d in loaded.config.datasets],
        runs=str(base / file.runs) if file.runs else None,
        max_parallel=file.max_parallel,
    )


def _distinct(value: list[Any], field: str) -> list[Any]:
    if not value or len(set(map(str, value))) != len(value):
        raise ConfigError(
            f"the grid's {field} must be distinct and not empty", hint=f"fix {field}: {value!r}"
        )
    return value


def _cell_tag(grid: str, student: str, arm: str, seed: int) -> str:
    return stable_tag([grid, slug(student, "student"), arm, f"s{seed}"])


# -- a cell's config ------------------------------------------------------------------------


def _absolute(node: Any, root: Path) -> Any:
    """Every ``{"path", "sha256"}`` file reference under ``node``, made absolute."""
    if isinstance(node, dict):
        out = {k: _absolute(v, root) for k, v in node.items()}
        if isinstance(out.get("path"), str) and ("sha256" in out or "files" in out):
            out["path"] = str((root / out["path"]).resolve())
        return out
    if isinstance(node, list):
        return [_absolute(v, root) for v in node]
    return node


def _base(grid: EditGridSpec) -> Loaded:
    """The grid's base config, as it was when the grid began.

    Raises:
        ConfigError: it changed since.
    """
    loaded = load_config(Path(grid.config))
    if loaded.sha256 != grid.config_sha256:
        raise ConfigError(
            f"config {grid.config} changed since grid {grid.tag} began",
            hint="restore it, or give the new grid a new tag",
        )
    return loaded


def cell_configs(grid: EditGridSpec, base: Loaded) -> dict[str, bytes]:
    """Each cell's wsm config (by tag): ``base`` with its student, its one arm, its seed.

    Their paths are absolute, so they read the same wherever they are kept. Each cell
    may spend up to the grid's whole allocation: the grid's one budget holds them all.
    """
    source = _absolute(msgspec.json.decode(base.path.read_bytes()), base.root)
    configs = {}
    for cell in grid.cells:
        data = dict(source)
        data["arms"] = [a for a in source["arms"] if a["name"] == cell.arm]
        data["student"] = msgspec.to_builtins(grid.students[cell.student])
        data["seed"] = cell.seed
        if source.get("money") is not None:
            data["money"] = {**source["money"], "allocation_usd": meters.usd(grid.allocation_usd)}
        configs[cell.tag] = msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n"
    return configs


def config_path(root: Path, cell: EditCell) -> Path:
    """Where the grid rooted at ``root`` keeps ``cell``'s config."""
    return root / "configs" / f"{cell.tag}.json"


def require_options(grid: EditGridSpec, options: CampaignOptions | None) -> CampaignOptions:
    """``options``, which an editing grid's cells need to run.

    Raises:
        ConfigError: there are none.
    """
    if options is None:
        raise ConfigError(
            f"grid {grid.tag} is an editing grid and no editing options were given",
            hint="run it with `mw grid run`, or pass GridContext(settings=CampaignOptions())",
        )
    return options


def check_edit_cells(grid: EditGridSpec, options: CampaignOptions | None) -> None:
    """Every cell checked as ``wsm benchmark preflight`` checks its config, writing nothing.

    The cells share all but their student, arm and seed, so each input is verified
    once: the base config's (datasets, every arm's script, the runtime, the prices,
    its own student) by its preflight, each other student against its pin; then each
    cell's config is read as ``wsm`` reads it.

    Raises:
        ConfigError: a cell cannot run as given (or no options were given to run it).
        IntegrityError: an input changed since it was pinned.
    """
    options = require_options(grid, options)
    base = _base(grid)
    preflight(base)
    for name, student in grid.students.items():
        if pin_student(Path(student.path), student.path) != student:
            raise IntegrityError(
                f"student {name} ({student.path}) changed since the grid pinned it",
                hint="restore it, or give the new grid a new tag",
            )
    if base.config.runtime.backend == "local" and not options.local_trusted:
        raise ConfigError(
            "runtime.backend is 'local', which runs untrusted edits without isolation",
            hint="pass --local-trusted to accept that, or set runtime.backend to 'bwrap'",
        )
    with tempfile.TemporaryDirectory(prefix="mw-grid-check-") as scratch:
        for tag, data in cell_configs(grid, base).items():
            path = Path(scratch) / f"{tag}.json"
            path.write_bytes(data)
            load_config(path)


def write_cell_configs(grid: EditGridSpec, root: Path) -> None:
    """Each cell's config under ``root``, once (a resumed grid's are the same bytes)."""
    configs = cell_configs(grid, _base(grid))
    for cell in grid.cells:
        path = config_path(root, cell)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            meters.write_atomically(path, configs[cell.tag])


# -- running a cell -------------------------------------------------------------------------


@dataclass(frozen=True)
class EditJob:
    """One editing cell to run (a new attempt if an earlier one was interrupted)."""

    tag: str
    config: Path
    output: Path
    options: CampaignOptions

    async def run(self, budget: meters.Reserver) -> None:
        """Set aside an interrupted attempt, then run the cell's campaign on ``budget``.

        ``budget`` is the cell's view of the grid's budget (:class:`CellBudget`).
        """
        if await anyio.to_thread.run_sync(_ended, self.output):
            return  # a Ray retry after a worker died between the run's end and its answer
        if await anyio.to_thread.run_sync(self._set_aside):
            # A dead attempt's trial may have spent up to its envelope: written off at it.
            for reservation in await budget.open_reservations():
                await budget.settle(reservation.id, Decimal(reservation.amount))
        loaded: Loaded = await anyio.to_thread.run_sync(load_config, self.config)
        await run_campaign(loaded, self.output, self.options, budget=budget)

    def _set_aside(self) -> bool:
        """Move an interrupted attempt to ``cells/.attempts/<cell>.<n>``; whether one was."""
        if not self.output.exists():
            return False
        cells = self.output.parent
        (cells / ATTEMPTS).mkdir(exist_ok=True)
        number = 1 + len(_attempts(cells, self.tag))
        os.replace(self.output, cells / ATTEMPTS / f"{self.tag}.{number}")
        return True


def _ended(run: Path) -> bool:
    """Whether the editing run at ``run`` has its end record."""
    if not (run / "journal").is_dir():
        return False
    return any(isinstance(e.rec, EditingEnded) for e in read_journal(run / "journal", RECORDS))


# -- reading a cell -------------------------------------------------------------------------


class TaskLosses(msgspec.Struct, frozen=True, kw_only=True):
    """A task's mean losses over a cell's completed trials (lower is better)."""

    task_loss: float | None
    regression_loss: float | None


class EditOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """An editing cell as its files stand (as ``mw grid status --json`` prints it)."""

    kind: ClassVar[str] = "editing"  # the grid kind whose cells these are
    tag: str
    student: str
    arm: str
    seed: int
    state: CellState
    tasks: dict[str, TaskLosses]  # every task; its losses only once the cell completed
    cost_usd: str  # every policy ledger line, of every attempt
    trials: int  # the cell's trials (0 before it started)
    trials_ended: int  # its trials ended so far
    attempts: int  # its interrupted attempts set aside


def _attempts(cells: Path, tag: str) -> list[Path]:
    """The attempts of cell ``tag`` set aside (``<tag>.<n>``), in the order they were."""
    aside = cells / ATTEMPTS
    if not aside.is_dir():
        return []
    found = []
    for path in aside.iterdir():
        name, _, number = path.name.rpartition(".")
        if name == tag and number.isdigit() and path.is_dir():
            found.append((int(number), path))
    return [path for _, path in sorted(found)]


def edit_cell_lines(cells: Path, cell: EditCell) -> list[meters.LedgerLine]:
    """Every ledger line the cell's policy meters wrote, in every attempt."""
    lines: list[meters.LedgerLine] = []
    for root in [*_attempts(cells, cell.tag), cells / cell.tag]:
        for path in sorted(root.glob(POLICY_LEDGERS)):
            lines.extend(meters.read_ledger(path))
    return lines


def read_edit_cell(cells: Path, cell: EditCell, tasks: Sequence[str]) -> EditOutcome:
    """``cell`` as its run directory under ``cells`` stands now (its receipts checked)."""
    layout = RunLayout(cells / cell.tag)
    started: EditingStarted | None = None
    finished = False
    outcomes: dict[str, str] = {}
    graded: dict[str, TrialGraded] = {}
    if layout.journal.is_dir():
        for entry in read_journal(layout.journal, RECORDS):
            rec = entry.rec
            if isinstance(rec, EditingStarted):
                started = rec
            elif isinstance(rec, TrialEnded):
                outcomes[rec.trial_id] = rec.outcome
            elif isinstance(rec, TrialGraded):
                graded.setdefault(rec.trial_id, rec)
            elif isinstance(rec, EditingEnded):
                finished = True
    ended: CellState | None = None
    if finished:
        states = set(outcomes.values())
        ended = (
            "completed"
            if states == {"completed"}
            else "budget_blocked"
            if "budget_blocked" in states
            else "failed"
        )
    state = run_state(layout.root, layout.journal, ended)
    losses = {task: TaskLosses(task_loss=None, regression_loss=None) for task in tasks}
    if state == "completed":  # scored only once it ended, every trial completed
        for task in tasks:
            means = [
                load_receipt(layout, record.receipt, record.receipt_sha256).means
                for trial, record in graded.items()
                if trial.split(".")[0] == task
            ]
            losses[task] = TaskLosses(
                task_loss=_mean([m["private"] for m in means if "private" in m]),
                regression_loss=_mean([m["regression"] for m in means if "regression" in m]),
            )
    cost = sum((Decimal(x.cost_usd) for x in edit_cell_lines(cells, cell)), Decimal(0))
    return EditOutcome(
        tag=cell.tag,
        student=cell.student,
        arm=cell.arm,
        seed=cell.seed,
        state=state,
        tasks=losses,
        cost_usd=meters.usd(cost),
        trials=0 if started is None else len(started.trials),
        trials_ended=len(outcomes),
        attempts=len(_attempts(cells, cell.tag)),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def verify_edit_cells(cells: Path, outcomes: Sequence[Any]) -> None:
    """Rebuild every ended editing cell's report from its evidence, as ``wsm benchmark report``.

    Other outcomes (a serve-and-learn grid's) are left alone.

    Raises:
        IntegrityError: a checkpoint, receipt or grade changed after it was recorded.
    """
    for outcome in outcomes:
        if isinstance(outcome, EditOutcome) and outcome.state in ENDED:
            build_report(cells / outcome.tag)


# -- the leaderboard ------------------------------------------------------------------------


def _number(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.6f}"


def edit_leaderboard(outcomes: Sequence[EditOutcome]) -> tuple[list[str], list[dict[str, str]]]:
    """Rows (student, arm), in the grid's order: each task's losses over the seeds.

    A row's value is the mean over its seeds' cells, ``_sd`` their sample standard
    deviation. A row with a cell that has no end record reads ``unknown``; one with
    a cell that ended otherwise than completed (blocked, failed) is blank: never a
    mean of some seeds only.
    """
    tasks = list(dict.fromkeys(t for o in outcomes for t in o.tasks))
    columns = ["student", "arm"]
    for task in tasks:
        columns += [f"{task}_task_loss", f"{task}_task_loss_sd", f"{task}_regression_loss"]
    columns += ["seeds", "api_cost_usd"]
    rows: dict[tuple[str, str], list[EditOutcome]] = {}
    for o in outcomes:
        rows.setdefault((o.student, o.arm), []).append(o)
    table = []
    for (student, arm), cells in rows.items():
        row = {"student": student, "arm": arm}
        unknown = any(c.state not in ENDED for c in cells)
        whole = all(c.state == "completed" for c in cells)
        for task in tasks:
            for field, name in (("task_loss", "task_loss"), ("regression_loss", "regression_loss")):
                values = [getattr(c.tasks[task], field) for c in cells if task in c.tasks]
                present = [v for v in values if v is not None]
                full = whole and len(present) == len(cells)
                row[f"{task}_{name}"] = (
                    "unknown" if unknown else _number(statistics.fmean(present)) if full else ""
                )
                if field == "task_loss":
                    sd = statistics.stdev(present) if full and len(present) > 1 else None
                    row[f"{task}_task_loss_sd"] = "unknown" if unknown else _number(sd)
        row["seeds"] = str(sum(c.state == "completed" for c in cells))
        row["api_cost_usd"] = meters.usd(sum((Decimal(c.cost_usd) for c in cells), Decimal(0)))
        table.append(row)
    return columns, table


# -- in a status, a page --------------------------------------------------------------------


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _status_line(cell: Mapping[str, Any]) -> str:
    """A cell in ``mw grid status``: state, trials, each task's losses, spend."""
    losses = ", ".join(
        f"{task} loss {_loss(v['task_loss'])} (regression {_loss(v['regression_loss'])})"
        for task, v in cell["tasks"].items()
    )
    aside = f", {cell['attempts']} attempts set aside" if cell["attempts"] else ""
    return (
        f"{cell['state']}, {cell['trials_ended']}/{cell['trials']} trials ended{aside}, "
        f"{losses}, ${cell['cost_usd']}"
    )


def _section(cells: Sequence[Mapping[str, Any]]) -> Section:
    """``mw attach GRID``'s table: state, trials ended, each task's loss, spend."""
    tasks = list(dict.fromkeys(t for c in cells for t in c["tasks"]))
    rows = []
    for c in cells:
        losses = [c["tasks"].get(t, {}).get("task_loss") for t in tasks]
        rows.append(
            (
                c["tag"],
                c["state"] + (f" ({c['attempts']} set aside)" if c["attempts"] else ""),
                Bar("trials", c["trials_ended"], c["trials"]),
                *("-" if v is None else f"{v:.4f}" for v in losses),
                c["cost_usd"],
            )
        )
    columns = ("cell", "state", "trials", *(f"{t} loss" for t in tasks), "USD")
    return Section(title="", columns=columns, rows=rows, names=2)


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _losses_svg(columns: list[str], rows: list[dict[str, str]]) -> str:
    """Each (student, arm) row's mean task loss per task, as grouped bars."""
    tasks = [c.removesuffix("_task_loss") for c in columns if c.endswith("_task_loss")]
    groups = [f"{r['student']} · {r['arm']}" for r in rows]
    series = [(task, [_float(r[f"{task}_task_loss"]) for r in rows]) for task in tasks]
    tips = [
        [
            f"{r['student']} {r['arm']}: {task} loss {r[f'{task}_task_loss'] or '-'} "
            f"(sd {r[f'{task}_task_loss_sd'] or '-'}, {r['seeds']} seeds)"
            for r in rows
        ]
        for task in tasks
    ]
    return bar_chart(Bars(groups, series, tips), x_label="student · arm", y_label="task loss")


def _html(outcomes: Sequence[EditOutcome], columns: list[str], rows: list[dict[str, str]]) -> str:
    detail = html_table(
        ["cell", "state", "trials ended", "attempts set aside", "cost (USD)"],
        [
            [o.tag, o.state, f"{o.trials_ended}/{o.trials}", str(o.attempts), o.cost_usd]
            for o in outcomes
        ],
    )
    return (
        f"<h2>Cells</h2>{detail}<h2>Task losses</h2><p>each row's mean private-partition loss "
        f"over its seeds (lower is better; hover a bar for its spread)</p>"
        f"{_losses_svg(columns, rows)}"
    )


class EditingGrid:
    """Weight-editing grids (:mod:`mw_actors._campaign_kind`'s ``GridKind``)."""

    title: str = "an editing grid"
    fields: tuple[str, ...] = ("config", "arms", "seeds", "students")
    names: int = 2  # student, arm
    grid_type: type[Any] = EditGridSpec

    def grid(
        self, raw: Mapping[str, Any], source: str, base: Path, allocation: Decimal
    ) -> EditGridSpec:
        return edit_grid(raw, source, base, allocation)

    def check(self, grid: EditGridSpec, context: GridContext) -> None:
        check_edit_cells(grid, context.settings)

    def lay_out(self, grid: EditGridSpec, root: Path) -> None:
        write_cell_configs(grid, root)

    def job(
        self,
        grid: EditGridSpec,
        cell: EditCell,
        root: Path,
        cells: Path,
        *,
        resume: bool,
        context: GridContext,
    ) -> EditJob:
        # Resumed: a new attempt, the interrupted one set aside and kept.
        options = require_options(grid, context.settings)
        return EditJob(cell.tag, config_path(root, cell), cells / cell.tag, options)

    def outcome(self, grid: EditGridSpec, cells: Path, cell: EditCell) -> EditOutcome:
        return read_edit_cell(cells, cell, grid.tasks)

    def lines(self, grid: EditGridSpec, cells: Path, cell: EditCell) -> list[meters.LedgerLine]:
        return edit_cell_lines(cells, cell)

    def leaderboard(
        self, outcomes: Sequence[EditOutcome]
    ) -> tuple[list[str], list[dict[str, str]]]:
        return edit_leaderboard(outcomes)

    def section(self, cells: Sequence[Mapping[str, Any]]) -> Section:
        return _section(cells)

    def status_line(self, cell: Mapping[str, Any]) -> str:
        return _status_line(cell)

    def html(
        self, outcomes: Sequence[EditOutcome], columns: list[str], rows: list[dict[str, str]]
    ) -> str:
        return _html(outcomes, columns, rows)

    def verify(self, cells: Path, outcomes: Sequence[EditOutcome]) -> None:
        verify_edit_cells(cells, outcomes)


EDITING_GRID = EditingGrid()
